"""The MCP tool servers of one run (``mcpServers:``), on the official ``mcp`` SDK.

Each server starts the first time an agent of the run needs it, is shared by
every agent of the run, and stops when the run ends, its process with it. A
server runs in a task of the host's own task group, which opens the SDK's
transport and session and then waits; agents call its tools through the session
from their own tasks (the SDK's sessions are safe to share within one loop).

A stdio server whose run is killed (``kill -9``) sees its stdin close and exits,
as MCP's stdio transport requires. ``${VAR}`` in ``env`` and ``headers`` reads
the environment; every value given there is registered as a secret, so the
journal never records it, and the servers' stderr goes nowhere.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from cadenza._redact import register_secret
from cadenza.errors import CadenzaError
from cadenza.workflow import McpServer

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

    async def tools(self, name: str) -> list[McpTool]:
        """The tools server ``name`` offers (asked once per run).

        Raises:
            McpUnavailable: The server is not declared, did not start, or did not answer.
        """
        tools = self._tools.get(name)
        if tools is None:
            session = await self.session(name)
            try:
                listed = await session.list_tools()
            except Exception as error:
                message = f"MCP server {name!r} did not list its tools: {error}"
                raise McpUnavailable(message) from None
            tools = self._tools[name] = list(listed.tools)
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
                try:
                    session = await self._group.start(self._serve, name)
                except McpUnavailable:
                    raise
                except Exception as error:
                    raise McpUnavailable(f"MCP server {name!r} did not start: {error}") from None
                self._sessions[name] = session
        return session

    async def _serve(self, name: str, *, task_status: anyio.abc.TaskStatus[ClientSession]) -> None:
        try:
            from mcp import ClientSession
        except ImportError:
            raise McpUnavailable(
                "MCP servers need the mcp package: pip install 'cadenza[mcp]'"
            ) from None
        spec = self.servers[name]
        async with AsyncExitStack() as stack:
            read, write = await self._open(stack, spec)
            session = await stack.enter_async_context(ClientSession(read, write))
            with anyio.fail_after(_START_TIMEOUT):
                await session.initialize()
            task_status.started(session)
            await anyio.sleep_forever()

    async def _open(self, stack: AsyncExitStack, spec: McpServer) -> tuple[Any, Any]:
        """The server's two streams: over HTTP, or to a process of its own."""
        environ = os.environ
        if spec.url is not None:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            headers = {key: _secret(expand(value, environ)) for key, value in spec.headers.items()}
            client = await stack.enter_async_context(create_mcp_http_client(headers=headers))
            streams = await stack.enter_async_context(
                streamable_http_client(spec.url, http_client=client)
            )
            return streams[0], streams[1]
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        assert spec.command is not None
        env = {key: _secret(expand(value, environ)) for key, value in spec.env.items()}
        cwd = self.base_dir / spec.cwd if spec.cwd else self.base_dir
        parameters = StdioServerParameters(
            command=spec.command, args=list(spec.args), env={**environ, **env}, cwd=str(cwd)
        )
        # The server's stderr goes nowhere: a server may print what it was given.
        errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: ASYNC230, SIM115 -- /dev/null
        read, write = await stack.enter_async_context(stdio_client(parameters, errlog=errlog))
        return read, write


_START_TIMEOUT = 30.0
"""Seconds a server gets to start and answer ``initialize``."""


def _secret(value: str) -> str:
    register_secret(value)
    return value
