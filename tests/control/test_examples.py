"""The control-loop examples run to their documented outcomes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cadenza import RunResult
from tests._helpers import EXAMPLES, load_example, run_flow, run_on


async def run(name: str, **inputs: Any) -> RunResult:
    return await run_flow(EXAMPLES / name, inputs=inputs)


def decisions(result: RunResult, step: str) -> list[str]:
    return [entry["decision"] for entry in result.steps[step].result["decisionLog"]]


async def test_an_impossible_constraint_retries_replans_and_stops_at_the_cap() -> None:
    """Five long keywords never fit in 30 characters: retries, a replan, stopped_max_iterations."""
    result = await run("control-impossible.yaml")
    control = result.steps["slogan"].result
    assert result.status == "failed"
    assert control["status"] == "stopped_max_iterations"
    assert decisions(result, "slogan") == ["retry", "retry", "replan", "retry", "stop"]
    assert "slogan.3.planner" in result.steps
    assert control["iterations"] == 5
    assert control["tokensSpent"] > 0
    assert result.output == '{"text":"scalable+reliable+portable"}'  # the best attempt


async def test_the_length_check_wins_over_a_judge_who_loves_a_long_draft() -> None:
    """The judge passes a 240-char draft with 0.97; the check fails it; the next one is short."""
    result = await run("control-tagline.yaml")
    assert result.status == "completed", result.error
    first = result.steps["tagline.0"].result
    assert first["verdict"] == {
        "passed": True,
        "score": 0.97,
        "feedback": "Vivid and complete. I love it.",
    }
    control = result.steps["tagline"].result
    assert decisions(result, "tagline") == ["retry", "accept"]
    assert control["decisionLog"][0]["feedback"].startswith("Too long: 240 chars, limit 120\n")
    assert len(str(result.output)) <= 120
    assert "fast" in str(result.output)


async def test_the_check_is_the_authority_on_an_exact_length_range() -> None:
    """148 and 178 characters both pass the judge and fail the check; 161 is accepted."""
    result = await run("control-exact-length.yaml")
    assert result.status == "completed", result.error
    log = result.steps["blurb"].result["decisionLog"]
    assert [entry["decision"] for entry in log] == ["retry", "retry", "accept"]
    assert log[0]["feedback"].startswith("148 characters: add 2 or more")
    assert log[1]["feedback"].startswith("178 characters: cut 8 or more")
    assert 150 <= len(str(result.output)) <= 170


async def test_a_missing_actor_workflow_is_retried_then_stops_as_an_infra_failure() -> None:
    """Three failed loads (maxInfraRetries 2), stopped_infra_failure; the fallback runs."""
    result = await run("control-missing-actor.yaml")
    assert result.status == "completed", result.error
    control = result.steps["tagline"].result
    assert result.steps["tagline"].status == "failed"
    assert control["status"] == "stopped_infra_failure"
    assert decisions(result, "tagline") == ["retry", "retry", "stop"]
    assert "cannot load workflow 'control/actor-v2.yaml'" in control["decisionLog"][0]["reason"]
    assert result.output == "Cadenza: agent loops that stop.\n"
    swapped = await run("control-missing-actor.yaml", actor="control/actor-tagline.yaml")
    assert swapped.steps["tagline"].result["status"] == "succeeded"


async def test_a_coding_loop_is_judged_by_real_pytest_in_a_sandbox() -> None:
    """The first slugify fails one of three real tests; the failure is the feedback; then green."""
    result = await run("control-coding.yaml")
    assert result.status == "completed", result.error
    log = result.steps["slugify"].result["decisionLog"]
    assert [entry["decision"] for entry in log] == ["retry", "accept"]
    assert log[0]["feedback"].startswith("failing: test_strips_punctuation: AssertionError")
    verdict = result.steps["slugify.0"].result["verdict"]
    assert (verdict["passed"], verdict["score"]) == (False, 0.667)
    assert result.steps["slugify"].result["score"] == 1.0
    assert "re.findall" in str(result.output)


async def test_a_claim_waits_for_a_persons_sign_off(tmp_path: Path) -> None:
    """escalate: human: the run waits at signoff.0.human; "drop the number" gets a plain draft."""
    async with run_on(tmp_path / "runs.db", EXAMPLES / "control-signoff.yaml", "demo") as (
        runtime,
        paused,
    ):
        assert paused.status == "waiting"
        question = (await runtime.pending_inputs("demo"))["signoff.0.human"]
        assert "It claims '10x'; only a person can sign that off." in question["prompt"]
        answer = {"decision": "retry", "feedback": "Drop the number."}
        await runtime.signal("demo", "signoff.0.human", answer)
        result = await (await runtime.resume("demo")).result()
    assert result.status == "completed", result.error
    assert decisions(result, "signoff") == ["escalate", "retry", "accept"]
    assert result.output == (
        "Cadenza 2.0 is out: durable control loops that resume where they stopped."
    )


@pytest.fixture
def sdk_example() -> Any:
    return load_example("control_sdk", "control_sdk")


async def test_the_python_sdk_example_prints_its_decisions_as_they_are_made(
    sdk_example: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """retry (too long), replan (judge), accept: the same engine as the YAML examples."""
    outcome = await sdk_example.main()
    assert outcome.status == "succeeded"
    assert [entry.decision for entry in outcome.decision_log] == ["retry", "replan", "accept"]
    assert outcome.result == {"text": "Cadenza: agent loops that stop."}
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("iteration 0: retry (check failed: size(result.text) <= 60")
    assert len(printed) == 3
