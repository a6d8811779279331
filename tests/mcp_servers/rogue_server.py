"""An MCP server that misbehaves on purpose: ``python rogue_server.py MODE PIDS``.

It speaks just enough MCP by hand (no SDK, so it can break the rules) to offer
one tool, ``wait``. It is stubborn in every mode: it ignores SIGTERM and does
not end when its stdin closes, and it starts a child of its own that ignores
SIGTERM too and holds its stdout and stderr open. It writes ``SERVER_PID
CHILD_PID PROCESS_GROUP`` to the file PIDS (atomically), and touches
``PIDS.called`` when a tool call arrives.

MODE:
    garbage        writes a line that is no JSON-RPC, forever, from the start
    garbage-call   serves, then answers a tool call with garbage, forever
    long-line      writes one line that never ends
    flood-stderr   writes MEGABYTES of stderr (argv[3]), then a last line, and exits 1
    hang-init      never answers initialize
    hang-call      serves, but never answers a tool call
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

STUBBORN_CHILD = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"
)


def main() -> None:
    mode, pids = sys.argv[1], Path(sys.argv[2])
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", STUBBORN_CHILD], stdin=subprocess.DEVNULL)
    Path(f"{pids}.tmp").write_text(f"{os.getpid()} {child.pid} {os.getpgrp()}")
    os.replace(f"{pids}.tmp", pids)
    if mode == "garbage":
        _forever(b"this is not JSON-RPC\n")
    if mode == "long-line":
        _forever(b"x" * 65536)
    if mode == "flood-stderr":
        block = b"e" * (1024 * 1024 - 1) + b"\n"
        for _ in range(int(sys.argv[3])):
            sys.stderr.buffer.write(block)
        sys.stderr.buffer.write(b"rogue: out of patience\n")
        sys.stderr.flush()
        os._exit(1)
    for line in sys.stdin:
        request = json.loads(line)
        method, ident = request.get("method"), request.get("id")
        if method == "initialize" and mode != "hang-init":
            version = request["params"]["protocolVersion"]
            _answer(
                ident,
                {
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "rogue", "version": "0"},
                },
            )
        elif method == "tools/list":
            tool = {"name": "wait", "description": "Waits.", "inputSchema": {"type": "object"}}
            _answer(ident, {"tools": [tool]})
        elif method == "tools/call":
            Path(f"{pids}.called").touch()
            if mode == "garbage-call":
                _forever(b"this is not JSON-RPC either\n")
    time.sleep(3600)  # stdin closed: a stubborn server stays


def _answer(ident: Any, result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}) + "\n")
    sys.stdout.flush()


def _forever(data: bytes) -> None:
    """Writes ``data`` again and again; a thread keeps stdin read meanwhile."""
    threading.Thread(target=sys.stdin.read, daemon=True).start()
    while True:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
