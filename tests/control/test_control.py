"""The control step: planner -> actor -> checks -> evaluator -> decide, at its addresses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from cadenza import Runtime
from cadenza.errors import SignalRejected
from cadenza.kernel import FakeClock
from cadenza.workflow import validate_file
from tests._helpers import Started, run_flow, run_on, run_with_events, started

from .conftest import ControlFlow, task

FLOW = """
name: control
steps:
  - id: task
    control:
      objective: "Write {{ 'a tagline' }}"
      criteria: "short"
      planner: planner.yaml
      actor: actor.yaml
      evaluator: evaluator.yaml
      checks:
        - expr: "size(result.text) <= 10"
          feedback: "Too long: {{ size(result.text) }} chars, limit 10"
      limits: {maxIterations: 4}
"""

SEEN = """
def plan(ctx):
    return {"plan": "plan %d" % len(ctx.inputs["history"]), "saw": dict(ctx.inputs)}

def act(ctx):
    text = "x" * 20 if ctx.inputs["iteration"] == 0 else "short"
    return {"text": text, "saw": dict(ctx.inputs)}

def judge(ctx):
    return {"passed": True, "score": 0.9, "feedback": "lovely", "saw": dict(ctx.inputs)}
"""


async def test_an_iteration_runs_its_workflows_with_the_contract_inputs(
    control_flow: ControlFlow,
) -> None:
    """Planner, actor and evaluator each get SPEC 2.5's inputs, at task.N.<role>."""
    result = await run_flow(control_flow(FLOW, handlers=SEEN))
    assert result.status == "completed", result.error
    steps = result.steps
    assert steps["task.0.planner"].result["saw"] == {
        "objective": "Write a tagline",
        "criteria": "short",
        "feedback": "",
        "history": [],
    }
    assert steps["task.0.actor"].result["saw"] == {
        "objective": "Write a tagline",
        "plan": "plan 0",
        "feedback": "",
        "iteration": 0,
    }
    assert steps["task.0.evaluator"].result["saw"]["result"]["text"] == "x" * 20
    assert steps["task.0.actor.act"].status == "completed"
    assert "task.1.planner" not in steps
    assert steps["task.1.actor"].result["saw"]["plan"] == "plan 0"


async def test_a_failing_check_beats_the_evaluator_and_its_feedback_arrives_verbatim(
    control_flow: ControlFlow,
) -> None:
    """The judge passed a 20-char draft; the check failed it; the actor heard the check."""
    result = await run_flow(control_flow(FLOW, handlers=SEEN))
    control = result.steps["task"].result
    assert control["status"] == "succeeded"
    assert [e["decision"] for e in control["decisionLog"]] == ["retry", "accept"]
    heard = result.steps["task.1.actor"].result["saw"]["feedback"]
    assert heard.splitlines()[0] == "Too long: 20 chars, limit 10"
    assert control["result"]["text"] == "short"
    assert result.steps["task"].content is not None
    assert '"text":"short"' in result.steps["task"].content
    assert result.steps["task.0"].result["verdict"]["passed"] is True
    assert result.steps["task.0"].result["checks"][0]["passed"] is False


async def test_decisions_are_events_and_iterations_are_records(control_flow: ControlFlow) -> None:
    """Each ruling is a decision event and the iteration's durable record; the loop a summary."""
    result, events = await run_with_events(control_flow(FLOW, handlers=SEEN))
    decisions = [e for e in events if e.type == "decision"]
    assert [(e.step_id, (e.data or {})["decision"]) for e in decisions] == [
        ("task", "retry"),
        ("task", "accept"),
    ]
    assert (decisions[1].data or {})["status"] == "succeeded"
    starts = [e.step_id for e in events if e.type == "iteration_start"]
    assert starts == ["task.0", "task.1"]
    assert result.steps["task.1"].content == (
        "accept: every check passed and the evaluator passed it (score 0.9)"
    )
    assert result.loops["task"].termination_reason == "succeeded"
    assert result.loops["task"].iterations == 2


REPLAN = task(
    "planner: planner.yaml",
    "limits: {maxIterations: 4, maxRetries: 1, maxReplans: 1, noProgressAfter: 5}",
)


async def test_a_replan_asks_the_planner_again_with_the_history(control_flow: ControlFlow) -> None:
    """Retries spent: the planner runs again, seeing the decisions so far and the feedback."""
    handlers = """
    def plan(ctx):
        return {"plan": "plan %d" % len(ctx.inputs["history"]), "saw": dict(ctx.inputs)}
    def act(ctx):
        return {"text": ctx.inputs["plan"]}
    def judge(ctx):
        done = ctx.inputs["result"]["text"] == "plan 2"
        return {"passed": done, "score": 0.5, "feedback": "try harder"}
    """
    result = await run_flow(control_flow(REPLAN, handlers=handlers))
    control = result.steps["task"].result
    assert [e["decision"] for e in control["decisionLog"]] == ["retry", "replan", "accept"]
    saw = result.steps["task.2.planner"].result["saw"]
    assert [e["decision"] for e in saw["history"]] == ["retry", "replan"]
    assert saw["feedback"] == "try harder"
    assert result.steps["task.2.actor"].result == {"text": "plan 2"}


async def test_the_delegate_takes_over_when_the_evaluator_recommends_it(
    control_flow: ControlFlow,
) -> None:
    """recommend: delegate switches later iterations to the delegate workflow."""
    flow = task("delegate: delegate.yaml")
    handlers = """
    def act(ctx):
        return {"by": "actor"}
    def delegate(ctx):
        return {"by": "specialist"}
    def judge(ctx):
        if ctx.inputs["result"]["by"] == "actor":
            return {"passed": False, "score": 0.1, "feedback": "out of depth",
                    "recommend": "delegate"}
        return {"passed": True, "score": 1}
    """
    result = await run_flow(control_flow(flow, handlers=handlers))
    control = result.steps["task"].result
    assert [e["decision"] for e in control["decisionLog"]] == ["delegate", "accept"]
    assert result.steps["task.1.delegate"].result == {"by": "specialist"}
    assert "task.1.actor" not in result.steps
    assert control["result"] == {"by": "specialist"}


BROKEN = {
    "an actor that returns text": (
        'def act(ctx):\n    return "just text"\n',
        "the actor failed: its output is not a map",
    ),
    "an actor that raises": (
        "def act(ctx):\n    raise RuntimeError('model down')\n",
        "the actor failed: RuntimeError: model down",
    ),
    "an evaluator without a boolean verdict": (
        'def judge(ctx):\n    return {"passed": "yes", "score": 1}\n',
        "'passed' must be true or false",
    ),
    "an evaluator with a bad score and recommendation": (
        'def judge(ctx):\n    return {"passed": False, "score": "high", "recommend": "pray"}\n',
        "'score' must be a number; 'recommend' must be one of",
    ),
    "an evaluator whose feedback is not text": (
        'def judge(ctx):\n    return {"passed": True, "score": 1, "feedback": ["a"]}\n',
        "'feedback' must be a string",
    ),
    "a planner that raises": (
        "def plan(ctx):\n    raise ValueError('no idea')\n",
        "the planner failed: ValueError: no idea",
    ),
    "a planner without a plan": (
        'def plan(ctx):\n    return {"idea": 1}\n',
        "the planner failed: its output map has no 'plan'",
    ),
}

FINE = """
def plan(ctx):
    return {"plan": "p"}
def act(ctx):
    return {"text": "ok"}
def judge(ctx):
    return {"passed": True, "score": 1}
"""


@pytest.mark.parametrize(("handler", "says"), BROKEN.values(), ids=BROKEN.keys())
async def test_a_child_that_fails_or_returns_the_wrong_shape_is_an_infrastructure_failure(
    control_flow: ControlFlow, handler: str, says: str
) -> None:
    """Bounded by maxInfraRetries (2): three tries, then stopped_infra_failure."""
    path = control_flow(REPLAN, handlers=FINE + handler)
    result = await run_flow(path)
    record = result.steps["task"]
    assert result.status == "failed"
    assert record.status == "failed"
    assert record.error is not None
    assert record.error.type == "ControlStopped"
    control = record.result
    assert control["status"] == "stopped_infra_failure"
    assert [e["decision"] for e in control["decisionLog"]] == ["retry", "retry", "stop"]
    assert says in control["decisionLog"][0]["reason"]
    assert result.steps["task.0"].status == "failed"


async def test_a_child_that_requires_an_input_outside_the_contract_is_an_infra_failure(
    control_flow: ControlFlow,
) -> None:
    """The child gets only the contract inputs it declares; a required extra one fails."""
    needy = """
    name: actor
    inputs: {objective: {}, secret: {type: string}}
    steps: [{id: act, handler: "HANDLERS:act"}]
    output: steps.act.result
    """
    path = control_flow(REPLAN, handlers=FINE, children={"actor.yaml": needy})
    result = await run_flow(path)
    control = result.steps["task"].result
    assert control["status"] == "stopped_infra_failure"
    assert "missing required input(s): secret" in control["decisionLog"][0]["reason"]
    assert result.steps["task.0.actor"].status == "failed"


async def test_a_reference_may_be_a_template_resolved_when_the_loop_runs(
    control_flow: ControlFlow,
) -> None:
    """actor: "{{ inputs.actor }}" picks the workflow from the run's inputs."""
    flow = task(
        "limits: {maxInfraRetries: 0}",
        inputs='{actor: {type: string, default: "missing.yaml"}}',
        actor='"{{ inputs.actor }}"',
    )
    other = """
    name: other
    inputs: {iteration: {type: integer}}
    steps: [{id: act, handler: "HANDLERS:other"}]
    output: steps.act.result
    """
    handlers = FINE + "def other(ctx):\n    return {'text': 'from other'}\n"
    path = control_flow(flow, handlers=handlers, children={"other.yaml": other})
    assert validate_file(path) == []
    chosen = await run_flow(path, inputs={"actor": "other.yaml"})
    assert chosen.steps["task"].result["result"] == {"text": "from other"}
    missing = await run_flow(path)
    control = missing.steps["task"].result
    assert control["status"] == "stopped_infra_failure"
    assert "cannot load workflow 'missing.yaml'" in control["decisionLog"][0]["reason"]


async def test_a_stopped_loop_fails_its_step_unless_on_error_continue(
    control_flow: ControlFlow,
) -> None:
    """stopped_no_progress fails the step; onError: continue lets the next step run."""
    flow = task("limits: {maxIterations: 9, noProgressAfter: 2}", step="onError: continue") + (
        '  - {id: after, dependsOn: [task], handler: "HANDLERS:after"}\n'
    )
    handlers = """
    def act(ctx):
        return {"text": "same"}
    def judge(ctx):
        return {"passed": False, "score": 0.2, "feedback": "meh"}
    def after(ctx):
        return "ran after " + ctx.steps["task"].result["status"]
    """
    result = await run_flow(control_flow(flow, handlers=handlers))
    assert result.status == "completed", result.error
    assert result.steps["task"].status == "failed"
    assert result.steps["after"].content == "ran after stopped_no_progress"
    control = result.steps["task"].result
    assert control["iterations"] == 3
    assert control["score"] == 0.2
    assert control["result"] == {"text": "same"}


ESCALATE = """
name: control
steps:
  - id: task
    control:
      objective: "Write a tagline"
      criteria: "mentions speed"
      actor: actor.yaml
      evaluator: evaluator.yaml
      escalate: human
      limits: {maxRetries: 0, maxIterations: 4}
"""

HEEDS = """
def act(ctx):
    fast = "fast" in ctx.inputs["feedback"]
    return {"text": "fast draft" if fast else "draft %d" % ctx.inputs["iteration"],
            "heard": ctx.inputs["feedback"]}

def judge(ctx):
    text = ctx.inputs["result"]["text"]
    return {"passed": "fast" in text, "score": 0.4, "feedback": "Not yet"}
"""


async def test_escalate_human_waits_for_a_person_and_heeds_their_retry(
    control_flow: ControlFlow, tmp_path: Path
) -> None:
    """The run waits at task.0.human; a checked answer is recorded; resume goes on with it."""
    flow = control_flow(ESCALATE, handlers=HEEDS)
    async with run_on(tmp_path / "runs.db", flow) as (runtime, paused):
        assert paused.status == "waiting"
        assert paused.output is None
        assert paused.steps["task"].status == "waiting"
        iteration = paused.steps["task.0"]
        assert iteration.status == "completed"
        assert iteration.content == (
            "escalate: the evaluator did not pass it (score 0.4); "
            "retries and replans are spent; escalate: human asks a person"
        )
        questions = await runtime.pending_inputs("r")
        assert list(questions) == ["task.0.human"]
        prompt = questions["task.0.human"]["prompt"]
        assert prompt.startswith("The control loop 'task' escalated iteration 0: ")
        assert 'Result: {"text":"draft 0","heard":""}' in prompt
        assert questions["task.0.human"]["schema"]["required"] == ["decision"]
        assert paused.loops["task"].termination_reason == "waiting"

        with pytest.raises(SignalRejected, match="decision: 'later' is not one of"):
            await runtime.signal("r", "task.0.human", {"decision": "later"})
        await runtime.signal("r", "task.0.human", {"decision": "retry", "feedback": "Say fast"})
        result = await (await runtime.resume("r")).result()
    assert result.status == "completed", result.error
    control = result.steps["task"].result
    assert control["status"] == "succeeded"
    assert control["result"]["text"] == "fast draft"
    assert control["iterations"] == 2
    assert [(e["iteration"], e["decision"]) for e in control["decisionLog"]] == [
        (0, "escalate"),
        (0, "retry"),
        (1, "accept"),
    ]
    answer = control["decisionLog"][1]
    assert answer["reason"] == "a person asked for another attempt at task.0.human: Say fast"
    assert answer["feedback"] == "Say fast\nNot yet"
    assert result.steps["task.1.actor"].result["heard"] == "Say fast\nNot yet"
    assert result.steps["task.0.human"].result == {"decision": "retry", "feedback": "Say fast"}


@pytest.mark.parametrize(
    ("answer", "status", "run_status", "text"),
    [
        ({"decision": "accept"}, "succeeded", "completed", "draft 0"),
        ({"decision": "stop", "feedback": "drop it"}, "escalated", "failed", "draft 0"),
    ],
    ids=["accept", "stop"],
)
async def test_a_person_can_accept_the_result_or_stop_the_loop(
    control_flow: ControlFlow,
    tmp_path: Path,
    answer: dict[str, str],
    status: str,
    run_status: str,
    text: str,
) -> None:
    """accept takes the escalated iteration's result; stop ends the loop escalated."""
    flow = control_flow(ESCALATE, handlers=HEEDS)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        assert (await runtime.run(flow, run_id="r")).status == "waiting"
        await runtime.signal("r", "task.0.human", answer)
        result = await (await runtime.resume("r")).result()
    assert result.status == run_status
    control = result.steps["task"].result
    assert control["status"] == status
    assert control["result"]["text"] == text
    assert control["iterations"] == 1
    assert [e["decision"] for e in control["decisionLog"]] == ["escalate", answer["decision"]]
    assert "task.1" not in result.steps
    if status == "escalated":
        assert result.steps["task"].error is not None
        assert result.steps["task"].error.message == (
            "escalated: a person stopped the loop at task.0.human: drop it"
        )


async def test_escalate_stop_ends_escalated_without_asking(control_flow: ControlFlow) -> None:
    """The default, escalate: stop, ends the loop escalated at once; nobody is asked."""
    flow = ESCALATE.replace("escalate: human", "escalate: stop")
    result = await run_flow(control_flow(flow, handlers=HEEDS))
    assert result.status == "failed"
    control = result.steps["task"].result
    assert control["status"] == "escalated"
    assert [e["decision"] for e in control["decisionLog"]] == ["escalate"]
    assert control["decisionLog"][0]["reason"].endswith("retries and replans are spent")
    assert "task.0.human" not in result.steps


async def test_a_person_asked_inside_the_actor_makes_the_loop_wait(
    control_flow: ControlFlow, tmp_path: Path
) -> None:
    """A human: step in the actor's workflow pauses the loop; its answer is the result."""
    asking = """
    name: actor
    inputs: {objective: {}, plan: {}, feedback: {}, iteration: {type: integer}}
    steps:
      - id: ask
        human: {prompt: "Your tagline?", schema: {type: object, required: [text]}}
    output: steps.ask.result
    """
    handlers = """
    def judge(ctx):
        return {"passed": True, "score": 1}
    """
    flow = control_flow(ESCALATE, handlers=handlers, children={"actor.yaml": asking})
    async with run_on(tmp_path / "runs.db", flow) as (runtime, paused):
        assert paused.status == "waiting"
        assert paused.steps["task.0"].status == "waiting"
        assert list(await runtime.pending_inputs("r")) == ["task.0.actor.ask"]
        await runtime.signal("r", "task.0.actor.ask", {"text": "fast and calm"})
        result = await (await runtime.resume("r")).result()
    assert result.status == "completed", result.error
    control = result.steps["task"].result
    assert (control["status"], control["result"]) == ("succeeded", {"text": "fast and calm"})
    assert [e["decision"] for e in control["decisionLog"]] == ["accept"]


async def test_a_check_that_cannot_read_the_result_fails_and_says_why(
    control_flow: ControlFlow,
) -> None:
    """A result without the field a check reads fails that check; the error is the feedback."""
    flow = task(
        "checks:",
        '  - {expr: "size(result.text) > 0"}',
        '  - {expr: "result.n > 1"}',
        '  - {expr: "result.n > 2", feedback: "n is {{ result.m }}"}',
        "limits: {maxIterations: 1}",
    )
    handlers = """
    def act(ctx):
        return {"n": 1}
    def judge(ctx):
        return {"passed": True, "score": 1}
    """
    result = await run_flow(control_flow(flow, handlers=handlers))
    control = result.steps["task"].result
    assert control["status"] == "stopped_max_iterations"
    feedback = control["decisionLog"][0]["feedback"].splitlines()
    assert "text" in feedback[0]
    assert feedback[0].startswith("check 'size(result.text) > 0': ")
    assert feedback[1] == "check failed: result.n > 1"
    assert feedback[2].startswith("check failed: result.n > 2 (its feedback could not be rendered")


async def test_an_objective_that_cannot_be_rendered_fails_the_step(
    control_flow: ControlFlow,
) -> None:
    """The objective template is rendered when the step starts; an error fails it, located."""
    flow = task(
        inputs='{topic: {type: string, default: "loops"}}',
        objective="Write about {{ inputs.topic.name }}",
    )
    result = await run_flow(control_flow(flow, handlers=FINE))
    record = result.steps["task"]
    assert record.status == "failed"
    assert record.error is not None
    assert record.error.address == "task"
    assert "inputs.topic.name" in record.error.message
    assert "task.0" not in result.steps
    assert result.loops["task"].termination_reason == "failed"


def test_validation_checks_a_templated_reference_but_does_not_load_it(
    control_flow: ControlFlow,
) -> None:
    """A template is resolved when the loop runs; its syntax is checked when it loads."""
    flow = task(actor='"{{ inputs.actor + }}"')
    problems = validate_file(control_flow(flow))
    assert [p.path for p in problems] == ["steps[0].control.actor"]
    assert "invalid template in actor" in problems[0].message


async def test_a_child_workflow_with_a_root_loop_runs_as_an_include_would(
    control_flow: ControlFlow,
) -> None:
    """The evaluator may itself loop; its output is read after its last iteration."""
    looping = """
    name: evaluator
    inputs: {result: {type: object}}
    loop: {maxIterations: 2}
    steps: [{id: judge, handler: "HANDLERS:judge"}]
    output: steps.judge.result
    """
    handlers = (  # FINE, with a judge of its own: a later def wins
        FINE
        + "def judge(ctx):\n    return {'passed': ctx.iteration == 1, 'score': ctx.iteration}\n"
    )
    path = control_flow(REPLAN, handlers=handlers, children={"evaluator.yaml": looping})
    result = await run_flow(path)
    assert result.steps["task"].result["status"] == "succeeded"
    assert result.steps["task.0.evaluator.1.judge"].status == "completed"


HANG = """
import asyncio

started = asyncio.Event()

async def act(ctx):
    started.set()
    await asyncio.Event().wait()

def judge(ctx):
    return {"passed": True, "score": 1}
"""


@asynccontextmanager
async def hanging(path: Path, clock: FakeClock | None = None) -> AsyncIterator[Started]:
    """A run of ``path`` (on ``clock``) whose actor, HANG's, has started and waits forever."""
    async with started(path, clock=clock) as (handle, watch):
        await watch.wait_for("step_start", "task.0.actor.act")
        yield handle, watch


async def test_limits_timeout_stops_a_running_call_on_the_run_clock(
    control_flow: ControlFlow,
) -> None:
    """When limits.timeout passes, the actor is cancelled and the loop is stopped_budget."""
    clock = FakeClock()
    path = control_flow(task("limits: {timeout: 10m}"), handlers=HANG)
    async with hanging(path, clock) as (run, watch):
        await clock.advance(599)
        assert not any(e.type == "decision" for e in watch.events)
        await clock.advance(1)
        result = await run.result()
    control = result.steps["task"].result
    assert control["status"] == "stopped_budget"
    assert (
        "wall-clock timeout: 600s spent, limits.timeout is 10m"
        in (control["decisionLog"][0]["reason"])
    )
    assert result.steps["task.0.actor"].status == "cancelled"


async def test_cancelling_the_run_cancels_the_loop_and_its_running_call(
    control_flow: ControlFlow,
) -> None:
    """A cancelled run ends the control step cancelled, with its actor."""
    path = control_flow(REPLAN, handlers=HANG + "def plan(ctx):\n    return {'plan': 1}\n")
    async with hanging(path) as (run, _):
        run.cancel("enough")
        result = await run.result()
    assert result.status == "cancelled"
    assert result.steps["task"].status == "cancelled"
    assert result.steps["task.0"].status == "cancelled"
    assert result.loops["task"].termination_reason == "cancelled"


async def test_the_steps_own_timeout_fails_it_as_a_timeout(control_flow: ControlFlow) -> None:
    """timeout on the control step bounds the whole loop, as for every container."""
    clock = FakeClock()
    async with hanging(control_flow(task(step="timeout: 30s"), handlers=HANG), clock) as (run, _):
        await clock.advance(30)
        result = await run.result()
    record = result.steps["task"]
    assert record.status == "failed"
    assert record.error is not None
    assert record.error.type == "Timeout"
    assert result.loops["task"].termination_reason == "timeout"


async def test_retries_rerun_the_whole_loop_from_its_first_iteration(
    control_flow: ControlFlow,
) -> None:
    """retries: 1 on a control step that stopped runs it again, at the same addresses."""
    flow = task("limits: {maxIterations: 2}", step="retries: 1")
    handlers = """
    calls = []
    def act(ctx):
        calls.append(ctx.inputs["iteration"])
        return {"calls": list(calls)}
    def judge(ctx):
        return {"passed": len(ctx.inputs["result"]["calls"]) == 3, "score": 0.5}
    """
    result = await run_flow(control_flow(flow, handlers=handlers))
    record = result.steps["task"]
    assert result.status == "completed", result.error
    assert record.attempts == 2
    assert record.result["status"] == "succeeded"
    assert record.result["result"] == {"calls": [0, 1, 0]}
    assert [e["decision"] for e in record.result["decisionLog"]] == ["accept"]
