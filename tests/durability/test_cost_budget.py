"""Cost budgets (``maxCost``) on a SQLite store, through ``cadenza run`` as a user runs it.

Issue 31's acceptance: a run with ``maxCost: 0.05`` on a scripted model priced in
the workflow ends ``BudgetExceeded`` at the call that would cross it, exit 1; ten
parallel agents overshoot by at most one call. Each call's cost is read back from
the stored ``agent_turn`` events, so "the crossing call is the last one made" is
counted, not assumed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cadenza.testing import ScriptedLLMServer, ServerReply, ServerRule
from tests._helpers import cadenza
from tests.conftest import WriteFlow

CHAIN = """
name: cost-chain
prices:
  scripted: {input: 100, output: 200}
options: {maxCost: 0.05}
agents:
  writer:
    script: ["one", "two", "three", "four", "five", "six", "seven", "eight"]
steps:
""" + "".join(
    f"  - {{id: s{i}, agent: writer, instructions: 'part {i} of the report'"
    + (f", dependsOn: [s{i - 1}]}}\n" if i else "}\n")
    for i in range(8)
)

# Ten agents at once, each call 100 tokens at 100 USD per million: 0.01 USD a call.
PARALLEL = """
name: cost-parallel
prices:
  "openai:m": {input: 100, output: 100}
options: {maxCost: 0.025, maxConcurrency: 10}
agents:
  a: {model: "openai:m"}
steps:
""" + "".join(f"  - {{id: a{i}, agent: a, instructions: 'go {i}'}}\n" for i in range(10))


def _events(run_id: str, store: Path, cwd: Path) -> list[dict[str, Any]]:
    shown = cadenza("runs", "show", run_id, "--events", "--store", str(store), cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line) for line in shown.stdout.splitlines()]


def _call_costs(events: list[dict[str, Any]]) -> list[float]:
    return [
        event["data"]["cost"]
        for event in events
        if event["type"] == "agent_turn" and event["data"]["phase"] == "response"
    ]


def test_a_run_ends_at_the_call_that_crosses_max_cost(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    path = write_flow(CHAIN)
    store = tmp_path / "runs.db"
    run = cadenza("run", str(path), "--json", "--store", str(store), cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    result = json.loads(run.stdout)
    assert result["status"] == "failed"
    assert result["error"]["type"] == "BudgetExceeded"
    assert "options.maxCost" in result["error"]["message"]
    assert "of $0.05 used" in result["error"]["message"]
    costs = _call_costs(_events(result["runId"], store, tmp_path))
    # Every call but the last started under the budget; the last one crossed it, and
    # nothing was called after it (the scripted model's calls are the run's calls).
    assert sum(costs[:-1]) < 0.05 <= sum(costs)
    assert len(costs) == result["usage"]["llmCalls"] < 8
    assert abs(result["usage"]["cost"] - sum(costs)) < 1e-9
    assert result["usage"]["byAgent"]["writer"]["llmCalls"] == len(costs)
    failed = [step for step, record in result["steps"].items() if record["status"] == "failed"]
    assert failed == [f"s{len(costs)}"]  # the step whose call the budget refused
    replayed = cadenza("replay", result["runId"], "--store", str(store), cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr  # the same budget, offline


def test_parallel_agents_spend_at_most_one_call_past_max_cost(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    path = write_flow(PARALLEL)
    store = tmp_path / "runs.db"
    with ScriptedLLMServer([ServerRule([ServerReply("done", usage=(60, 40))])]) as server:
        run = cadenza(
            "run", str(path), "--store", str(store), cwd=tmp_path,
            env={**os.environ, **server.environ()},
        )  # fmt: skip
        requests = server.request_count
    assert run.returncode == 1, run.stderr
    assert "3 model call(s), 300 tokens, $0.03" in run.stdout  # the summary a person reads
    run_id = run.stdout.split()[1]
    shown = cadenza("runs", "show", run_id, "--store", str(store), cwd=tmp_path)
    result = json.loads(shown.stdout)
    assert result["error"]["type"] == "BudgetExceeded"
    usage = result["usage"]
    assert usage["cost"] <= 0.025 + 0.01 + 1e-9  # at most one 0.01 call past the budget
    assert usage["llmCalls"] == requests == 3  # 0, 0.01, 0.02 spent or reserved: the third crosses
    assert _call_costs(_events(result["runId"], store, tmp_path)) == [0.01, 0.01, 0.01]


def test_an_unpriced_model_under_a_budget_is_refused_at_load(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    path = write_flow(
        """
name: unpriced
options: {maxCost: 1}
agents:
  a: {model: "openai:my-fine-tune"}
steps:
  - {id: s, agent: a, instructions: go}
"""
    )
    store = tmp_path / "runs.db"
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://127.0.0.1:9"}
    run = cadenza("run", str(path), "--store", str(store), cwd=tmp_path, env=env)
    assert run.returncode == 2, run.stderr
    assert "model 'openai:my-fine-tune', which has no price" in run.stderr
    assert "options.maxCost" in run.stderr
    assert "Traceback" not in run.stderr
    assert (
        not store.exists()
        or "unpriced" not in cadenza("runs", "list", "--store", str(store), cwd=tmp_path).stdout
    )  # nothing ran
    checked = cadenza("validate", str(path), cwd=tmp_path, env=env)
    assert checked.returncode == 2
    assert "has no price" in checked.stderr
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"openai:my-fine-tune": {"input": 1, "output": 2}}))
    priced = cadenza("validate", str(path), "--prices", str(prices), cwd=tmp_path, env=env)
    assert priced.returncode == 0, priced.stderr


def test_prices_from_a_file_on_the_command_line(write_flow: WriteFlow, tmp_path: Path) -> None:
    path = write_flow(PARALLEL.replace("maxCost: 0.025", "maxCost: 100"))
    prices = tmp_path / "ours.yaml"
    prices.write_text('"openai:m": {input: 1000, output: 1000}\n')  # over the workflow's
    with ScriptedLLMServer([ServerRule([ServerReply("done", usage=(60, 40))])]) as server:
        run = cadenza(
            "run",
            str(path),
            "--json",
            "--prices",
            str(prices),
            "--store",
            str(tmp_path / "runs.db"),
            cwd=tmp_path,
            env={**os.environ, **server.environ()},
        )
    assert run.returncode == 0, run.stderr
    usage = json.loads(run.stdout)["usage"]
    assert usage["llmCalls"] == 10
    assert abs(usage["cost"] - 10 * 0.1) < 1e-9  # 100 tokens at 1000 USD per million
