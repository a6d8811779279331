"""An agent's tools from MCP servers: ``tools: [SERVER]`` or ``[SERVER.TOOL]``.

The run's `McpHost` starts the servers; here their tools become `Tool`s the
model is offered as ``SERVER__TOOL`` (function names cannot hold a dot). A call
that fails (the server crashed, did not answer within its ``timeout``, or sent
something unreadable) is answered to the model with what went wrong, naming the
server, its command or URL, and the cause, and recorded as an
``mcp_tool_failed`` event; the step goes on. A server that does
not start fails the step, naming it.

zenflow's rule decides what is offered: only servers named in ``tools`` (a
server is a process: an agent without ``tools`` gets the built-ins, not every
server), less what ``disallowedTools`` names (``SERVER`` or ``SERVER.TOOL``).
"""

from __future__ import annotations

import re
from collections.abc import Container
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import msgspec

from cadenza.actors.run import RunContext
from cadenza.llm import ToolSpec
from cadenza.protocols import EventType, McpToolFailed
from cadenza.workflow import Agent

from ._tools import Tool, ToolError

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = ["mcp_tools"]

_NAME = re.compile(r"[^a-zA-Z0-9_-]")


async def mcp_tools(run: RunContext, agent: Agent | None, address: str) -> list[Tool]:
    """The MCP tools ``agent`` is given, its servers started if they were not yet.

    Raises:
        McpUnavailable: A server it names did not start or did not list its tools.
    """
    host = run.mcp
    if host is None or agent is None or not agent.tools:
        return []
    denied = set(agent.disallowed_tools or ())
    tools = []
    for server, names in _wanted(agent.tools, host.servers, denied).items():
        session = await host.session(server)
        for listed in await host.tools(server):
            if (names is None or listed.name in names) and f"{server}.{listed.name}" not in denied:
                spec = ToolSpec(
                    name=_NAME.sub("_", f"{server}__{listed.name}")[:64],
                    description=listed.description or f"{listed.name} ({server})",
                    parameters=dict(listed.input_schema or {"type": "object"}),
                )
                caller = _caller(run, address, session, server, listed.name)
                tools.append(Tool(spec, caller, f"{server}.{listed.name}"))
    return tools


def _wanted(
    references: list[str], servers: Container[str], denied: set[str]
) -> dict[str, set[str] | None]:
    """The servers ``tools:`` names (``SERVER``, ``SERVER.TOOL``), each with the tools
    named of it (None: all of them), less what ``disallowedTools`` takes away."""
    wanted: dict[str, set[str] | None] = {}
    for reference in references:
        server, _, tool = reference.partition(".")
        if ":" in reference or server not in servers or {reference, server} & denied:
            continue
        if not tool:
            wanted[server] = None
        else:
            named = wanted.setdefault(server, set())
            if named is not None:
                named.add(tool)
    return wanted


def _caller(run: RunContext, address: str, session: ClientSession, server: str, tool: str) -> Any:
    host = run.mcp
    assert host is not None
    timeout = host.timeout(server)

    async def call(arguments: dict[str, Any]) -> str:
        try:
            with anyio.fail_after(timeout):
                result = await session.call_tool(tool, arguments)
        except TimeoutError:
            _failed(run, address, server, tool, f"no answer within {timeout:g}s")
        except Exception as error:  # a crashed server, a broken pipe, garbage on the wire
            _failed(run, address, server, tool, host.cause(server, error))
        text = _text(result)
        if getattr(result, "is_error", False):
            raise ToolError(text or f"{server}.{tool} reported an error")
        return text

    return call


def _failed(run: RunContext, address: str, server: str, tool: str, error: str) -> NoReturn:
    assert run.mcp is not None
    message = f"{run.mcp.describe(server)} failed on {tool}: {error}"
    data = McpToolFailed(server=server, tool=tool, error=error)
    run.journal.emit(EventType.MCP_TOOL_FAILED, step_id=address, error=message, data=data)
    raise ToolError(message)


def _text(result: Any) -> str:
    """What the model reads of a result: its text parts, else its structured content."""
    parts = []
    for item in getattr(result, "content", None) or ():
        text = getattr(item, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            kind = getattr(item, "mime_type", None) or getattr(item, "type", "content")
            parts.append(f"[{kind}]")
    if parts:
        return "\n".join(parts)
    structured = getattr(result, "structured_content", None)
    return msgspec.json.encode(structured).decode() if structured is not None else ""
