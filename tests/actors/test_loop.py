"""Repeat-until loops: until, maxIterations and its policies, feedback, output modes, delay."""

from __future__ import annotations

from pathlib import Path

import pytest

from cadenza.workflow import LoadedWorkflow, Loop, Step, Workflow
from tests._helpers import run_flow, run_with_events, statuses
from tests.conftest import RunYaml, WriteFlow


async def test_until_stops_a_single_step_loop_with_content_and_iteration(
    run_yaml: RunYaml,
) -> None:
    """A single-step loop runs at loop.N; until sees content and iteration; it stops when true."""
    result = await run_yaml(
        """
        name: count
        steps:
          - id: count
            handler: "HANDLERS:count"
            loop:
              maxIterations: 10
              until: "content == 'n=2' && iteration == 2"
        """,
        handlers="""
        def count(ctx):
            return f"n={ctx.iteration}"
        """,
    )
    assert result.status == "completed", result.error
    assert [result.steps[f"count.{n}"].content for n in range(3)] == ["n=0", "n=1", "n=2"]
    assert "count.3" not in result.steps
    assert result.steps["count"].content == "n=2"
    assert result.loops["count"].iterations == 3
    assert result.loops["count"].termination_reason == "until"


async def test_multi_step_iterations_have_their_own_steps(run_yaml: RunYaml) -> None:
    """Each iteration's steps are loop.N.<id>; until reads them; outer steps stay visible."""
    result = await run_yaml(
        """
        name: cycle
        steps:
          - id: setup
            handler: "HANDLERS:setup"
          - id: cycle
            dependsOn: [setup]
            loop:
              maxIterations: 5
              until: "steps.check.result.ok"
              steps:
                - id: work
                  handler: "HANDLERS:work"
                - id: check
                  dependsOn: [work]
                  handler: "HANDLERS:check"
        output: "steps.cycle.content"
        """,
        handlers="""
        def setup(ctx):
            return "ready"
        def work(ctx):
            # A fresh scope per iteration: last iteration's check is not visible here.
            seen = "check" in ctx.steps
            return f"work {ctx.iteration} after {ctx.steps['setup'].content} saw-check={seen}"
        def check(ctx):
            return {"ok": ctx.iteration == 1, "of": ctx.steps["work"].content}
        """,
    )
    assert result.status == "completed", result.error
    assert result.steps["cycle.0.work"].content == "work 0 after ready saw-check=False"
    assert result.steps["cycle.1.check"].result == {
        "ok": True,
        "of": "work 1 after ready saw-check=False",
    }
    assert result.steps["cycle.1"].status == "completed"
    assert "cycle.2.work" not in result.steps
    assert result.loops["cycle"].termination_reason == "until"
    assert result.steps["cycle"].result == result.steps["cycle.1.check"].result


async def test_on_error_continue_lets_a_failing_step_retry_until_valid(
    run_yaml: RunYaml,
) -> None:
    """With onError: continue a failed iteration is not fatal; until can test status."""
    result = await run_yaml(
        """
        name: retry
        steps:
          - id: fetch
            handler: "HANDLERS:flaky"
            onError: continue
            loop:
              maxIterations: 5
              until: "status == 'completed'"
        """,
        handlers="""
        def flaky(ctx):
            if ctx.iteration < 2:
                raise RuntimeError(f"not yet ({ctx.iteration})")
            return "valid"
        """,
    )
    assert result.status == "completed", result.error
    assert statuses(result, "fetch.0", "fetch.1", "fetch.2") == ["failed", "failed", "completed"]
    assert result.steps["fetch"].status == "completed"
    assert result.steps["fetch"].content == "valid"


async def test_a_failed_iteration_fails_the_loop(run_yaml: RunYaml) -> None:
    """Without onError: continue, the first failing iteration ends the loop as failed."""
    result = await run_yaml(
        """
        name: boom
        steps:
          - id: boom
            handler: "HANDLERS:boom"
            loop: {maxIterations: 5}
        """,
        handlers="""
        def boom(ctx):
            raise ValueError("broken on purpose")
        """,
    )
    assert result.status == "failed"
    assert result.steps["boom"].status == "failed"
    assert result.steps["boom"].error is not None
    assert "broken on purpose" in result.steps["boom"].error.message
    assert "boom.1" not in result.steps
    assert result.loops["boom"].termination_reason == "failed"


@pytest.mark.parametrize(
    ("policy", "status", "flagged"),
    [
        ("returnLast", "completed", False),
        ("fail", "failed", False),
        ("returnWithFlag", "completed", True),
    ],
)
async def test_on_max_iterations_policies(
    run_yaml: RunYaml, policy: str, status: str, flagged: bool
) -> None:
    """Reaching maxIterations returns the last output, fails, or returns it flagged."""
    result = await run_yaml(
        f"""
        name: capped
        steps:
          - id: capped
            handler: "HANDLERS:same"
            onError: continue
            loop:
              maxIterations: 2
              until: "content == 'never'"
              onMaxIterations: {policy}
        """,
        handlers="""
        def same(ctx):
            return f"try {ctx.iteration}"
        """,
    )
    loop = result.loops["capped"]
    assert (loop.iterations, loop.termination_reason, loop.flagged) == (2, "maxIterations", flagged)
    record = result.steps["capped"]
    assert record.status == status
    if status == "completed":
        assert record.content == "try 1"
    else:
        assert record.error is not None
        assert record.error.type == "MaxIterations"


async def test_a_loop_built_without_max_iterations_stops_at_the_safety_cap(tmp_path: Path) -> None:
    """A loop built in Python without maxIterations runs at most 100 iterations."""
    (tmp_path / "cap_handlers.py").write_text("async def tick(ctx):\n    return 'tick'\n")
    step = Step(id="spin", handler="cap_handlers:tick", loop=Loop(until="content == 'tock'"))
    document = LoadedWorkflow(Workflow(name="cap", steps=[step]), None, tmp_path)
    result = await run_flow(document)
    assert result.status == "completed", result.error
    assert result.loops["spin"].iterations == 100
    assert result.loops["spin"].termination_reason == "maxIterations"
    assert "spin.99" in result.steps
    assert "spin.100" not in result.steps


async def test_feedback_reaches_the_first_body_step_from_iteration_one(
    run_yaml: RunYaml,
) -> None:
    """The first body step gets the previous iteration's output; later steps do not."""
    result = await run_yaml(
        """
        name: reflect
        steps:
          - id: reflect
            loop:
              maxIterations: 3
              steps:
                - id: write
                  handler: "HANDLERS:write"
                - id: critique
                  dependsOn: [write]
                  handler: "HANDLERS:critique"
          - id: quiet
            handler: "HANDLERS:write"
            loop: {maxIterations: 2, feedback: false}
        """,
        handlers="""
        def write(ctx):
            return f"draft {ctx.iteration} (feedback: {ctx.brief.feedback})"
        def critique(ctx):
            return f"critique {ctx.iteration} (feedback: {ctx.brief.feedback})"
        """,
    )
    assert result.status == "completed", result.error
    assert result.steps["reflect.0.write"].content == "draft 0 (feedback: None)"
    assert result.steps["reflect.1.write"].content == (
        "draft 1 (feedback: critique 0 (feedback: None))"
    )
    assert result.steps["reflect.2.critique"].content == "critique 2 (feedback: None)"
    assert result.steps["quiet.1"].content == "draft 1 (feedback: None)"


@pytest.mark.parametrize(
    ("loop", "returns", "contents"),
    [
        pytest.param(  # memory: accumulate gives every iteration the same memory key
            "{maxIterations: 2, memory: accumulate}",
            "f'{ctx.brief.memory} {ctx.brief.memory_key}'",
            {"each.0": "accumulate each:each", "each.1": "accumulate each:each"},
            id="memory-and-a-stable-key",
        ),
        pytest.param(  # outputMode: cumulative makes the content every iteration's, in order
            "{maxIterations: 3, outputMode: cumulative}",
            "f'round {ctx.iteration}'",
            {"each": "round 0\n\n---\n\nround 1\n\n---\n\nround 2"},
            id="cumulative-output",
        ),
    ],
)
async def test_a_loop_option_reaches_the_steps_or_the_loops_content(
    run_yaml: RunYaml, loop: str, returns: str, contents: dict[str, str]
) -> None:
    """A one-step loop ``each`` whose handler returns ``returns``: the contents it gives."""
    result = await run_yaml(
        f"name: one\nsteps:\n  - {{id: each, handler: 'HANDLERS:each', loop: {loop}}}\n",
        handlers=f"def each(ctx):\n    return {returns}\n",
    )
    assert {address: result.steps[address].content for address in contents} == contents


async def test_a_bad_until_fails_the_loop_naming_the_expression(run_yaml: RunYaml) -> None:
    """An until that cannot be evaluated fails the loop step with the expression in the error."""
    result = await run_yaml(
        """
        name: bad-until
        steps:
          - id: spin
            handler: "HANDLERS:spin"
            loop:
              maxIterations: 3
              until: "result.missing == 1"
        """,
        handlers="""
        def spin(ctx):
            return {"present": 1}
        """,
    )
    assert result.status == "failed"
    error = result.steps["spin"].error
    assert error is not None
    assert "result.missing == 1" in error.message
    assert "missing" in error.message


async def test_iteration_events_carry_namespaced_addresses(write_flow: WriteFlow) -> None:
    """iteration_start/iteration_end per iteration at loop.N, then loop_end with the reason."""
    path = write_flow(
        """
        name: events
        steps:
          - id: tick
            handler: "HANDLERS:tick"
            loop: {maxIterations: 2}
        """,
        handlers="""
        def tick(ctx):
            return "tick"
        """,
    )
    result, events = await run_with_events(path)
    assert result.status == "completed"
    mine = [(e.type, e.step_id) for e in events if e.type.startswith(("iteration", "loop"))]
    assert mine == [
        ("iteration_start", "tick.0"),
        ("iteration_end", "tick.0"),
        ("iteration_start", "tick.1"),
        ("iteration_end", "tick.1"),
        ("loop_end", "tick"),
    ]
    end = next(e for e in events if e.type == "loop_end")
    assert end.data == {"iterations": 2, "terminationReason": "maxIterations", "flagged": False}
    start = next(e for e in events if e.type == "step_start" and e.step_id == "tick")
    assert start.data is not None
    assert start.data["loop_type"] == "repeat"
