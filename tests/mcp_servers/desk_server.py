"""An MCP server of our own (the SDK's MCPServer), for what a real one may do wrong.

Run as ``python desk_server.py`` it speaks stdio; ``python desk_server.py http PORTFILE``
serves streamable HTTP on a free port of 127.0.0.1 and writes the port to
PORTFILE. It stops when its stdin closes (the test that started it is gone).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

from mcp.server import MCPServer

desk = MCPServer("desk")


@desk.tool()
def shout(text: str) -> str:
    """Says the text louder."""
    return text.upper()


@desk.tool()
def reveal(variable: str) -> str:
    """Tells the value of one of the server's environment variables."""
    return os.environ.get(variable, "")


@desk.tool()
def crash() -> str:
    """Ends the server's process at once."""
    os._exit(3)


@desk.tool()
def hang() -> str:
    """Never answers."""
    time.sleep(3600)
    return ""


def _stop_with_stdin() -> None:
    sys.stdin.read()
    os._exit(0)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        threading.Thread(target=_stop_with_stdin, daemon=True).start()
        with open(sys.argv[2] + ".tmp", "w") as out:
            out.write(str(port))
        os.replace(sys.argv[2] + ".tmp", sys.argv[2])
        desk.run("streamable-http", host="127.0.0.1", port=port)
    else:
        desk.run("stdio")
