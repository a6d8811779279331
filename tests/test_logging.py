"""A library is silent until its application configures logging; the CLI's streams stay clean.

Embedded without any logging set up, Cadenza's debug lines (``llm_attempt``,
``actor_crashed`` tracebacks) used to be printed to stdout by structlog's
defaults. With ``--events``, warning lines were interleaved with the NDJSON.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from cadenza._logging import EVENT, FIELDS, get_logger
from cadenza.testing import ScriptedLLMServer, ServerReply, ServerRule
from tests.conftest import WriteFlow


def _bare_environment(extra: dict[str, str]) -> dict[str, str]:
    """Nothing of the test process's environment but the way to this checkout's code."""
    keep = {name: os.environ[name] for name in ("PYTHONPATH",) if name in os.environ}
    return {**extra, **keep, "PATH": "/usr/bin:/bin"}


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
            env=_bare_environment(server.environ()),
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


BASIC_CONFIG = """
import asyncio, logging, sys
import cadenza

logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(levelname)s %(message)s")

async def main() -> None:
    async with cadenza.Runtime() as runtime:
        await runtime.run(sys.argv[1])

asyncio.run(main())
"""


def test_an_application_logging_basic_config_sees_each_record_with_its_fields(
    write_flow: WriteFlow,
) -> None:
    """``logging.basicConfig``: a record reads as structlog writes it (event, then its
    fields), not a bare event name; the API key stays out."""
    path = write_flow(FLOW)
    replies = [ServerReply(status=429), ServerReply("hi")]
    key = "sk-canary-0123456789abcdef"
    with ScriptedLLMServer([ServerRule(replies)]) as server:
        done = subprocess.run(
            [sys.executable, "-c", BASIC_CONFIG, str(path)],
            capture_output=True,
            text=True,
            env=_bare_environment(server.environ(api_key=key)),
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    attempts = [line for line in done.stdout.splitlines() if "llm_attempt" in line]
    assert attempts[0].startswith(
        "DEBUG llm_attempt call='openai model m' attempt=1 failure='HTTP 429' elapsed_s="
    )
    assert "attempt=2 ok=True elapsed_s=" in attempts[1]  # the retry
    assert key not in done.stdout + done.stderr


def test_a_record_keeps_its_event_and_fields_apart_and_masks_what_it_carries(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """For a handler of its own: ``cadenza_event`` and ``cadenza_fields``; a '%' in a field
    is text, not a format; a secret in a field or a traceback is masked everywhere."""
    log = get_logger("cadenza.test")
    with caplog.at_level(logging.DEBUG, logger="cadenza"):
        log.info("llm_attempt", attempt=2, model="openai:m", note="100% done")
        try:
            raise ValueError("upstream said Bearer abcdefghijklmnop0123")
        except ValueError as error:
            log.error("actor_crashed", api_key="sk-abcdefghijklmnop", exc_info=error)
    first, second = caplog.records
    assert first.getMessage() == "llm_attempt attempt=2 model='openai:m' note='100% done'"
    assert getattr(first, EVENT) == "llm_attempt"
    assert getattr(first, FIELDS) == {"attempt": 2, "model": "openai:m", "note": "100% done"}
    assert first.msg == "llm_attempt attempt=%r model=%r note=%r"  # one template per event
    shown = second.getMessage()
    assert shown.startswith("actor_crashed api_key='***'\nTraceback (most recent call last)")
    assert shown.endswith("ValueError: upstream said Bearer ***")
    assert "abcdefghijklmnop" not in shown + repr(getattr(second, FIELDS))
