"""A library is silent until its application configures logging; the CLI's streams stay clean.

Embedded without any logging set up, Cadenza's debug lines (``llm_attempt``,
``actor_crashed`` tracebacks) used to be printed to stdout by structlog's
defaults. With ``--events``, warning lines were interleaved with the NDJSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from cadenza.testing import ScriptedLLMServer, ServerReply, ServerRule

WriteFlow = Callable[..., Path]

EMBEDDED = """
import asyncio, sys
import cadenza

async def main() -> None:
    async with cadenza.Runtime() as runtime:
        result = await runtime.run(sys.argv[1])
    assert result.status == "failed", result.status

asyncio.run(main())
"""

FLOW = """
name: noisy
agents:
  a: {model: "openai:m"}
steps:
  - id: ask
    agent: a
    instructions: "Hello."
  - id: crash
    dependsOn: [ask]
    handler: "json:loads"  # exists, and fails on a StepContext
"""


def test_an_embedded_runtime_prints_nothing_to_stdout(write_flow: WriteFlow) -> None:
    """A retried model call and a failing step: stdout stays empty, no debug line anywhere."""
    path = write_flow(FLOW)
    replies = [ServerReply(status=500), ServerReply("hi")]
    with ScriptedLLMServer([ServerRule(replies)]) as server:
        done = subprocess.run(
            [sys.executable, "-c", EMBEDDED, str(path)],
            capture_output=True,
            text=True,
            env={**server.environ(), "PATH": "/usr/bin:/bin"},
            timeout=60,
        )
        assert server.request_count == 2  # the first attempt was retried
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "llm_attempt" not in done.stderr  # debug: not shown unless configured


def test_with_events_every_stderr_line_is_one_json_object(write_flow: WriteFlow) -> None:
    """Warnings (here: --insecure's) join the NDJSON stream as ``log`` objects."""
    # A step that is skipped: the run needs no worker to end.
    path = write_flow(
        "name: one\nsteps:\n  - id: a\n    command: echo hi\n    condition: 'false'\n"
    )
    done = subprocess.run(
        [
            *(sys.executable, "-m", "cadenza", "run", str(path), "--events"),
            *("--workers", "tcp://127.0.0.1:0", "--insecure", "--store", str(path.parent / "r.db")),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        input="",
    )
    lines = done.stderr.splitlines()
    objects = [json.loads(line) for line in lines]  # fails on any line that is not JSON
    logs = [o for o in objects if o["type"] == "log"]
    assert [(o["level"], o["message"]) for o in logs][:1] == [("warning", "insecure_endpoint")]
    assert "read the environment" in logs[0]["data"]["risk"]
    assert any(o["type"] == "workflow_start" for o in objects)
