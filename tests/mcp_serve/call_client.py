"""An MCP client in a process of its own, for a test to kill mid-call.

``python call_client.py stdio TOOL SERVE_ARGS...`` spawns ``cadenza mcp serve
SERVE_ARGS`` and calls TOOL; ``python call_client.py http TOOL URL`` calls it
over streamable HTTP with ``$MCP_TOKEN``. Each progress message is printed on
its own line, so the test knows how far the run has gone.
"""

from __future__ import annotations

import contextlib
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def _progress(progress: float, total: float | None, message: str | None) -> None:
    print(message, flush=True)


async def main(*argv: str) -> None:
    transport, tool, *rest = argv
    async with contextlib.AsyncExitStack() as stack:
        if transport == "stdio":
            command = [sys.executable, "-m", "cadenza", "mcp", "serve", *rest]
            server = StdioServerParameters(
                command=command[0], args=command[1:], env=dict(os.environ)
            )
            read, write = await stack.enter_async_context(stdio_client(server))
        else:
            headers = {"Authorization": f"Bearer {os.environ['MCP_TOKEN']}"}
            http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
            streams = await stack.enter_async_context(
                streamable_http_client(rest[0], http_client=http)
            )
            read, write = streams[0], streams[1]
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        print("initialized", flush=True)
        await session.call_tool(tool, {}, progress_callback=_progress)
        print("answered", flush=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:])
