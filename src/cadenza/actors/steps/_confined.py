"""The built-in tools' file system: the workflow's directory tree, by real path.

A model chooses the paths ``read``, ``write``, ``glob``, ``grep`` and ``bash``
are given, and a checkout may ship symbolic links, so a path is trusted only
by where it really leads:

- it is resolved first (every symlink followed, ``..`` applied) and refused
  unless the result lies inside the tree;
- it is then opened one component at a time from the tree's root, each
  relative to the directory opened before and with ``O_NOFOLLOW``: what is
  opened is what was checked, and a link swapped in between the check and the
  open fails the open (``ELOOP``) instead of being followed;
- only regular files are opened, and only after ``lstat`` said so: a FIFO, a
  device or a socket is never opened (an open could block, or act), and the
  open is non-blocking besides, in case one was swapped in. A symlink loop
  fails to resolve and is reported as one; nothing spins;
- a walk (``glob``, ``grep``) lists directories through the same opens, never
  descends into a symlinked directory (no loop, no way out), and resolves each
  symlink it meets like any path: one leading out, a loop or a special file
  is skipped with a note, never opened.

What a path cannot show: a hard link is one file under two names, so a hard
link inside the tree to a file outside it is read as a file of the tree (on
Linux, ``fs.protected_hardlinks`` keeps anyone from linking a file they could
not already read or write).
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from ._tools import ToolError

__all__ = ["DIRECTORY", "NotAFile", "Place", "Skips", "Tree", "quoted"]

_FOLLOW_NOTHING: Final = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
_DIRECTORY_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_MAGIC: Final = re.compile(r"[*?\[]")
_SHOWN_NOTES: Final = 20
"""Skipped paths a note names one by one; the rest are counted."""
_SHOWN_PATH: Final = 200
"""Characters of a path quoted in a message (a model may send a very long one)."""

DIRECTORY: Final = "a directory"
"""`NotAFile.kind` of a directory."""
_LOOP: Final = "a symlink loop"
_OUTSIDE: Final = "leads outside the workflow's directory"


def quoted(path: str) -> str:
    """``path`` quoted for a message, cut if it is very long."""
    if len(path) > _SHOWN_PATH:
        return repr(path[:_SHOWN_PATH]) + f" [... {len(path) - _SHOWN_PATH} more]"
    return repr(path)


def _kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, as a message says it."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return DIRECTORY
    if stat.S_ISLNK(mode):  # still a link at its real path: it did not resolve
        return _LOOP
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


class NotAFile(Exception):
    """The path is something a tool does not open: a directory, a FIFO, a device, a loop."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class Place:
    """A path inside the tree: as the caller wrote it, and where it really is."""

    shown: str
    parts: tuple[str, ...]
    """The real path's components below the tree's root (none: the root itself)."""


class Skips:
    """Paths a walk passed over and why, for the note at the end of its output."""

    def __init__(self) -> None:
        self.count = 0
        self.named: list[str] = []

    def add(self, shown: str, reason: str) -> None:
        self.count += 1
        if len(self.named) < _SHOWN_NOTES:
            self.named.append(f"{shown} ({reason})")

    def note(self) -> str | None:
        """One line naming what was skipped, or None when nothing was."""
        if not self.count:
            return None
        more = self.count - len(self.named)
        rest = f"; and {more} more" if more else ""
        return f"[skipped, never opened: {'; '.join(self.named)}{rest}]"


@dataclass(frozen=True, slots=True)
class _Entry:
    """One name in a directory, with where it leads when it is a symlink inside the tree."""

    shown: str
    parts: tuple[str, ...]
    is_dir: bool
    is_link: bool
    skipped: str | None = None
    """Why the entry may not be listed or opened (out of the tree, a loop, a FIFO...)."""

    @property
    def name(self) -> str:
        return self.shown.rpartition("/")[2]


class Tree:
    """The workflow's directory tree, as the built-in tools may see it.

    Every method does blocking file work: call them from a worker thread.
    """

    __slots__ = ("root",)

    def __init__(self, base_dir: Path) -> None:
        self.root = os.path.realpath(base_dir)

    def path(self, place: Place) -> Path:
        """The real path of ``place``, for messages and for ``bash``'s working directory."""
        return Path(self.root, *place.parts)

    def locate(self, given: str) -> Place:
        """The place ``given`` (relative to the root, or absolute) really names.

        Surrounding whitespace is dropped: a path often comes from a model's answer.

        Raises:
            ToolError: The path is empty, holds a NUL byte, or leads outside the tree.
        """
        shown = given.strip()
        if not shown:
            raise ToolError("the path is empty")
        if "\0" in shown:
            raise ToolError(f"the path {quoted(shown)} holds a NUL byte")
        place = self._resolve(os.path.join(self.root, shown), shown)
        if place is None:
            raise ToolError(
                f"{quoted(shown)} {_OUTSIDE} ({self.root}): the built-in tools reach "
                "only what is inside it, symlinks resolved"
            )
        return place

    def _resolve(self, path: str, shown: str) -> Place | None:
        """``path`` resolved, as a place; None if it leads out of the tree."""
        real = os.path.realpath(path)  # not strict: a loop stays a link, found when opened
        if real == self.root:
            return Place(shown, ())
        relative = os.path.relpath(real, self.root)
        if relative == os.pardir or relative.startswith(os.pardir + os.sep):
            return None
        return Place(shown, tuple(relative.split(os.sep)))

    @contextmanager
    def _directory(self, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
        """A descriptor of the directory ``parts``, reached without following any symlink.

        ``create`` makes the missing directories on the way, as ``mkdir -p`` does.
        """
        descriptor = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for part in parts:
                try:
                    below = os.open(part, _DIRECTORY_FLAGS, dir_fd=descriptor)
                except FileNotFoundError:
                    if not create:
                        raise
                    with suppress(FileExistsError):  # made meanwhile: open it like any other
                        os.mkdir(part, dir_fd=descriptor)
                    below = os.open(part, _DIRECTORY_FLAGS, dir_fd=descriptor)
                os.close(descriptor)
                descriptor = below
            yield descriptor
        finally:
            os.close(descriptor)

    def mode(self, place: Place) -> int:
        """``place``'s ``st_mode``, a symlink's own (never followed).

        Raises:
            OSError: It does not exist, or cannot be reached.
        """
        if not place.parts:
            return os.stat(self.root).st_mode
        with self._directory(place.parts[:-1]) as parent:
            return os.stat(place.parts[-1], dir_fd=parent, follow_symlinks=False).st_mode

    @contextmanager
    def reading(self, place: Place) -> Iterator[BinaryIO]:
        """The regular file ``place``, open for reading.

        Raises:
            NotAFile: It is a directory, a FIFO, a device, a socket or a symlink loop.
            OSError: It does not exist, or cannot be opened.
        """
        if not place.parts:
            raise NotAFile(DIRECTORY)
        with self._directory(place.parts[:-1]) as parent:
            name = place.parts[-1]
            _regular(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
            descriptor = os.open(name, os.O_RDONLY | _FOLLOW_NOTHING, dir_fd=parent)
        with os.fdopen(descriptor, "rb") as handle:
            _regular(os.fstat(descriptor).st_mode)  # swapped since the lstat: still refused
            yield handle

    def write(self, place: Place, content: bytes) -> None:
        """Replaces (or creates) the regular file ``place`` and the directories above it.

        Raises:
            NotAFile: It exists and is not a regular file.
            OSError: It cannot be created or written.
        """
        if not place.parts:
            raise NotAFile(DIRECTORY)
        with self._directory(place.parts[:-1], create=True) as parent:
            name = place.parts[-1]
            with suppress(FileNotFoundError):
                _regular(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
            flags = os.O_WRONLY | os.O_CREAT | _FOLLOW_NOTHING  # truncated once checked
            descriptor = os.open(name, flags, 0o666, dir_fd=parent)
        with os.fdopen(descriptor, "wb") as handle:
            _regular(os.fstat(descriptor).st_mode)
            handle.truncate(0)
            handle.write(content)

    # Walks ----------------------------------------------------------------------------

    def _entries(self, parts: tuple[str, ...], shown: str) -> list[_Entry]:
        """The directory ``parts``' entries, sorted, each resolved if it is a symlink.

        Raises:
            OSError: The directory cannot be listed.
        """
        with self._directory(parts) as descriptor, os.scandir(descriptor) as listing:
            found = [(entry.name, _entry_mode(entry)) for entry in listing]
        entries = []
        for name, mode in sorted(found):
            child = f"{shown}/{name}" if shown else name
            if stat.S_ISDIR(mode):
                entries.append(_Entry(child, (*parts, name), is_dir=True, is_link=False))
            elif stat.S_ISREG(mode):
                entries.append(_Entry(child, (*parts, name), is_dir=False, is_link=False))
            elif stat.S_ISLNK(mode):
                entries.append(self._link(os.path.join(self.root, *parts, name), child))
            else:
                entries.append(_Entry(child, (), False, False, skipped=_kind(mode)))
        return entries

    def _link(self, path: str, shown: str) -> _Entry:
        """The entry a symlink makes: its real file or directory, or why it is skipped."""
        place = self._resolve(path, shown)
        if place is None:
            return _Entry(shown, (), False, True, skipped=_OUTSIDE)
        try:
            mode = self.mode(place)
        except OSError:  # dangling, or a link on the way changed: nothing to open
            return _Entry(shown, (), False, True, skipped="a symlink to nothing")
        if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            return _Entry(shown, place.parts, stat.S_ISDIR(mode), True)
        return _Entry(shown, (), False, True, skipped=_kind(mode))

    def _lookup(self, parts: tuple[str, ...], shown: str, name: str) -> _Entry | None:
        """The entry ``name`` of the directory ``parts``, or None when there is none."""
        child = f"{shown}/{name}" if shown else name
        try:
            mode = self.mode(Place(child, (*parts, name)))
        except OSError:
            return None
        if stat.S_ISLNK(mode):
            return self._link(os.path.join(self.root, *parts, name), child)
        if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            return _Entry(child, (*parts, name), stat.S_ISDIR(mode), False)
        return _Entry(child, (), False, False, skipped=_kind(mode))

    def files(
        self, start: Place, wanted: Callable[[str], bool], stop: threading.Event, skips: Skips
    ) -> Iterator[Place]:
        """The regular files under the directory ``start`` whose name is ``wanted``.

        In sorted order: a directory's files, then each subdirectory's, depth first.
        ``Place.shown`` is relative to ``start``. A symlink to a file inside the tree
        gives that file; a symlinked directory is not entered.
        """
        pending: list[tuple[tuple[str, ...], str]] = [(start.parts, "")]
        while pending and not stop.is_set():
            parts, shown = pending.pop()
            try:
                entries = self._entries(parts, shown)
            except OSError:  # unreadable, or gone since it was listed: as grep -s
                continue
            below = []
            for entry in entries:
                if entry.is_dir and not entry.is_link:
                    below.append((entry.parts, entry.shown))
                elif not wanted(entry.name):
                    continue
                elif entry.skipped is not None:
                    skips.add(entry.shown, entry.skipped)
                elif not entry.is_dir:
                    yield Place(entry.shown, entry.parts)
            pending.extend(reversed(below))

    def glob(
        self, start: Place, pattern: str, cap: int, stop: threading.Event, skips: Skips
    ) -> set[str]:
        """The paths under the directory ``start`` that ``pattern`` matches, relative to it.

        ``pattern`` is relative, without ``..`` (the caller checks). The rules are
        Python's ``glob(recursive=True)``'s: ``**`` alone as a part matches any
        number of directories, names starting with ``.`` match only a part
        starting with ``.``, ``**`` skips them; but a symlink is listed only when it
        resolves inside the tree, and ``**`` does not descend into symlinked directories.

        Raises:
            ToolError: More than ``cap`` paths match, or more than ``cap``
                directories are on the way (links going round a loop, say).
        """
        *leading, last = pattern.split("/")
        directories: dict[str, tuple[str, ...]] = {"": start.parts}
        for part in leading:
            if part in ("", "."):
                continue
            reached: dict[str, tuple[str, ...]] = {}
            for shown, real in directories.items():
                if stop.is_set():
                    return set()
                if part == "**":
                    reached[shown] = real
                    reached.update(self._everything(real, shown, stop, skips, dirs_only=True))
                else:
                    reached.update(
                        (entry.shown, entry.parts)
                        for entry in self._matching(real, shown, part, skips)
                        if entry.is_dir
                    )
                _bound(len(reached), cap, pattern, "reaches more than {cap} directories on the way")
            directories = reached
        found: set[str] = set()
        for shown, real in directories.items():
            if stop.is_set():
                break
            if last == "":  # a trailing slash: the directories themselves
                found.update([shown + "/"] if shown else [])
            elif last == "**":
                found.update([shown + "/"] if shown else [])
                found.update(self._everything(real, shown, stop, skips, dirs_only=False))
            else:
                found.update(entry.shown for entry in self._matching(real, shown, last, skips))
            _bound(len(found), cap, pattern, "matches more than {cap} paths")
        return found

    def _matching(self, real: tuple[str, ...], shown: str, part: str, skips: Skips) -> list[_Entry]:
        """The entries of a directory that one pattern part names (a skipped one noted)."""
        if not _MAGIC.search(part):
            found = self._lookup(real, shown, part)
            candidates = [] if found is None else [found]
        else:
            try:
                entries = self._entries(real, shown)
            except OSError:
                return []
            hidden = part.startswith(".")
            candidates = [
                entry
                for entry in entries
                if (hidden or not entry.name.startswith("."))
                and fnmatch.fnmatchcase(entry.name, part)
            ]
        matched = []
        for entry in candidates:
            if entry.skipped is not None:
                skips.add(entry.shown, entry.skipped)
            else:
                matched.append(entry)
        return matched

    def _everything(
        self,
        real: tuple[str, ...],
        shown: str,
        stop: threading.Event,
        skips: Skips,
        *,
        dirs_only: bool,
    ) -> dict[str, tuple[str, ...]]:
        """What ``**`` matches below a directory: every entry not hidden, at any depth."""
        found: dict[str, tuple[str, ...]] = {}
        pending = [(real, shown)]
        while pending and not stop.is_set():
            parts, where = pending.pop()
            try:
                entries = self._entries(parts, where)
            except OSError:
                continue
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if entry.skipped is not None:
                    if not dirs_only:
                        skips.add(entry.shown, entry.skipped)
                    continue
                if entry.is_dir and not entry.is_link:
                    pending.append((entry.parts, entry.shown))
                if entry.is_dir or not dirs_only:
                    found[entry.shown] = entry.parts
        return found


def _bound(count: int, cap: int, pattern: str, says: str) -> None:
    if count > cap:
        raise ToolError(f"{pattern!r} {says.format(cap=cap)}; narrow the pattern or the path")


def _regular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise NotAFile(_kind(mode))


def _entry_mode(entry: os.DirEntry[str]) -> int:
    """The entry's own file type bits, from the directory listing when it has them."""
    if entry.is_symlink():
        return stat.S_IFLNK
    if entry.is_dir(follow_symlinks=False):
        return stat.S_IFDIR
    if entry.is_file(follow_symlinks=False):
        return stat.S_IFREG
    try:
        return entry.stat(follow_symlinks=False).st_mode
    except OSError:  # gone meanwhile
        return 0
