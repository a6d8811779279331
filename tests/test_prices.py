"""Prices and cost budgets: what a model call costs, and who stops spending (docs/prices.md).

The runs talk to a scripted chat model over HTTP (``model_server``) that reports
fixed token counts, so every call's cost is known: 100 tokens at 100 USD per
million tokens is 0.01 USD a call.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadenza import Runtime, WorkflowError
from cadenza.llm import DEFAULT_PRICES, LLMUsage, Price, PriceTable
from cadenza.testing import ServerReply, ServerRule
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import run_flow
from tests.conftest import WriteFlow

CALL = ServerRule([ServerReply("done", usage=(60, 40))])
PRICED = '"openai:m": {input: 100, output: 100}'  # 0.01 USD a call of CALL


# -- the table -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "model", "priced_as"),
    [
        ("openai", "gpt-4o", "openai:gpt-4o"),
        ("openai", "gpt-4o-2024-08-06", "openai:gpt-4o"),  # a dated snapshot
        ("openai", "gpt-4o-mini", "openai:gpt-4o-mini"),  # its own entry, not gpt-4o's
        ("openai", "gpt-4.1", "openai:gpt-4.1"),  # not gpt-4's: "." is no snapshot mark
        ("azure", "gpt-4o", "openai:gpt-4o"),
        ("anthropic", "claude-sonnet-4-6", "anthropic:claude-sonnet-4"),
        ("vertex-anthropic", "claude-sonnet-4@20250514", "anthropic:claude-sonnet-4"),
        ("bedrock", "us.anthropic.claude-sonnet-4-20250514-v1:0", "anthropic:claude-sonnet-4"),
        ("bedrock", "anthropic.claude-3-5-haiku-20241022-v1:0", "anthropic:claude-3-5-haiku"),
        ("anthropic", "claude-opus-4-5-20251101", "anthropic:claude-opus-4-5"),
        ("anthropic", "claude-opus-4-1", "anthropic:claude-opus-4"),
        ("vertex", "gemini-2.5-flash-lite", "google:gemini-2.5-flash-lite"),
        ("openrouter", "anthropic/claude-3-5-haiku", "anthropic:claude-3-5-haiku"),
    ],
)
def test_the_shipped_table_prices_a_model_as_its_family(
    provider: str, model: str, priced_as: str
) -> None:
    assert PriceTable().price(provider, model) == DEFAULT_PRICES[priced_as]


@pytest.mark.parametrize(
    ("provider", "model"),
    [("openai", "gpt-4.5-preview"), ("ollama", "llama3.1:8b"), ("scripted", "writer")],
)
def test_a_model_the_table_does_not_know_has_no_price(provider: str, model: str) -> None:
    assert PriceTable().price(provider, model) is None


def test_overrides_win_without_leaking_into_other_models() -> None:
    table = PriceTable(
        {"openai:gpt-4o": Price(1, 2)}, {"scripted": Price(3, 4), "openai:ft-*": Price(5, 6)}
    )
    assert table.price("openai", "gpt-4o") == Price(1, 2)
    assert table.price("openai", "gpt-4o-2024-08-06") == Price(1, 2)
    assert table.price("openai", "gpt-4o-mini") == DEFAULT_PRICES["openai:gpt-4o-mini"]
    assert table.price("scripted", "any-agent") == Price(3, 4)
    assert table.price("openai", "ft-2025-ours") == Price(5, 6)
    assert table.price_of("scripted") == Price(3, 4)


def test_a_price_counts_cached_prompt_tokens_at_their_own_price() -> None:
    price = Price(input=2.0, output=8.0, cached_input=0.5)
    usage = LLMUsage(prompt_tokens=1_000_000, completion_tokens=500_000, cached_tokens=400_000)
    assert price.cost(usage) == pytest.approx(600_000 * 2e-6 + 400_000 * 0.5e-6 + 4.0)
    assert Price(1.0, 1.0).cost(usage) == pytest.approx(1.5)  # no cached price: as input


def test_a_negative_price_is_refused() -> None:
    with pytest.raises(ValueError, match="input must be a number >= 0"):
        Price(-1.0, 1.0)


# -- budgets in runs -------------------------------------------------------------------


async def test_an_agents_budget_stops_that_agent(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    model_server([CALL])
    path = write_flow(
        f"""
name: agent-budget
prices: {{{PRICED}}}
agents:
  thrifty: {{model: "openai:m", maxCost: 0.015}}
  free: {{model: "openai:m"}}
steps:
  - {{id: f1, agent: free, instructions: one}}
  - {{id: t1, agent: thrifty, instructions: two, dependsOn: [f1]}}
  - {{id: f2, agent: free, instructions: three, dependsOn: [t1]}}
  - {{id: t2, agent: thrifty, instructions: four, dependsOn: [f2]}}
  - {{id: f3, agent: free, instructions: five, dependsOn: [t2]}}
  - {{id: t3, agent: thrifty, instructions: six, dependsOn: [f3]}}
"""
    )
    result = await run_flow(path)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.type == "BudgetExceeded"
    assert result.error.address == "t3"
    assert "agent 'thrifty'" in result.error.message
    assert "agents.thrifty.maxCost" in result.error.message
    by_agent = result.usage.by_agent
    assert (by_agent["thrifty"].llm_calls, by_agent["free"].llm_calls) == (2, 3)
    assert by_agent["thrifty"].cost == pytest.approx(0.02)
    assert result.usage.cost == pytest.approx(sum(usage.cost for usage in by_agent.values()))


async def test_a_loop_steps_budget_stops_the_loop(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    model_server([CALL])
    path = write_flow(
        f"""
name: loop-budget
prices: {{{PRICED}}}
agents:
  a: {{model: "openai:m"}}
steps:
  - id: before
    agent: a
    instructions: warm up
  - id: polish
    dependsOn: [before]
    maxCost: 0.025
    loop:
      maxIterations: 10
      steps:
        - {{id: draft, agent: a, instructions: "draft {{{{ iteration }}}}"}}
"""
    )
    result = await run_flow(path)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.type == "BudgetExceeded"
    assert "step 'polish'" in result.error.message
    assert "maxCost of step polish" in result.error.message
    assert result.error.address == "polish.3.draft"  # 3 iterations' calls: 0.03 >= 0.025
    assert result.usage.llm_calls == 4  # the step before the loop is not the loop's
    assert result.usage.cost == pytest.approx(0.04)


async def test_a_steps_budget_covers_each_turn_of_its_agent(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("notes")
    read = {"toolCalls": [{"name": "read", "arguments": {"path": "notes.txt"}}]}
    path = write_flow(
        f"""
name: step-budget
prices: {{scripted: {{input: 1000, output: 1000}}}}
agents:
  reader:
    tools: [read]
    script: [{json.dumps(read)}, {json.dumps(read)}, {json.dumps(read)}, "done"]
steps:
  - {{id: study, agent: reader, instructions: read the notes, maxCost: 0.0001}}
"""
    )
    result = await run_flow(path)
    assert result.status == "failed"
    assert result.error is not None
    assert "step 'study'" in result.error.message
    assert result.usage.llm_calls == 1  # one call is past 0.0001 USD: no second turn


async def test_usage_adds_up_and_survives_a_resume(
    write_flow: WriteFlow, model_server: StartLLMServer, tmp_path: Path
) -> None:
    model_server([CALL])
    path = write_flow(
        f"""
name: resumed
prices: {{{PRICED}}}
options: {{maxCost: 0.025}}
agents:
  a: {{model: "openai:m"}}
steps:
  - {{id: one, agent: a, instructions: one}}
  - {{id: two, agent: a, instructions: two, dependsOn: [one]}}
  - id: ask
    dependsOn: [two]
    human: {{prompt: "go on?"}}
  - {{id: three, agent: a, instructions: three, dependsOn: [ask]}}
  - {{id: four, agent: a, instructions: four, dependsOn: [three]}}
"""
    )
    store = tmp_path / "runs.db"
    async with Runtime(store=store) as runtime:
        first = await runtime.run(path, run_id="r")
        assert first.status == "waiting"
        assert first.usage.cost == pytest.approx(0.02)
        await runtime.signal("r", "ask", "yes")
    async with Runtime(store=store) as runtime:  # another process: counts from the log
        handle = await runtime.resume("r")
        result = await handle.result()
        events = await runtime.stored_events("r")
    costs = [
        event.data["cost"]
        for event in events
        if event.type == "agent_turn" and event.data and event.data["phase"] == "response"
    ]
    # The budget counted the calls made before the pause: "three" crosses 0.025.
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.address == "four"
    assert result.usage.llm_calls == len(costs) == 3
    assert result.usage.cost == pytest.approx(sum(costs)) == pytest.approx(0.03)
    assert result.usage.by_agent["a"].cost == pytest.approx(0.03)
    ends = [e for e in events if e.type == "step_end" and e.step_id in ("one", "two", "three")]
    assert [e.data["cost"] if e.data else None for e in ends] == pytest.approx([0.01] * 3)


async def test_prices_from_python_override_the_workflows(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    model_server([CALL])
    path = write_flow(
        f"""
name: python-prices
prices: {{{PRICED}}}
options: {{maxCost: 5}}
agents:
  a: {{model: "openai:m"}}
steps:
  - {{id: one, agent: a, instructions: one}}
"""
    )
    async with Runtime(prices={"openai:m": {"input": 1000, "output": 3000}}) as runtime:
        result = await runtime.run(path)
    assert result.status == "completed"
    assert result.usage.cost == pytest.approx(60 * 1e-3 + 40 * 3e-3)


async def test_a_prices_file_named_by_the_workflow(
    write_flow: WriteFlow, model_server: StartLLMServer, tmp_path: Path
) -> None:
    model_server([CALL])
    (tmp_path / "prices.yaml").write_text(PRICED + "\n")
    path = write_flow(
        """
name: file-prices
prices: prices.yaml
agents:
  a: {model: "openai:m", maxCost: 1}
steps:
  - {id: one, agent: a, instructions: one}
"""
    )
    result = await run_flow(path)
    assert result.status == "completed"
    assert result.usage.cost == pytest.approx(0.01)


async def test_an_unpriced_model_under_a_budget_is_refused_and_a_priced_one_runs(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    model_server([CALL])
    path = write_flow(
        """
name: refused
agents:
  a: {model: "openai:m"}
steps:
  - id: outer
    maxCost: 1
    loop:
      maxIterations: 1
      steps:
        - {id: inner, agent: a, instructions: one}
"""
    )
    async with Runtime() as runtime:
        with pytest.raises(WorkflowError) as refused:
            await runtime.start(path)
        assert await runtime.list_runs() == []  # nothing was recorded
    (problem,) = refused.value.problems
    assert problem.path == "steps[0].loop.steps[0]"
    assert "'openai:m', which has no price" in problem.message
    assert "steps[0].maxCost" in problem.message
    async with Runtime(prices={"openai:m": Price(100, 100)}) as runtime:
        result = await runtime.run(path)
    assert result.status == "completed"
    assert result.usage.cost == pytest.approx(0.01)


async def test_without_a_budget_an_unpriced_call_is_counted_not_refused(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    model_server([CALL])
    path = write_flow(
        """
name: unbudgeted
agents:
  a: {model: "openai:m"}
steps:
  - {id: one, agent: a, instructions: one}
"""
    )
    result = await run_flow(path)
    assert result.status == "completed"
    assert (result.usage.cost, result.usage.unpriced_calls) == (0.0, 1)
