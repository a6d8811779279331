"""The MCP tool servers of one run (``mcpServers:``), on the official ``mcp`` SDK.

Each server starts the first time an agent of the run needs it, is shared by
every agent of the run, and stops when the run ends, its process with it. A
server runs in a task of the host's own task group, which opens the SDK's
transport and session and then waits; agents call its tools through the session
from their own tasks (the SDK's sessions are safe to share within one loop).

A stdio server is a process of the run's own (`StdioServer`): held to the
protocol, its output bounded, and stopped with its whole process group when the
run ends, even a run killed with ``kill -9``. Every request to a server,
``initialize`` and ``tools/list`` included, gets the server's ``timeout``.

An error names the server, its command or URL, and the cause, found under the
SDK's task groups (``connection refused``, ``exited with code 1; its stderr
ends: ...``), never an ``ExceptionGroup``'s summary. ``${VAR}`` in ``env`` and
``headers`` reads the environment; every value given there is registered as a
secret, so neither the journal nor an error holds it.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
from collections.abc import Iterator, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from cadenza._redact import redact, register_secret
from cadenza.errors import CadenzaError
from cadenza.workflow import McpServer, parse_duration

from ._mcp_stdio import StdioFailure, StdioServer

if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import Tool as McpTool

__all__ = ["McpHost", "McpUnavailable"]

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class McpUnavailable(CadenzaError):
    """An MCP server could not be started, or the ``mcp`` package is not installed."""


def expand(value: str, environ: Mapping[str, str]) -> str:
    """``value`` with each ``${VAR}`` replaced by the environment's value.

    Raises:
        McpUnavailable: A variable is not set.
    """

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise McpUnavailable(f"${{{name}}} is not set in the environment")
        return environ[name]

    return _VARIABLE.sub(one, value)


class McpHost:
    """Starts a run's MCP servers on demand and stops them all when the run ends."""

    def __init__(self, servers: Mapping[str, McpServer], base_dir: Path) -> None:
        self.servers = servers
        self.base_dir = base_dir
        self._sessions: dict[str, ClientSession] = {}
        self._tools: dict[str, list[McpTool]] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._processes: dict[str, StdioServer] = {}
        self._failures: dict[str, str] = {}  # why a server is gone, once it is
        self._group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> McpHost:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        group, self._group = self._group, None
        if group is not None:
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)

    def describe(self, name: str) -> str:
        """``MCP server 'NAME' (COMMAND or URL)``: how an error names a server."""
        spec = self.servers[name]
        where = spec.url or shlex.join([spec.command or "", *spec.args])
        where = where if len(where) <= _WHERE else where[: _WHERE - 3] + "..."
        return f"MCP server {name!r} ({where})"

    def timeout(self, name: str) -> float:
        """Seconds server ``name`` gets to answer one request."""
        return parse_duration(self.servers[name].timeout)

    def cause(self, name: str, error: BaseException) -> str:
        """Why a request to server ``name`` failed with ``error``, in a few words.

        What the server's process did (exited, wrote garbage) tells more than
        the ``Connection closed`` its session reports, so it comes first.
        """
        process = self._processes.get(name)
        if process is not None and process.failure is not None:
            return redact(process.failure)
        failure = self._failures.get(name)
        return failure if failure is not None else redact(_explain(error))

    def _no_answer(self, name: str, request: str, timeout: float) -> str:
        """``no answer to REQUEST within Ns``, and what the server last said on stderr."""
        cause = f"no answer to {request} within {timeout:g}s"
        process = self._processes.get(name)
        tail = process.stderr_tail() if process is not None else ""
        return redact(f"{cause}; its stderr ends: {tail!r}" if tail else cause)

    async def tools(self, name: str) -> list[McpTool]:
        """The tools server ``name`` offers (asked once per run).

        Raises:
            McpUnavailable: The server is not declared, did not start, or did not answer.
        """
        tools = self._tools.get(name)
        if tools is None:
            session = await self.session(name)
            timeout = self.timeout(name)
            try:
                with anyio.fail_after(timeout):
                    listed = await session.list_tools()
            except TimeoutError:
                cause = self._no_answer(name, "tools/list", timeout)
            except Exception as error:
                cause = self.cause(name, error)
            else:
                tools = self._tools[name] = list(listed.tools)
                return tools
            raise McpUnavailable(f"{self.describe(name)} did not list its tools: {cause}")
        return tools

    async def session(self, name: str) -> ClientSession:
        """The session with server ``name``, started on first use.

        Raises:
            McpUnavailable: As `tools`.
        """
        session = self._sessions.get(name)
        if session is not None:
            return session
        if name not in self.servers:
            raise McpUnavailable(f"no MCP server {name!r} is declared under mcpServers")
        if self._group is None:
            raise McpUnavailable("the run's MCP host is closed")
        lock = self._locks.setdefault(name, anyio.Lock())
        async with lock:
            session = self._sessions.get(name)
            if session is None:
                if name in self._failures:
                    raise McpUnavailable(f"{self.describe(name)}: {self._failures[name]}")
                try:
                    session = await self._group.start(self._serve, name)
                except Exception as error:  # an ExceptionGroup too: the cause is found inside
                    cause = self.cause(name, error)
                    raise McpUnavailable(f"{self.describe(name)}: {cause}") from None
                self._sessions[name] = session
        return session

    async def _serve(self, name: str, *, task_status: anyio.abc.TaskStatus[ClientSession]) -> None:
        """Holds server ``name``'s session open until the run ends or the server breaks down."""
        try:
            from mcp import ClientSession
        except ImportError:
            raise McpUnavailable(
                "MCP servers need the mcp package: pip install 'cadenza[mcp]'"
            ) from None
        timeout = self.timeout(name)
        started = False
        try:
            async with AsyncExitStack() as stack:
                read, write, ended = await self._open(stack, name)
                session = await stack.enter_async_context(ClientSession(read, write))
                try:
                    with anyio.fail_after(timeout):
                        await session.initialize()
                except TimeoutError:
                    raise _NoAnswer(self._no_answer(name, "initialize", timeout)) from None
                task_status.started(session)
                started = True
                await ended.wait()
        except Exception as error:
            if not started:
                raise
            # Broken after it started (an HTTP server gone away): its callers are
            # told why, and the run goes on without it.
            self._failures[name] = self.cause(name, error)
        process = self._processes.get(name)
        if process is not None and process.failure is not None:
            self._failures.setdefault(name, redact(process.failure))
        self._sessions.pop(name, None)

    async def _open(self, stack: AsyncExitStack, name: str) -> tuple[Any, Any, anyio.Event]:
        """The server's two streams, over HTTP or to a process of its own, and an
        event set if the server breaks down."""
        spec = self.servers[name]
        environ = os.environ
        if spec.url is not None:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            headers = {key: _secret(expand(value, environ)) for key, value in spec.headers.items()}
            client = await stack.enter_async_context(create_mcp_http_client(headers=headers))
            streams = await stack.enter_async_context(
                streamable_http_client(spec.url, http_client=client)
            )
            return streams[0], streams[1], anyio.Event()  # its failures are raised
        assert spec.command is not None
        env = {key: _secret(expand(value, environ)) for key, value in spec.env.items()}
        cwd = self.base_dir / spec.cwd if spec.cwd else self.base_dir
        process = self._processes[name] = StdioServer(
            spec.command, spec.args, {**environ, **env}, cwd
        )
        read, write = await stack.enter_async_context(process.connect())
        return read, write, process.ended


_WHERE = 120
"""Characters of a server's command line or URL an error quotes."""


class _NoAnswer(Exception):
    """The server did not answer in time; the message says to what."""


_TOLD = (CadenzaError, StdioFailure, _NoAnswer)
"""Errors whose message is the whole story (no type name needed)."""


def _explain(error: BaseException) -> str:
    """The cause of ``error`` in a few words, found under task groups and chained errors."""
    leaf = _leaf(error)
    if isinstance(leaf, _TOLD):
        return str(leaf)
    for link in _links(leaf):
        if isinstance(link, socket.gaierror):
            return f"cannot resolve the host ({link.strerror})"
        if isinstance(link, ConnectionRefusedError):
            return "connection refused"
        if isinstance(link, OSError) and link.strerror:
            return link.strerror[0].lower() + link.strerror[1:]
    text = str(leaf)
    if type(leaf).__module__.startswith("mcp"):  # the SDK's own words: "Connection closed"
        return text or type(leaf).__name__
    return f"{type(leaf).__name__}: {text}" if text else type(leaf).__name__


def _leaf(error: BaseException) -> BaseException:
    """The first error in ``error`` that is not a group, or a cancellation, if any."""
    while isinstance(error, BaseExceptionGroup):
        inner = [e for e in error.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
        error = (inner or list(error.exceptions))[0]
    return error


def _links(error: BaseException) -> Iterator[BaseException]:
    """``error`` and what caused it, nearest first (causes, contexts, groups' members)."""
    seen: set[int] = set()
    queue = [error]
    while queue:
        link = queue.pop(0)
        if id(link) in seen or isinstance(link, anyio.get_cancelled_exc_class()):
            continue
        seen.add(id(link))
        yield link
        if isinstance(link, BaseExceptionGroup):
            queue.extend(link.exceptions)
        # Contexts too, even suppressed ones: httpx hides the refused connection there.
        queue.extend(e for e in (link.__cause__, link.__context__) if e is not None)


def _secret(value: str) -> str:
    register_secret(value)
    return value
