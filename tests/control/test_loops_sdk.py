"""cadenza.loops: a control loop of plain Python functions, run by the same engine."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import cadenza.loops
from cadenza import CadenzaError, Runtime
from cadenza.errors import ExpressionSyntaxError
from cadenza.loops import (
    ActorInput,
    ControlLoop,
    Evaluation,
    EvaluatorInput,
    LoopError,
    PlannerInput,
    PrePlannerInput,
)


def test_all_is_complete_and_sorted() -> None:
    """Every public name of cadenza.loops is in __all__ once, in order."""
    public = {name for name in vars(cadenza.loops) if not name.startswith("_")}
    assert set(cadenza.loops.__all__) == public
    assert cadenza.loops.__all__ == sorted(cadenza.loops.__all__)


def test_the_old_name_is_an_alias_that_warns() -> None:
    """``Loop`` (before it became ``ControlLoop``) still gives the class, and says so."""
    with pytest.warns(DeprecationWarning, match=r"cadenza\.loops\.ControlLoop"):
        old = cadenza.loops.Loop
    assert old is ControlLoop
    with pytest.raises(AttributeError, match="Lop"):
        _ = cadenza.loops.Lop


def passes(task: EvaluatorInput) -> Evaluation:
    """An evaluator that passes every result."""
    return Evaluation(passed=True, score=1)


def tagline_loop(**options: Any) -> ControlLoop:
    loop = ControlLoop("Write a tagline", criteria="short", **options)
    loop.check("size(result.text) <= 20", "Too long: {{ size(result.text) }} chars")
    return loop


async def test_sync_and_async_functions_get_typed_inputs_and_may_return_plain_values() -> None:
    """A sync planner and actor (strings) and an async evaluator (Evaluation) make a loop."""
    seen: list[Any] = []
    loop = tagline_loop()

    @loop.planner
    def plan(task: PlannerInput) -> str:
        seen.append(task)
        return "be brief"

    @loop.actor
    def write(task: ActorInput) -> str:
        seen.append(task)
        return "a very long tagline indeed" if task.iteration == 0 else "short one"

    @loop.evaluator
    async def judge(task: EvaluatorInput) -> Evaluation:
        seen.append(task)
        return Evaluation(passed=True, score=0.8, feedback="ok")

    result = await loop.run()
    assert result.succeeded
    assert result.result == {"text": "short one"}
    assert result.score == 0.8
    assert [entry.decision for entry in result.decision_log] == ["retry", "accept"]
    assert seen[0] == PlannerInput("Write a tagline", "short", "", [])
    assert seen[1] == ActorInput("Write a tagline", "be brief", "", 0)
    assert seen[2] == EvaluatorInput(
        "Write a tagline", "short", {"text": "a very long tagline indeed"}
    )
    assert seen[3].feedback == "Too long: 26 chars\nok"


async def test_a_pre_planner_rewrites_the_objective_once_before_the_loop() -> None:
    """The loop works on what the pre-planner made of the objective and criteria."""
    loop = ControlLoop("tagline", criteria="any")
    calls: list[PrePlannerInput] = []

    @loop.pre_planner
    async def refine(task: PrePlannerInput) -> dict[str, str]:
        calls.append(task)
        return {"objective": f"Write a {task.objective} for Cadenza", "criteria": "one line"}

    @loop.actor
    async def write(task: ActorInput) -> dict[str, Any]:
        return {"text": task.objective}

    @loop.evaluator
    def judge(task: EvaluatorInput) -> dict[str, Any]:
        return {"passed": task.criteria == "one line", "score": 1}

    result = await loop.run()
    assert result.result == {"text": "Write a tagline for Cadenza"}
    assert calls == [PrePlannerInput("tagline", "any")]


async def test_a_pre_planner_may_return_the_objective_and_a_sync_function_a_coroutine() -> None:
    """A string from the pre-planner is the new objective; awaitables are awaited."""
    loop = ControlLoop("tagline", criteria="kept")

    @loop.pre_planner
    def refine(task: PrePlannerInput) -> str:
        return f"{task.objective}, refined"

    async def write_async(task: ActorInput) -> str:
        return task.objective

    loop.actor(lambda task: write_async(task))

    @loop.evaluator
    def judge(task: EvaluatorInput) -> Evaluation:
        return Evaluation(passed=task.criteria == "kept", score=1)

    result = await loop.run()
    assert result.succeeded
    assert result.result == {"text": "tagline, refined"}


async def test_the_decision_log_grows_live_while_the_loop_runs() -> None:
    """After the first decision and before the second attempt ends, the log has one entry."""
    loop = tagline_loop()
    release = asyncio.Event()

    @loop.actor
    async def write(task: ActorInput) -> str:
        if task.iteration == 1:
            await release.wait()
            return "short"
        return "much too long for twenty"

    loop.evaluator(passes)

    async with Runtime() as runtime:
        run = await loop.start(runtime)
        entries = run.decisions()
        first = await anext(entries)
        assert first.decision == "retry"
        assert [entry.decision for entry in run.decision_log] == ["retry"]
        release.set()
        second = await anext(entries)
        await entries.aclose()
        result = await run.result()
    assert second.decision == "accept"
    assert result.decision_log == (first, second)


async def test_the_loop_runs_on_the_engine_as_a_control_step() -> None:
    """Its events and addresses are a control step's: loop.N.actor, decision events."""
    loop = tagline_loop(name="pitch")

    @loop.actor
    def write(task: ActorInput) -> str:
        return "fine"

    loop.evaluator(passes)

    async with Runtime() as runtime:
        result = await loop.run(runtime)
        events = await runtime.stored_events(result.run_id)
    assert [(e.type, e.step_id) for e in events if e.type == "decision"] == [("decision", "pitch")]
    assert any(e.step_id == "pitch.0.actor" for e in events if e.type == "step_start")
    control = loop.workflow().workflow.steps[0].control
    assert control is not None
    assert control.limits.max_iterations == 5


async def test_a_function_that_raises_or_returns_the_wrong_shape_is_an_infra_failure() -> None:
    """The engine, not the SDK, judges the shape: a list is not a result map."""
    loop = tagline_loop(max_infra_retries=1)
    attempts: list[int] = []

    @loop.actor
    def write(task: ActorInput) -> Any:
        attempts.append(task.iteration)
        if task.iteration == 0:
            raise RuntimeError("model unavailable")
        return ["not", "a", "map"]

    loop.evaluator(passes)

    result = await loop.run()
    assert result.status == "stopped_infra_failure"
    assert attempts == [0, 1]
    reasons = [entry.reason for entry in result.decision_log]
    assert "RuntimeError: model unavailable" in reasons[0]
    assert "its output is not a map" in reasons[1]


async def test_the_delegate_and_escalation_work_as_in_yaml(tmp_path: Path) -> None:
    """recommend=delegate hands over to the delegate; a failing delegate asks a person."""
    loop = ControlLoop("Do it", max_retries=0, escalate="human")

    @loop.actor
    def generalist(task: ActorInput) -> str:
        return "generic"

    @loop.delegate
    async def specialist(task: ActorInput) -> str:
        return "special"

    @loop.evaluator
    def judge(task: EvaluatorInput) -> Evaluation:
        return Evaluation(passed=False, score=0.1, feedback="no", recommend="delegate")

    async with Runtime(store=tmp_path / "runs.db") as runtime:
        run = await loop.start(runtime, run_id="r")
        with pytest.raises(LoopError, match="waiting"):  # no decision yet: a person must answer
            await run.result()
        assert [entry.decision for entry in run.decision_log] == ["delegate", "escalate"]
        assert list(await runtime.pending_inputs("r")) == ["loop.1.human"]
        await runtime.signal("r", "loop.1.human", {"decision": "accept"})
        resumed = await (await runtime.resume("r")).result()
    control = resumed.steps["loop"].result
    assert control["status"] == "succeeded"
    assert control["result"] == {"text": "special"}
    assert [entry["decision"] for entry in control["decisionLog"]] == [
        "delegate",
        "escalate",
        "accept",
    ]


async def test_a_cancelled_loop_has_no_result() -> None:
    """result() raises LoopError when the run ended without a decision."""
    loop = tagline_loop()
    started = asyncio.Event()

    @loop.actor
    async def write(task: ActorInput) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    loop.evaluator(passes)

    async with Runtime() as runtime:
        run = await loop.start(runtime)
        await started.wait()
        run.cancel("enough")
        with pytest.raises(LoopError, match="Cancelled: enough"):
            await run.result()
    assert run.run_id
    assert run.decision_log == []


def test_a_loop_is_checked_when_it_is_built() -> None:
    """Bad names, limits and checks fail at once; a loop needs an actor and an evaluator."""
    with pytest.raises(ValueError, match="step id"):
        ControlLoop("x", name="Not An Id")
    with pytest.raises(ValueError, match="max_iterations must be at least 1"):
        ControlLoop("x", max_iterations=0)
    with pytest.raises(ValueError, match="duration"):
        ControlLoop("x", timeout="soon")
    with pytest.raises(ExpressionSyntaxError):
        ControlLoop("x").check("size(result.text) <=")
    with pytest.raises(CadenzaError, match="no actor and no evaluator"):
        ControlLoop("x").workflow()
