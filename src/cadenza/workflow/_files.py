"""Reading the files a workflow names: confined to its tree, regular, and capped while read.

Every path a document gives (``include:``, ``@file`` prompts and instructions)
resolves inside a *root*: the directory of the workflow the user named (or the
directory a caller such as ``cadenza serve`` names). A path that leaves it,
directly or through a symbolic link, is refused before anything is opened, so
``include: /etc/shadow`` cannot make validation quote that file. A path the
operating system cannot use (a NUL byte, too long) is a refusal too, never a
traceback. Only regular files are read (``/dev/zero`` and FIFOs never end), and
the size cap applies while reading, not from a ``stat`` that can lie.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["FileRefused", "read_capped", "resolve_inside"]


class FileRefused(Exception):
    """A path or file that is not read; the message says why, without its content."""


def resolve_inside(root: Path, base: Path, reference: str) -> Path:
    """``reference`` (relative to ``base``) resolved, refused unless it stays inside ``root``.

    Raises:
        FileRefused: A NUL byte, a path the OS cannot resolve, or one outside ``root``.
    """
    if "\0" in reference:
        raise FileRefused("the path holds a NUL byte")
    try:
        path = (base / reference).resolve()
        inside = path.is_relative_to(root.resolve())
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise FileRefused(f"the path cannot be used: {reason}") from None
    if not inside:
        raise FileRefused(
            f"it leads outside the workflow's directory {str(root)!r}; "
            "included and @ files must live in its tree"
        )
    return path


def read_capped(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, refused past ``limit`` bytes.

    Raises:
        FileRefused: Not a regular file, or larger than ``limit``.
        OSError: The file cannot be opened or read (missing, no permission...).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)  # a FIFO must not block the open
    descriptor = os.open(path, flags)
    with os.fdopen(descriptor, "rb") as file:
        mode = os.fstat(file.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise FileRefused("it is not a regular file")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise FileRefused(f"it is larger than {_size(limit)}, the cap")
    return data


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"
