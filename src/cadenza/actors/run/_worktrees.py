"""``options.isolation: worktree-per-step``: each step that can write works in a git worktree.

A command, tool or agent step of such a run gets a fresh worktree of the
workflow's repository, checked out at ``HEAD`` (what is committed: changes not
yet committed in the main checkout are not in it). Its files, its commands'
working directory and the agent's ``bash``, ``read``, ``write``, ``glob`` and
``grep`` are all inside it, so two steps running at once never see each
other's files.

When the step completes, what it changed is committed on a branch of its own,
``cadenza/RUN_ID/ADDRESS-ATTEMPT``, and the worktree is removed; the branch
is reported (``worktree_done``) for the workflow or a person to merge. A step
that changed nothing leaves no branch. When the step fails or is cancelled its
worktree is kept as it was, for inspection, and reported (``worktree_kept``).
Worktrees live in the repository's git directory
(``.git/cadenza-worktrees/RUN_ID/``), out of the way of the main checkout's
``git status``, ``glob`` and ``grep``.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import anyio

from cadenza.errors import CadenzaError

__all__ = ["IsolationError", "StepWorktree", "Worktrees"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# A commit needs an author; a machine with no git identity gets this one.
_IDENTITY: Final = ("-c", "user.name=Cadenza", "-c", "user.email=cadenza@localhost")


class IsolationError(CadenzaError):
    """A step's worktree could not be made (no git repository, no commit, git failed)."""


class StepWorktree:
    """One step's worktree: where it is, and the step's directory inside it."""

    __slots__ = ("base_dir", "branch", "commit", "path")

    def __init__(self, path: Path, base_dir: Path, branch: str) -> None:
        self.path = path
        self.base_dir = base_dir
        self.branch = branch
        self.commit: str | None = None  # set once the step's changes are committed


class Worktrees:
    """The worktrees of one run's steps.

    Args:
        run_id: The run; it names the worktrees' directory and branches.
        base_dir: The workflow's directory, inside the repository.
    """

    def __init__(self, run_id: str, base_dir: Path) -> None:
        self.run_id = run_id
        self.base_dir = base_dir.resolve()
        # git takes its own locks on the repository: two `worktree add`s at once fail.
        self._lock = anyio.Lock()
        self._repository: tuple[Path, Path] | None = None  # top level, common git dir

    @asynccontextmanager
    async def checkout(self, address: str, attempt: int) -> AsyncIterator[StepWorktree]:
        """A fresh worktree for one attempt of a step; removed after success, kept after failure.

        Raises:
            IsolationError: The worktree could not be made or finished.
        """
        top, git_dir = await self._find_repository()
        name = _UNSAFE.sub("_", f"{address}-{attempt}")
        path = git_dir / "cadenza-worktrees" / _UNSAFE.sub("_", self.run_id) / name
        branch = f"cadenza/{_UNSAFE.sub('_', self.run_id)}/{name}"
        async with self._lock:
            if path.exists():  # an attempt a crash interrupted: start it afresh
                await self._git(top, "worktree", "remove", "--force", str(path))
            await self._git(top, "worktree", "add", "--detach", str(path), "HEAD")
        worktree = StepWorktree(path, path / self.base_dir.relative_to(top), branch)
        yield worktree  # an exception (failure, cancellation) leaves it where it is
        async with self._lock:
            await self._finish(top, worktree)

    async def _finish(self, top: Path, worktree: StepWorktree) -> None:
        path = worktree.path
        changed = await self._git(path, "status", "--porcelain", "--untracked-files=all")
        if changed.strip():
            await self._git(path, "switch", "--quiet", "-c", worktree.branch)
            await self._git(path, "add", "--all")
            message = f"cadenza: {worktree.branch.split('/', 2)[2]} of run {self.run_id}"
            identity = await self._identity(path)
            await self._git(path, *identity, "commit", "--quiet", "--no-verify", "-m", message)
            worktree.commit = (await self._git(path, "rev-parse", "HEAD")).strip()
        else:
            worktree.branch = ""
        await self._git(top, "worktree", "remove", "--force", str(path))

    async def _identity(self, path: Path) -> tuple[str, ...]:
        """The author to commit as: the user's own, or Cadenza where git knows none."""
        try:
            await self._git(path, "config", "user.email")
        except IsolationError:
            return _IDENTITY
        return ()

    async def _find_repository(self) -> tuple[Path, Path]:
        if self._repository is None:
            where = self.base_dir
            try:
                top = await self._git(where, "rev-parse", "--show-toplevel")
                git_dir = await self._git(where, "rev-parse", "--git-common-dir")
                await self._git(where, "rev-parse", "--verify", "--quiet", "HEAD")
            except IsolationError as error:
                raise IsolationError(
                    f"options.isolation: worktree-per-step needs the workflow's directory "
                    f"{where} in a git repository with at least one commit ({error})"
                ) from None
            common = Path(git_dir.strip())
            self._repository = (
                Path(top.strip()),
                (common if common.is_absolute() else (where / common).resolve()),
            )
        return self._repository

    async def _git(self, cwd: Path, *args: str) -> str:
        environ = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
        try:
            done = await anyio.run_process(["git", *args], cwd=cwd, env=environ, check=False)
        except OSError as error:
            raise IsolationError(f"cannot run git: {error}") from None
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip() or f"exit code {done.returncode}"
            raise IsolationError(f"git {args[0]} failed: {said}")
        return done.stdout.decode(errors="replace")
