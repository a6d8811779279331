"""The token budget of a control loop: reserved before each call, overshot by one call at most."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import msgspec
import pytest

from cadenza.protocols import Event
from tests._helpers import run_with_events

ACTOR = {
    "name": "actor",
    "inputs": {"objective": {}, "feedback": {}},
    "agents": {
        "writer": {
            "resultSchema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
            "script": [],
        }
    },
    "steps": [{"id": "write", "agent": "writer", "instructions": "{{ inputs.objective }}"}],
    "output": "steps.write.result",
}

EVALUATOR = {
    "name": "evaluator",
    "inputs": {"result": {}},
    "agents": {
        "judge": {
            "resultSchema": {
                "type": "object",
                "properties": {"passed": {"type": "boolean"}, "score": {"type": "number"}},
                "required": ["passed", "score"],
            },
            "script": [],
        }
    },
    "steps": [{"id": "judge", "agent": "judge", "instructions": "Judge {{ inputs.result }}"}],
    "output": "steps.judge.result",
}


def submit(arguments: dict[str, object]) -> dict[str, object]:
    return {"toolCalls": [{"name": "submit_result", "arguments": arguments}]}


def write_loop(directory: Path, rng: random.Random, step: str, budget: int) -> dict[str, object]:
    """A control step whose scripted actor and judge use a random number of tokens per call."""
    actor = msgspec.json.decode(msgspec.json.encode(ACTOR))
    evaluator = msgspec.json.decode(msgspec.json.encode(EVALUATOR))
    actor["agents"][f"writer_{step}"] = actor["agents"].pop("writer")
    actor["steps"][0]["agent"] = f"writer_{step}"
    evaluator["agents"][f"judge_{step}"] = evaluator["agents"].pop("judge")
    evaluator["steps"][0]["agent"] = f"judge_{step}"
    for _ in range(60):
        text = "w" * rng.randint(10, 3000)
        actor["agents"][f"writer_{step}"]["script"].append(submit({"text": text}))
        verdict = {"passed": False, "score": rng.random(), "padding": "p" * rng.randint(0, 800)}
        evaluator["agents"][f"judge_{step}"]["script"].append(submit(verdict))
    (directory / f"actor-{step}.json").write_bytes(msgspec.json.encode(actor))
    (directory / f"evaluator-{step}.json").write_bytes(msgspec.json.encode(evaluator))
    return {
        "id": step,
        "onError": "continue",
        "control": {
            "objective": "Write something",
            "actor": f"actor-{step}.json",
            "evaluator": f"evaluator-{step}.json",
            "limits": {
                "maxIterations": 60,
                "maxTokens": budget,
                "maxRetries": 100,
                "noProgressAfter": 100,
            },
        },
    }


def call_usage(events: list[Event], step: str) -> dict[str, int]:
    """Tokens per call (``step.N.role``), from the agent turns under each call's address."""
    used: dict[str, int] = defaultdict(int)
    for event in events:
        address = event.step_id or ""
        if event.type == "agent_turn" and event.tokens and address.startswith(f"{step}."):
            used[".".join(address.split(".")[:3])] += event.tokens.total
    return used


@pytest.mark.parametrize("seed", range(12))
async def test_spent_never_exceeds_the_budget_by_more_than_one_call(
    tmp_path: Path, seed: int
) -> None:
    """Across seeded random call sizes and budgets, the overshoot is at most one call."""
    rng = random.Random(seed)
    budget = rng.randint(500, 12_000)
    flow = {"name": "budget", "steps": [write_loop(tmp_path, rng, "task", budget)]}
    path = tmp_path / "flow.json"
    path.write_bytes(msgspec.json.encode(flow))
    result, events = await run_with_events(path)
    control = result.steps["task"].result
    used = call_usage(events, "task")
    assert control["status"] == "stopped_budget"
    assert control["tokensSpent"] == sum(used.values())
    assert control["tokensSpent"] <= budget + max(used.values())
    assert "token budget" in control["decisionLog"][-1]["reason"]


async def test_each_loop_counts_only_its_own_childrens_tokens(tmp_path: Path) -> None:
    """Two control loops running side by side each count their own calls, not the other's."""
    rng = random.Random(7)
    steps = [write_loop(tmp_path, rng, name, 4000) for name in ("left", "right")]
    path = tmp_path / "flow.json"
    path.write_bytes(msgspec.json.encode({"name": "pair", "steps": steps}))
    result, events = await run_with_events(path)
    for name in ("left", "right"):
        spent = result.steps[name].result["tokensSpent"]
        assert spent == sum(call_usage(events, name).values())
        assert spent > 0
    total = result.usage.prompt_tokens + result.usage.completion_tokens
    assert total == sum(result.steps[n].result["tokensSpent"] for n in ("left", "right"))
