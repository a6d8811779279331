"""The token budget on a durable store: the run ends ``failed`` at once, never hangs.

A run that crossed ``options.maxTokens`` on a SQLite store used to record the
error and then wait forever (its step cancelled itself while recording its own
outcome), ignoring SIGTERM. Parallel agents all passed the "spent < budget"
check together and spent four times the budget.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from cadenza import Runtime
from cadenza.testing import ScriptedLLMServer, ServerReply, ServerRule
from cadenza.testing.pytest_plugin import StartLLMServer
from tests.conftest import WriteFlow

CLI = [sys.executable, "-m", "cadenza"]

CHAIN = """
name: budget-chain
options: {maxTokens: 60}
agents:
  a: {model: "openai:m"}
steps:
  - id: one
    agent: a
    instructions: "one"
  - id: two
    dependsOn: [one]
    agent: a
    instructions: "two"
"""

PARALLEL = """
name: budget-parallel
options: {maxTokens: 250, maxConcurrency: 10}
agents:
  a: {model: "openai:m"}
steps:
""" + "".join(f"  - {{id: a{i}, agent: a, instructions: 'go {i}'}}\n" for i in range(10))


def cadenza(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env={**os.environ, **env}, timeout=60
    )


def test_a_chain_over_budget_on_sqlite_fails_at_once(write_flow: WriteFlow, tmp_path: Path) -> None:
    path = write_flow(CHAIN)
    store = tmp_path / "runs.db"
    with ScriptedLLMServer([ServerRule([ServerReply("hi", usage=(50, 29))])]) as server:
        run = cadenza(["run", str(path), "--json", "--store", str(store)], server.environ())
        requests = server.request_count
    assert run.returncode == 1, run.stderr
    result = json.loads(run.stdout)
    assert result["status"] == "failed"
    assert result["error"]["type"] == "BudgetExceeded"
    assert "79 of 60 tokens" in result["error"]["message"]
    assert requests == 1  # nothing called after the call that crossed the budget
    shown = cadenza(["runs", "show", result["runId"], "--events", "--store", str(store)], {})
    types = [json.loads(line)["type"] for line in shown.stdout.splitlines()]
    assert types[-1] == "workflow_end"


async def test_runtime_result_returns_for_a_run_over_budget_on_sqlite(
    write_flow: WriteFlow, tmp_path: Path, model_server: StartLLMServer
) -> None:
    path = write_flow(CHAIN)
    model_server([ServerRule([ServerReply("hi", usage=(50, 29))])])
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        handle = await runtime.start(path)
        result = await handle.result()
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.type == "BudgetExceeded"


def test_parallel_agents_spend_at_most_one_call_past_the_budget(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    path = write_flow(PARALLEL)
    with ScriptedLLMServer([ServerRule([ServerReply("done", usage=(60, 40))])]) as server:
        run = cadenza(
            ["run", str(path), "--json", "--store", str(tmp_path / "runs.db")], server.environ()
        )
    assert run.returncode == 1, run.stderr
    result = json.loads(run.stdout)
    assert result["error"]["type"] == "BudgetExceeded"
    usage = result["usage"]
    assert usage["promptTokens"] + usage["completionTokens"] <= 250 + 100
    assert usage["llmCalls"] == 3  # 0, 100, 200 spent before each: the third crosses


def test_sigterm_ends_the_run_recorded_cancelled(write_flow: WriteFlow, tmp_path: Path) -> None:
    path = write_flow(
        """
name: slow
steps:
  - id: wait
    command: sleep 30
"""
    )
    store = tmp_path / "runs.db"
    process = subprocess.Popen(
        [*CLI, "run", str(path), "--json", "--events", "--store", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:  # the step has started: its command is running
        if '"step_start"' in line:
            break
    process.send_signal(signal.SIGTERM)
    stdout, _ = process.communicate(timeout=30)
    assert process.returncode == 1
    result = json.loads(stdout)
    assert result["status"] == "cancelled"
    assert "SIGTERM" in result["error"]["message"]
    listed = cadenza(["runs", "list", "--store", str(store)], {})
    assert "cancelled" in listed.stdout
