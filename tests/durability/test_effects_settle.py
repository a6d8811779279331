"""Decisions are committed in the background; an effect starts only once they are durable.

An agent's answer, a verdict, a loop's outcome are decisions: nothing outside the
run happened, so the run goes on while they are committed. A command, a handler,
a tool an agent calls is an effect: before it starts, everything the run decided
is durable. So a kill *inside* an effect (here the effect kills the process
itself, the way a crash would land at the worst moment) never costs a decision
made before it: the resumed run does not ask the model again.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from cadenza.actors.run import RunJournal
from cadenza.actors.run._journal import MAX_UNSETTLED
from cadenza.protocols import StepRecord
from cadenza.store import MemoryRunStore, RunRow
from cadenza.testing import ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import cadenza
from tests.conftest import WriteFlow

pytestmark = pytest.mark.timeout(120)

# Kills the cadenza process that runs it, the first time only; appends a line each time.
KILL_ONCE = "if [ ! -e killed ]; then touch killed; kill -9 $PPID; sleep 5; fi; echo ran >> effects"

THEN_A_COMMAND = f"""
name: think-then-act
agents:
  thinker:
    model: openai:gpt-test
steps:
  - id: think
    agent: thinker
    instructions: "Decide."
  - id: act
    command: '{KILL_ONCE}'
    dependsOn: [think]
"""

A_TOOL = """
name: tool-call
agents:
  actor:
    model: openai:gpt-test
    tools: [bash]
steps:
  - id: act
    agent: actor
    instructions: "Act."
"""


def _killed_then_resumed(tmp_path: Path) -> None:
    env = {**os.environ}
    run = ("run", "flow.yaml", "--store", "runs.db", "--run-id", "r-1")
    killed = cadenza(*run, cwd=tmp_path, env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = cadenza("resume", "r-1", "--store", "runs.db", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr


def test_a_command_starts_only_once_the_agent_before_it_is_durable(
    model_server: StartLLMServer, write_flow: WriteFlow, tmp_path: Path
) -> None:
    """The command kills the process at once: the agent's answer was committed before
    the command started, so the resumed run does not ask the model again."""
    server = model_server([ServerRule([ServerReply(content="go")])])
    write_flow(THEN_A_COMMAND)

    _killed_then_resumed(tmp_path)

    assert server.request_count == 1
    assert (tmp_path / "effects").read_text().split() == ["ran"]  # the command, once done


def test_a_tool_starts_only_once_the_model_call_that_asked_for_it_is_durable(
    model_server: StartLLMServer, write_flow: WriteFlow, tmp_path: Path
) -> None:
    """The tool kills the process: the model's call that asked for it is replayed on
    resume, not sent again; only the reply after the tool's output is asked for."""
    replies = [
        ServerReply(content="acting", tool_calls=[ServerToolCall("bash", {"command": KILL_ONCE})]),
        ServerReply(content="done"),
    ]
    server = model_server([ServerRule(replies)])
    write_flow(A_TOOL)

    _killed_then_resumed(tmp_path)

    assert server.request_count == 2  # the first call once, then the one after the tool
    assert (tmp_path / "effects").read_text().split() == ["ran"]


class _CountedFlushes(MemoryRunStore):
    """A memory store that counts the flushes a run waits for."""

    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    async def flush(self, run_id: str | None = None) -> None:
        self.flushes += 1
        await super().flush(run_id)


async def test_a_decision_waits_for_no_commit_and_the_next_effect_waits_once() -> None:
    store = _CountedFlushes()
    store.begin_run(RunRow("r-1", "flow", None, "running", {}, created_at=0.0, updated_at=0.0))
    journal = RunJournal("r-1", "flow", store)
    done = StepRecord(status="completed", content="answer", attempts=1)

    await journal.step_finished("think", done, decision=True)
    await journal.step_finished("judge", done, decision=True)
    assert store.flushes == 0  # both only queued

    await journal.settle()  # an effect is about to start: one commit for both
    await journal.settle()  # nothing decided since: no wait
    assert store.flushes == 1

    await journal.step_finished("act", done)  # an effect's outcome: durable before it returns
    assert store.flushes == 2
    await journal.settle()
    assert store.flushes == 2


async def test_a_run_that_only_decides_still_waits_for_a_commit_now_and_then() -> None:
    """The writer's queue, and what a kill can take back, stay bounded without effects."""
    store = _CountedFlushes()
    store.begin_run(RunRow("r-1", "flow", None, "running", {}, created_at=0.0, updated_at=0.0))
    journal = RunJournal("r-1", "flow", store)
    done = StepRecord(status="completed", content="answer", attempts=1)

    for step in range(2 * MAX_UNSETTLED):
        await journal.step_finished(f"s{step}", done, decision=True)

    assert store.flushes == 2
