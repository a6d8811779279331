"""An MCP server over stdio: a process of its own, held to MCP's stdio transport.

The SDK's ``stdio_client`` trusts its server: it buffers a line of any length,
logs every line it cannot parse with a traceback (a server printing garbage
filled the run's stderr at 5 MB/s, and the session never ended), and has
no hook to start the process so that it dies with a run killed by ``kill -9``.
`StdioServer` speaks the same protocol (one JSON-RPC message per line) to the
SDK's ``ClientSession`` and holds the server to it:

- a line that is not a JSON-RPC message, or is longer than `LINE_LIMIT`, ends
  the session: `StdioServer.failure` quotes the line, and the server is stopped;
- stderr is read as it comes and only its last `STDERR_TAIL` bytes are kept,
  for the error that says why a server ended;
- the server starts through ``_mcp_guard.py`` in a process group of its own,
  so it dies with the run's process, and when the session ends its whole group
  is stopped: stdin closed, then SIGTERM, then SIGKILL, `GRACE` seconds apart.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

if TYPE_CHECKING:
    from mcp.shared.message import SessionMessage

__all__ = ["GRACE", "LINE_LIMIT", "STDERR_TAIL", "StdioFailure", "StdioServer"]

LINE_LIMIT = 16 * 1024 * 1024
"""Bytes one message (one line of stdout) may hold; a longer line ends the session."""

STDERR_TAIL = 4096
"""Bytes of a server's stderr kept (the last ones); the rest is read and dropped."""

GRACE = 2.0
"""Seconds a stopping server gets after its stdin closes, and again after SIGTERM."""

_QUOTED = 120
"""Characters of an offending line, or of stderr's tail, an error quotes."""

_GUARD = Path(__file__).with_name("_mcp_guard.py")
"""The script each server starts under (see it for why)."""


class StdioFailure(Exception):
    """A stdio server could not be started."""


class StdioServer:
    """One MCP server process: its streams for a ``ClientSession``, and why it ended."""

    def __init__(
        self, command: str, args: Sequence[str], env: Mapping[str, str], cwd: Path
    ) -> None:
        self.command = command
        self.args = list(args)
        self.env = dict(env)
        self.cwd = cwd
        self.failure: str | None = None
        """Why the server stopped serving, when it did so by itself (None while it serves)."""
        self.ended = anyio.Event()
        """Set when the session cannot go on: the server exited or broke the protocol."""
        self._tail = bytearray()
        self._tail_complete = anyio.Event()
        self._stdout_read = anyio.Event()  # to its end: no answer is left unread
        self._stopping = False
        self._to_session: MemoryObjectSendStream[SessionMessage | Exception] | None = None

    @asynccontextmanager
    async def connect(
        self,
    ) -> AsyncIterator[
        tuple[
            MemoryObjectReceiveStream[SessionMessage | Exception],
            MemoryObjectSendStream[SessionMessage],
        ]
    ]:
        """Starts the server; yields the session's read and write streams; stops it.

        Raises:
            StdioFailure: The command is not found, or could not be started.
        """
        from mcp.shared.message import SessionMessage

        argv = [sys.executable, "-I", "-S", str(_GUARD), str(os.getpid())]
        argv += [_executable(self.command, self.env, self.cwd), *self.args]
        try:
            process = await anyio.open_process(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,  # its own process group, stopped as a whole
            )
        except OSError as error:  # a missing cwd, most likely: say which
            where = f" ({error.filename})" if error.filename else ""
            raise StdioFailure(f"could not start: {error.strerror or error}{where}") from None
        # Unbuffered both ways: a message waits for its reader, nothing piles up.
        to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        self._to_session = to_session
        to_server, from_session = anyio.create_memory_object_stream[SessionMessage](0)
        async with anyio.create_task_group() as group:
            group.start_soon(self._read_stdout, process, to_session)
            group.start_soon(self._write_stdin, process, from_session)
            group.start_soon(self._read_stderr, process)
            group.start_soon(self._watch_exit, process)
            try:
                yield from_server, to_server
            finally:
                self._stopping = True
                # Shielded, every wait bounded: a cancelled run still stops its server.
                with anyio.CancelScope(shield=True):
                    await _stop(process)
                group.cancel_scope.cancel()
                for stream in (from_server, to_server):
                    stream.close()

    def stderr_tail(self) -> str:
        """The end of what the server wrote to stderr, on one line ('' if nothing)."""
        text = " ".join(self._tail.decode("utf-8", "replace").split())
        return text if len(text) <= _QUOTED else "..." + text[-_QUOTED:]

    def _break(self, cause: str) -> None:
        """Ends the session: its requests waiting for an answer fail at once."""
        if self.failure is None and not self._stopping:
            self.failure = cause
        if self._to_session is not None:
            self._to_session.close()  # the session reads the end of its stream
        self.ended.set()

    async def _read_stdout(
        self,
        process: anyio.abc.Process,
        sink: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        assert process.stdout is not None
        parse = _parser()
        pending = bytearray()  # the line being read, never more than LINE_LIMIT and a chunk
        async with sink:
            try:
                async for chunk in process.stdout:
                    *complete, rest = chunk.split(b"\n")
                    for piece in complete:
                        pending += piece
                        message = parse(bytes(pending))
                        pending.clear()
                        if message is not None:
                            await sink.send(message)
                    pending += rest
                    if len(pending) > LINE_LIMIT:
                        raise _Broken(f"wrote a line longer than {LINE_LIMIT} bytes to stdout")
            except _Broken as broken:
                self._break(str(broken))
                return
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                return  # the session is gone, or the server is being stopped
            self._stdout_read.set()
            await self._break_on_exit(process)

    async def _watch_exit(self, process: anyio.abc.Process) -> None:
        """Ends the session when the server exits, though a child of it may hold its stdout.

        Waits on a pidfd (Linux 5.3+), not on a timer; elsewhere stdout's end tells.
        """
        try:
            exit_fd = os.pidfd_open(process.pid)
        except (AttributeError, OSError):
            return
        try:
            await anyio.wait_readable(exit_fd)
        finally:
            os.close(exit_fd)
        await self._break_on_exit(process)

    async def _break_on_exit(self, process: anyio.abc.Process) -> None:
        """The server exited, or closed its stdout: says how, with the end of its stderr."""
        if await _exited(process, GRACE):
            # Its last words, unless a child of the server holds its pipes open.
            with anyio.move_on_after(GRACE):
                await self._stdout_read.wait()
                await self._tail_complete.wait()
        code = process.returncode
        if code is None:
            cause = "closed its stdout"
        elif code < 0:
            cause = f"was killed by {signal.Signals(-code).name}"
        else:
            cause = f"exited with code {code}"
        tail = self.stderr_tail()
        self._break(f"{cause}; its stderr ends: {tail!r}" if tail else cause)

    async def _write_stdin(
        self, process: anyio.abc.Process, source: MemoryObjectReceiveStream[SessionMessage]
    ) -> None:
        assert process.stdin is not None
        # A server that stops reading is answered by the timeouts, and one that
        # exits by the stdout reader, which can tell how.
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async with source:
                async for message in source:
                    line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(line.encode() + b"\n")

    async def _read_stderr(self, process: anyio.abc.Process) -> None:
        assert process.stderr is not None
        tail = self._tail
        try:
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for chunk in process.stderr:
                    tail += chunk
                    del tail[:-STDERR_TAIL]
        finally:
            self._tail_complete.set()


class _Broken(Exception):
    """The server broke the protocol; the message says how."""


def _parser() -> Callable[[bytes], SessionMessage | None]:
    """Reads one line of stdout: its JSON-RPC message, or None for a blank line.

    The parser raises `_Broken` for a line that is no JSON-RPC message.
    """
    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter

    def parse(line: bytes) -> SessionMessage | None:
        if len(line) > LINE_LIMIT:
            raise _Broken(f"wrote a line longer than {LINE_LIMIT} bytes to stdout")
        if not line.strip():
            return None
        try:
            return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
        except ValueError:
            text = line.decode("utf-8", "replace").strip()
            quoted = text if len(text) <= _QUOTED else text[:_QUOTED] + "..."
            message = f"wrote a line that is not MCP (JSON-RPC) to stdout: {quoted!r}"
            raise _Broken(message) from None

    return parse


def _executable(command: str, env: Mapping[str, str], cwd: Path) -> str:
    """The file ``command`` runs, found as ``exec`` would find it from ``cwd`` with ``env``.

    Raises:
        StdioFailure: There is no such executable.
    """
    if os.sep in command:
        path = cwd / command
        found = str(path) if path.is_file() and os.access(path, os.X_OK) else None
    else:
        found = shutil.which(command, path=env.get("PATH", os.defpath))
    if found is None:
        raise StdioFailure("command not found")
    return found


async def _stop(process: anyio.abc.Process) -> None:
    """Stops a server's whole process group: stdin closed, then SIGTERM, then SIGKILL.

    MCP's stdio shutdown, applied to every process the server started in its
    group; each wait is bounded (`GRACE`), so a server that ignores all of it
    costs the run at most three graces.
    """
    assert process.stdin is not None
    with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        await process.stdin.aclose()
    group = process.pid  # the leader's pid, since start_new_session
    await _exited(process, GRACE)
    for sent in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(group, sent)
        except ProcessLookupError:
            break  # the group is gone
        except PermissionError:
            pass  # a member we may not signal; the rest were
        if await _ended(group, GRACE):
            break
    with anyio.move_on_after(GRACE), suppress(OSError):
        await process.aclose()  # its pipes and transport; quick, as the group is gone


async def _exited(process: anyio.abc.Process, within: float) -> bool:
    """Whether ``process`` has ended, or ends within ``within`` seconds.

    Polled: ``wait()`` on asyncio also waits for the pipes to close, which a
    child the server started may hold open.
    """
    with anyio.move_on_after(within):
        while process.returncode is None:  # noqa: ASYNC110 -- see above
            await anyio.sleep(0.01)
    return process.returncode is not None


async def _ended(group: int, within: float) -> bool:
    """Whether every process of ``group`` has ended, or does within ``within`` seconds."""
    with anyio.move_on_after(within):
        while await anyio.to_thread.run_sync(_alive, group):  # noqa: ASYNC110 -- no event to wait on
            await anyio.sleep(0.02)
        return True
    return False


def _alive(group: int) -> bool:
    """Whether any process of ``group`` still runs.

    A zombie does not count: the orphans of a killed server are reaped by
    init, which in a container may take its time (1.5 s measured).
    """
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True  # no /proc to tell a zombie by
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            if int(fields[2]) == group and fields[0] != b"Z":
                return True
    return False
