"""Adversarial workflows all end, with an explicit terminal status, within their limits.

A judge that never says done, one that answers garbage, one whose model call
fails; a handler that blocks the event loop with ``time.sleep`` (or spins, or
swallows ``Exception``); steps that never return (async, in a thread, a
subprocess); a token-hungry agent; a graph that cycles. Each must end ``completed``
or ``failed`` for the stated reason. Wall-clock bounds are pass/fail limits far
above the limits under test (a hang fails; a slow machine does not).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cadenza import RunResult
from cadenza.testing import ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import run_flow
from tests.conftest import WriteFlow

LIMIT = 30.0
"""Wall seconds any of these runs may take: each is bounded at 1-3 s by its own limits."""


async def run_bounded(path: Path, **kwargs: Any) -> tuple[RunResult, float]:
    started = time.monotonic()
    result = await run_flow(path, **kwargs)
    elapsed = time.monotonic() - started
    assert elapsed < LIMIT, f"the run took {elapsed:.1f}s"
    assert result.status in ("completed", "failed"), result.status
    return result, elapsed


JUDGED = """
name: judged
agents:
  judge:
    model: "openai:judge"
    maxTurns: 2
    resultSchema:
      type: object
      required: [done]
      properties: {done: {type: boolean}}
steps:
  - id: work
    command: printf draft
    loop:
      maxIterations: 3
      untilAgent: judge
"""

JUDGES = {
    "never-done": ServerReply(tool_calls=[ServerToolCall("submit_result", {"done": False})]),
    "garbage-arguments": ServerReply(tool_calls=[ServerToolCall("submit_result", "{{{")]),
    "wrong-type": ServerReply(tool_calls=[ServerToolCall("submit_result", {"done": "maybe"})]),
    "prose-only": ServerReply(content="I think it is done, probably."),
    "malformed-body": ServerReply(body='{"choices": [{"message": '),
    "raises-http-400": ServerReply(status=400, body="bad request"),
}


@pytest.mark.parametrize("judge", sorted(JUDGES))
async def test_a_judge_that_never_stops_the_loop_is_bounded_by_max_iterations(
    judge: str, write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """Whatever the judge does, the loop ends after maxIterations, completed (fail-open)."""
    model_server([ServerRule([JUDGES[judge]])])
    result, _ = await run_bounded(write_flow(JUDGED))
    assert result.status == "completed", result.error
    loop = result.loops["work"]
    assert (loop.iterations, loop.termination_reason) == (3, "maxIterations")
    verdicts = [result.steps[f"work.{n}.untilAgent"] for n in range(3)]
    if judge == "never-done":
        assert all(v.result == {"done": False} for v in verdicts)
    else:
        assert all(v.status == "failed" and v.error is not None for v in verdicts), verdicts


BLOCKERS = """
import asyncio
import threading
import time

release = threading.Event()

async def sleeps(ctx):
    time.sleep(3600)

async def spins(ctx):
    while True:
        pass

async def swallows(ctx):
    try:
        time.sleep(3600)
    except Exception:
        pass
    return "swallowed"

async def awaits_forever(ctx):
    await asyncio.Event().wait()

def thread_forever(ctx):
    release.wait(3600)
"""


def blocking_flow(handler: str) -> str:
    return f"""
name: blocked
steps:
  - id: before
    command: printf ok
  - id: stuck
    dependsOn: [before]
    handler: "HANDLERS:{handler}"
    timeout: 1s
  - id: after
    dependsOn: [stuck]
    command: printf never
"""


@pytest.mark.parametrize("handler", ["sleeps", "spins", "swallows", "awaits_forever"])
async def test_a_step_that_holds_or_never_returns_times_out(
    handler: str, write_flow: WriteFlow
) -> None:
    """Blocking the loop (the watchdog) or awaiting forever: failed Timeout, dependents skipped."""
    result, _ = await run_bounded(write_flow(blocking_flow(handler), handlers=BLOCKERS))
    assert result.status == "failed"
    stuck = result.steps["stuck"]
    assert stuck.status == "failed"
    assert stuck.error is not None
    assert stuck.error.type == "Timeout", stuck.error
    if handler != "awaits_forever":
        assert "blocked the event loop" in stuck.error.message
    assert result.steps["before"].status == "completed"
    assert "after" not in result.steps or result.steps["after"].status != "completed"


async def test_a_sync_handler_that_never_returns_times_out(write_flow: WriteFlow) -> None:
    """A plain function stuck in its thread: the step ends at its timeout; the thread runs on."""
    path = write_flow(blocking_flow("thread_forever"), handlers=BLOCKERS)
    try:
        result, _ = await run_bounded(path)
    finally:
        for module in list(sys.modules.values()):
            release = getattr(module, "release", None)
            if isinstance(release, threading.Event) and module.__name__.startswith("handlers_"):
                release.set()  # lets the abandoned thread finish
    assert result.steps["stuck"].status == "failed"
    assert result.steps["stuck"].error is not None
    assert result.steps["stuck"].error.type == "Timeout"


async def test_a_command_that_never_returns_is_killed(write_flow: WriteFlow) -> None:
    """A subprocess sleeping for an hour is killed at its timeout; so is a whole run's."""
    path = write_flow(
        """
name: sleepy
options: {timeout: 2s}
steps:
  - id: step-timeout
    command: sleep 3600
    timeout: 1s
    onError: continue
  - id: run-timeout
    command: sleep 3600
"""
    )
    result, _ = await run_bounded(path)
    assert result.status == "failed"
    assert result.steps["step-timeout"].error is not None
    assert result.steps["step-timeout"].error.type == "Timeout"
    assert result.error is not None
    assert result.error.type == "Timeout"
    assert result.steps["run-timeout"].status == "cancelled"


HUNGRY = """
name: hungry
options: {maxTokens: 1000}
agents:
  eater:
    model: "openai:eater"
    maxTurns: 1000
steps:
  - id: eat
    agent: eater
    instructions: "Use every token you can."
"""


async def test_a_token_hungry_agent_is_stopped_by_the_budget(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """An agent that calls tools forever at 400 tokens a call ends failed: BudgetExceeded."""
    reply = ServerReply(
        tool_calls=[ServerToolCall("send_message", {"text": "more"})], usage=(300, 100)
    )
    server = model_server([ServerRule([reply])])
    result, _ = await run_bounded(write_flow(HUNGRY))
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.type == "BudgetExceeded", result.error
    spent = result.usage.prompt_tokens + result.usage.completion_tokens
    assert 1000 <= spent <= 1000 + 400, "at most one call past the budget"
    assert len(server.requests) == 3


async def test_an_agent_that_never_stops_calling_tools_ends_at_max_turns(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """Without a budget, maxTurns ends the tool loop."""
    text = HUNGRY.replace("options: {maxTokens: 1000}\n", "").replace("1000", "5")
    reply = ServerReply(tool_calls=[ServerToolCall("send_message", {"text": "more"})])
    server = model_server([ServerRule([reply])])
    result, _ = await run_bounded(write_flow(text))
    assert result.status == "completed", result.error
    assert len(server.requests) == 5


async def test_a_graph_that_cycles_forever_ends_at_max_steps(write_flow: WriteFlow) -> None:
    """Two states routing to each other unconditionally: maxSteps ends the graph, flagged."""
    path = write_flow(
        """
name: cycle
steps:
  - id: ping-pong
    graph:
      start: ping
      maxSteps: 25
      onMaxSteps: returnWithFlag
      states:
        ping: {command: printf ping}
        pong: {command: printf pong}
      edges:
        - {from: ping, to: pong}
        - {from: pong, to: ping}
"""
    )
    result, _ = await run_bounded(path)
    assert result.status == "completed", result.error
    graph = result.graphs["ping-pong"]
    assert graph.termination_reason == "maxSteps"
    assert len(graph.path) == 25
