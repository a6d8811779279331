"""Running a ``tool`` step (zenflow section 4.1): one tool call, no model.

``tool`` names a built-in with zenflow's name and arguments (``bash``, ``read``,
``write``, ``glob``, ``grep``) or a Python function ``pkg.module:function``, the
same references an agent's ``tools:`` accept. The call's arguments are the
step's ``toolInput``: a top-level string that starts with ``$`` is CEL,
compiled like a condition and evaluated against the step's scope, and must
give a string; every other value is passed as written. ``toolInput`` is never
templated: ``{{`` in it is literal text (a file's content may well hold some).

Arguments are checked before the call, as a model's are: a Python tool's by
`python_tool` (from the function's signature), a built-in's by its input
Struct below. Paths are relative to the workflow's directory, like every path
in a workflow, and the built-ins reach nothing outside it, by real path
(``_confined``): a ``$`` value may be a model's answer, and an agent's calls
run these same functions. ``bash`` runs like a ``command`` step (``/bin/sh
-c`` in its own process group, stdout as content, a non-zero exit fails the
step). A step with a ``$`` value passes the run's permission policy first, as
a model's call does: its arguments are chosen at run time, maybe by a model.
The step's content is the tool's return string and its result is null; each
call is announced by a pair of ``tool_call`` events, as an agent's calls are.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import stat
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
import msgspec

from cadenza._redact import redact
from cadenza.actors.run import StepFailure
from cadenza.errors import ExpressionEvaluationError
from cadenza.kernel import Clock, call_in_thread
from cadenza.protocols import ErrorInfo, EventType, ToolCall, format_duration
from cadenza.workflow import compile_expression, preview, quote, type_name

from ._command import run_command
from ._confined import DIRECTORY, NotAFile, Place, Skips, Tree, quoted
from ._tools import ToolError, python_tool

if TYPE_CHECKING:
    from cadenza.actors.run import RunJournal

__all__ = [
    "BUILTIN_TOOLS",
    "GLOB_CAP",
    "GREP_CAP",
    "GREP_LINE_CAP",
    "READ_CAP",
    "BashInput",
    "CallSite",
    "GlobInput",
    "GrepInput",
    "ReadInput",
    "WriteInput",
    "builtin",
    "call_tool",
    "tool_arguments",
]

READ_CAP = 1024 * 1024
"""Bytes ``read`` returns at most (zenflow's limit); a larger file fails the step."""

GLOB_CAP = 10_000
"""Paths ``glob`` returns at most; a pattern that matches more fails the step."""

GREP_CAP = 1000
"""Matching lines ``grep`` returns; the search stops there, and says so."""

GREP_LINE_CAP = 500
"""Characters of one matching line that ``grep`` shows; a longer line is cut, marked."""

_PREVIEW = 2000
"""Characters of a call's input and output shown in its ``tool_call`` events."""

_BINARY_PROBE = 8192
"""Bytes ``grep`` looks at for a NUL, which marks a file as binary (skipped)."""


class _Input(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of a built-in tool: zenflow's names, unknown ones rejected."""


class ReadInput(_Input, frozen=True):
    """``read``: the text of one file."""

    path: str


class WriteInput(_Input, frozen=True):
    """``write``: replace (or create) a file, and the directories above it."""

    path: str
    content: str


class GlobInput(_Input, frozen=True):
    """``glob``: paths matching a pattern (``**`` crosses directories)."""

    pattern: str
    path: str = "."


class GrepInput(_Input, frozen=True):
    """``grep``: matching lines under a file or directory."""

    pattern: str
    path: str = "."
    glob: str | None = None
    regex: bool = False


class BashInput(_Input, frozen=True):
    """``bash``: a shell command, run as a ``command`` step runs."""

    command: str
    timeout_seconds: Annotated[int, msgspec.Meta(ge=1)] | None = None
    working_directory: str | None = None


_In = TypeVar("_In", bound=_Input)


def _convert(arguments: dict[str, Any], kind: type[_In]) -> _In:
    try:
        return msgspec.convert(arguments, kind)
    except msgspec.ValidationError as error:
        raise ToolError(f"invalid arguments: {error}") from None


# What the arguments are ------------------------------------------------------------


def tool_arguments(
    tool_input: Mapping[str, Any] | None,
    activation: Mapping[str, object],
    step_ids: frozenset[str],
) -> dict[str, Any]:
    """The call's arguments: ``toolInput`` with its ``$`` strings evaluated.

    Raises:
        ExpressionEvaluationError: An expression failed, or gave something other
            than a string; the message names the field.
    """
    arguments: dict[str, Any] = {}
    for name, value in (tool_input or {}).items():
        if isinstance(value, str) and value.startswith("$"):
            value = _evaluate(name, value[1:], activation, step_ids)
        arguments[name] = value
    return arguments


def _evaluate(
    name: str, source: str, activation: Mapping[str, object], step_ids: frozenset[str]
) -> str:
    expression = compile_expression(source, step_ids=step_ids)  # compiled at load: cached
    try:
        value = expression.evaluate(activation)
    except ExpressionEvaluationError as error:
        raise ExpressionEvaluationError(
            f"toolInput.{name}: {error.message}", source=source, name=error.name
        ) from None
    if not isinstance(value, str):
        raise ExpressionEvaluationError(
            f"toolInput.{name}: {quote(source)} must give a string, but it gave "
            f"{type_name(value)} {preview(value)} (convert it with string(...))",
            source=source,
        )
    return value


# The step ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CallSite:
    """Where one tool call runs: the workflow's directory and the step attempt."""

    base_dir: Path
    run_id: str
    address: str
    attempt: int
    clock: Clock


Runner = Callable[[dict[str, Any]], Awaitable[str]]


async def call_tool(
    name: str, arguments: dict[str, Any], site: CallSite, journal: RunJournal
) -> tuple[str, None]:
    """Calls the tool ``name`` with ``arguments`` (already evaluated), announcing it in
    ``journal``; returns ``(content, None)``. A worker runs a tool step through this too.

    Raises:
        StepFailure: The tool is unknown, its arguments do not fit, it failed
            (``ToolError``), or ``bash`` exited non-zero (``CommandFailed``).
        Exception: What a Python tool raised, or could not be imported (``HandlerError``).
    """

    address = site.address
    runner = _runner(name, site)
    if runner is None:
        message = (
            f"unknown tool {name!r}: the built-in tools are {', '.join(BUILTIN_TOOLS)}; "
            "a Python function is named 'package.module:function'"
        )
        raise StepFailure(ErrorInfo(type="ToolError", message=message, address=address))
    shown = redact(msgspec.json.encode(arguments).decode())[:_PREVIEW]
    call_id = f"{address}:{site.attempt}"
    started = ToolCall(phase="start", tool_name=name, tool_call_id=call_id, input=shown)
    journal.emit(EventType.TOOL_CALL, step_id=address, data=started)
    output: str | None = None
    error: str | None = None
    began = site.clock.now()
    try:
        output = await runner(arguments)
        return output, None
    except ToolError as failure:
        error = f"ToolError: {failure}"
        info = ErrorInfo(type="ToolError", message=f"{name}: {failure}", address=address)
        raise StepFailure(info) from None
    except StepFailure as failure:
        error = f"{failure.error.type}: {failure.error.message}"
        raise
    except asyncio.CancelledError:
        error = "cancelled"
        raise
    except Exception as failure:
        error = f"{type(failure).__name__}: {failure}"
        raise
    finally:
        shown_output = None if output is None else redact(output)[:_PREVIEW]
        took = site.clock.now() - began
        ended = msgspec.structs.replace(
            started,
            phase="end",
            output=shown_output,
            error=error,
            duration=format_duration(took),
        )
        journal.emit(EventType.TOOL_CALL, step_id=address, duration=took, error=error, data=ended)


def _runner(name: str, call: CallSite) -> Runner | None:
    builtin = _BUILTINS.get(name)
    if builtin is not None:
        return lambda arguments: builtin(call, arguments)
    if ":" in name:  # HandlerError if it cannot be imported: the step fails with it
        return python_tool(name, call.base_dir).run
    return None


# The built-ins -----------------------------------------------------------------------


async def _in_thread(function: Callable[[threading.Event], str]) -> str:
    """Runs blocking file work in a worker thread; a timeout or cancel abandons it.

    The event is set when the caller stops waiting: a long walk checks it and stops.
    """
    stop = threading.Event()
    try:
        return await call_in_thread(function, stop)
    finally:
        stop.set()


async def _read(call: CallSite, arguments: dict[str, Any]) -> str:
    given = _convert(arguments, ReadInput)
    tree = Tree(call.base_dir)

    def read(stop: threading.Event) -> str:
        place = tree.locate(given.path)
        shown = quoted(place.shown)
        try:
            with tree.reading(place) as handle:
                data = handle.read(READ_CAP + 1)
        except FileNotFoundError:
            raise ToolError(f"no file {shown} (looked for {tree.path(place)})") from None
        except NotAFile as refused:
            if refused.kind == DIRECTORY:
                raise ToolError(f"{shown} is a directory; glob lists what is in it") from None
            raise ToolError(f"{shown} is {refused.kind}: read opens only regular files") from None
        except OSError as error:
            raise ToolError(f"cannot read {shown}: {error.strerror}") from None
        if len(data) > READ_CAP:
            raise ToolError(
                f"{shown} is larger than read's limit of {READ_CAP} bytes (1 MiB); "
                "read a part of it with a command step (head -c, sed -n)"
            )
        return data.decode(errors="replace")

    return await _in_thread(read)


async def _write(call: CallSite, arguments: dict[str, Any]) -> str:
    given = _convert(arguments, WriteInput)
    tree = Tree(call.base_dir)
    content = given.content.encode()

    def write(stop: threading.Event) -> str:
        place = tree.locate(given.path)
        shown = quoted(place.shown)
        try:
            tree.write(place, content)
        except NotAFile as refused:
            raise ToolError(f"{shown} is {refused.kind}: write writes only regular files") from None
        except OSError as error:
            raise ToolError(f"cannot write {shown}: {error.strerror}") from None
        return f"wrote {len(content)} bytes to {place.shown}"

    return await _in_thread(write)


def _shown_under(root: str, relative: str) -> str:
    """A found path as output: under the ``path`` argument, as it was written."""
    return relative if root in (".", "./") else os.path.join(root, relative)


def _with_note(lines: list[str], skips: Skips) -> str:
    note = skips.note()
    return "\n".join(lines if note is None else [*lines, note])


def _directory(tree: Tree, given: str) -> Place:
    """The directory ``given`` names (a ``path`` argument of glob).

    Raises:
        ToolError: It leads outside the tree, or is no directory.
    """
    place = tree.locate(given)
    try:
        is_directory = stat.S_ISDIR(tree.mode(place))
    except OSError:
        is_directory = False
    if not is_directory:
        raise ToolError(f"no directory {quoted(place.shown)} (looked for {tree.path(place)})")
    return place


def _pattern_problem(pattern: str) -> str | None:
    """Why glob refuses ``pattern``, or None: it must stay below its ``path``."""
    if not pattern:
        return "the pattern is empty"
    if "\0" in pattern:
        return "the pattern holds a NUL byte"
    if pattern.startswith("/"):
        return (
            f"the pattern {quoted(pattern)} is absolute; it is matched below `path` "
            "(give the directory as `path`)"
        )
    if os.pardir in pattern.split("/"):
        return f"the pattern {quoted(pattern)} climbs out with '..'; give the directory as `path`"
    return None


async def _glob(call: CallSite, arguments: dict[str, Any]) -> str:
    given = _convert(arguments, GlobInput)
    problem = _pattern_problem(given.pattern)
    if problem is not None:
        raise ToolError(problem)
    tree = Tree(call.base_dir)

    def match(stop: threading.Event) -> str:
        start = _directory(tree, given.path)
        skips = Skips()
        found = tree.glob(start, given.pattern, GLOB_CAP, stop, skips)
        return _with_note(sorted(_shown_under(start.shown, path) for path in found), skips)

    return await _in_thread(match)


async def _grep(call: CallSite, arguments: dict[str, Any]) -> str:
    given = _convert(arguments, GrepInput)
    tree = Tree(call.base_dir)
    matches: Callable[[str], bool]
    if given.regex:
        try:
            compiled = re.compile(given.pattern)
        except re.error as error:
            raise ToolError(f"invalid regular expression {given.pattern!r}: {error}") from None
        matches = lambda line: compiled.search(line) is not None  # noqa: E731
    else:
        pattern = given.pattern
        matches = lambda line: pattern in line  # noqa: E731
    name_glob = given.glob

    def wanted(name: str) -> bool:
        return name_glob is None or fnmatch.fnmatchcase(name, name_glob)

    def search(stop: threading.Event) -> str:
        start = tree.locate(given.path)
        try:
            mode = tree.mode(start)
        except OSError:
            raise ToolError(
                f"no file or directory {quoted(start.shown)} (looked for {tree.path(start)})"
            ) from None
        lines: list[str] = []
        skips = Skips()
        if not stat.S_ISDIR(mode):
            try:
                _scan(tree, start, start.shown, matches, lines, stop)
            except NotAFile as refused:
                raise ToolError(
                    f"{quoted(start.shown)} is {refused.kind}: grep opens only regular files "
                    "and directories"
                ) from None
            return "\n".join(lines)
        for file in tree.files(start, wanted, stop, skips):
            shown = _shown_under(start.shown, file.shown)
            try:
                if not _scan(tree, file, shown, matches, lines, stop):
                    break
            except NotAFile as refused:  # swapped for a FIFO since it was listed
                skips.add(shown, refused.kind)
        return _with_note(lines, skips)

    return await _in_thread(search)


def _scan(
    tree: Tree,
    file: Place,
    shown: str,
    matches: Callable[[str], bool],
    lines: list[str],
    stop: threading.Event,
) -> bool:
    """Adds the file's matching lines to ``lines``; False once the cap is reached.

    Raises:
        NotAFile: It is not a regular file (never opened).
    """
    try:
        with tree.reading(file) as handle:
            if b"\0" in handle.read(_BINARY_PROBE):
                return True
            handle.seek(0)
            for number, raw in enumerate(handle, 1):
                if stop.is_set():
                    return False
                line = raw.decode(errors="replace").rstrip("\r\n")
                if not matches(line):
                    continue
                if len(lines) == GREP_CAP:
                    lines.append(
                        f"[... stopped after {GREP_CAP} matching lines; narrow the "
                        "pattern, path or glob]"
                    )
                    return False
                if len(line) > GREP_LINE_CAP:
                    line = f"{line[:GREP_LINE_CAP]} [... {len(line) - GREP_LINE_CAP} more]"
                lines.append(f"{shown}:{number}:{line}")
    except OSError:  # unreadable, or gone since the walk saw it: as grep -s
        pass
    return True


async def _bash(call: CallSite, arguments: dict[str, Any]) -> str:

    given = _convert(arguments, BashInput)
    cwd = call.base_dir
    if given.working_directory is not None:
        tree = Tree(call.base_dir)
        where = given.working_directory
        cwd = tree.path(await anyio.to_thread.run_sync(lambda: tree.locate(where)))
    env = dict(os.environ)
    env["CADENZA_RUN_ID"] = call.run_id
    env["CADENZA_STEP_ADDRESS"] = call.address
    env["CADENZA_ATTEMPT"] = str(call.attempt)
    env["CADENZA_IDEMPOTENCY_KEY"] = f"{call.run_id}:{call.address}:{call.attempt}"
    try:
        if given.timeout_seconds is None:
            outcome = await run_command(given.command, env=env, cwd=cwd, stdin=None)
        else:
            with call.clock.fail_after(given.timeout_seconds):
                outcome = await run_command(given.command, env=env, cwd=cwd, stdin=None)
    except TimeoutError:
        message = f"timed out after {given.timeout_seconds}s (its timeout_seconds)"
        raise StepFailure(ErrorInfo("Timeout", message, call.address)) from None
    except OSError as error:  # the shell cannot start: most often a bad working_directory
        raise ToolError(f"cannot run the command in {cwd}: {error.strerror}") from None
    if outcome.exit_code != 0:
        tail = outcome.stderr.strip().splitlines()[-1:] or [""]
        message = f"exit code {outcome.exit_code}" + (f": {tail[0][:500]}" if tail[0] else "")
        raise StepFailure(
            ErrorInfo(type="CommandFailed", message=message, address=call.address),
            content=outcome.stdout,
        )
    return outcome.stdout


_BUILTINS: dict[str, Callable[[CallSite, dict[str, Any]], Awaitable[str]]] = {
    "bash": _bash,
    "glob": _glob,
    "grep": _grep,
    "read": _read,
    "write": _write,
}

BUILTIN_TOOLS = tuple(sorted(_BUILTINS))
"""The built-in tools' names, zenflow's: bash, glob, grep, read, write."""


def builtin(name: str) -> Callable[[CallSite, dict[str, Any]], Awaitable[str]]:
    """The implementation of the built-in tool ``name`` (one of `BUILTIN_TOOLS`)."""
    return _BUILTINS[name]
