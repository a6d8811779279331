"""``cadenza run``'s tool permissions: ``--sandbox``, ``--allow``/``--deny`` and ``--ask``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Collection
from typing import TYPE_CHECKING, Literal, Protocol

import anyio
import anyio.to_thread

from cadenza.errors import CadenzaError
from cadenza.workflow import rule_problem

if TYPE_CHECKING:  # the runtime loads only for the commands that run
    from cadenza.actors import ToolPolicy, ToolRequest

__all__ = ["TerminalAsker", "add_permission_options", "tool_policy"]

_PREVIEW = 300  # characters of a call's arguments shown in the question


class Holdable(Protocol):
    """The live progress display: held while a question is on the screen."""

    def hold(self) -> None: ...

    def release(self) -> None: ...


def add_permission_options(parser: argparse.ArgumentParser) -> None:
    """Adds the permission flags to ``run`` (and ``resume``)."""
    parser.add_argument(
        "--sandbox",
        action="store_true",
        help="agents may only read: read, glob and grep run; any other tool call is refused",
    )
    parser.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="RULE",
        help="allow tool calls matching RULE (NAME or NAME(PATTERN)); others are refused or asked",
    )
    parser.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="RULE",
        help="refuse tool calls matching RULE (NAME or NAME(PATTERN))",
    )
    parser.add_argument(
        "--ask",
        action="store_true",
        help="ask at the terminal before each tool call no rule allowed",
    )


def tool_policy(
    args: argparse.Namespace,
    asker: TerminalAsker | None,
    servers: Collection[str] | None = None,
) -> ToolPolicy | None:
    """The runtime's policy the flags ask for (None: none given).

    ``servers``: the MCP servers of the workflow the flags are for (None: not
    known, as for ``resume --all``), which a ``SERVER.*`` rule must name.

    Raises:
        CadenzaError: A rule is malformed or names no tool; the message names the flag.
    """
    for flag in ("allow", "deny"):
        for rule in getattr(args, flag):
            problem = rule_problem(rule, servers, in_workflow=False)
            if problem is not None:
                raise CadenzaError(f"--{flag} {rule!r}: {problem}")
    if not (args.sandbox or args.allow or args.deny or asker is not None):
        return None
    from cadenza.actors import ToolPolicy

    return ToolPolicy(
        sandbox=args.sandbox,
        allow=tuple(args.allow),
        deny=tuple(args.deny),
        ask=asker,
    )


class TerminalAsker:
    """Asks the person at the terminal about a tool call: yes, no, or always (this tool).

    One question at a time: agents running in parallel wait their turn. The
    live progress is held while a question is on the screen.

    Raises:
        CadenzaError: stdin is not a terminal (nobody could answer).
    """

    def __init__(self) -> None:
        if not sys.stdin.isatty():
            raise CadenzaError("--ask needs a terminal to ask on: stdin is not one")
        self.progress: Holdable | None = None
        self._lock = anyio.Lock()

    async def __call__(self, request: ToolRequest) -> Literal["yes", "no", "always"]:
        async with self._lock:
            if self.progress is not None:
                self.progress.hold()
            try:
                return await self._ask(request)
            finally:
                if self.progress is not None:
                    self.progress.release()

    async def _ask(self, request: ToolRequest) -> Literal["yes", "no", "always"]:
        subject = request.subject
        if len(subject) > _PREVIEW:
            subject = subject[: _PREVIEW - 1] + "…"
        who = f"{request.step} ({request.agent})" if request.agent else request.step
        sys.stderr.write(
            f"? {who} wants to run {request.tool}: {subject}\n"
            "  allow it? [y]es, [n]o, [a]lways for this tool: "
        )
        sys.stderr.flush()
        # stdin blocks: a worker thread reads it, so the run goes on meanwhile.
        line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        answer = line.strip().lower()
        if answer in ("a", "always"):
            return "always"
        if answer in ("y", "yes"):
            return "yes"
        return "no"
