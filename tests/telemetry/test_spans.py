"""OpenTelemetry spans of a run: the tree follows the addresses, statuses and tokens ride along."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from opentelemetry.trace import StatusCode

from cadenza import Event, Runtime
from tests._helpers import EXAMPLES
from tests._workflows import HANG
from tests.conftest import WriteFlow

from .conftest import (
    Traces,
    at,
    attribute,
    exception_messages,
    nanoseconds,
    one,
    parent,
    run_span,
)

FLOW = """
name: traced
agents:
  coder:
    tools: ["HANDLERS:add"]
    script:
      - toolCalls:
          - {name: add, arguments: {a: 2, b: 3}}
          - {name: add, arguments: {a: -1, b: 3}}
      - "The sum is 5."
  analyst:
    script: ["USE_CALC", "FINISHED"]
steps:
  - id: dev-cycle
    loop:
      maxIterations: 2
      steps:
        - id: implement
          agent: coder
          instructions: "Add two and three."
        - id: check
          dependsOn: [implement]
          command: "echo ok"
  - id: fan
    loop:
      forEach: ["a", "b"]
    command: 'echo "$ITEM"'
    env: {ITEM: "{{ item }}"}
  - id: router
    graph:
      start: analyze
      maxSteps: 6
      states:
        analyze: {agent: analyst, instructions: "Decide."}
        calc: {command: "echo 42"}
      edges:
        - {from: analyze, to: calc, condition: "content.contains('USE_CALC')"}
        - {from: analyze, to: END}
        - {from: calc, to: analyze}
  - id: broken
    dependsOn: [dev-cycle, fan, router]
    retries: 1
    command: "echo 'disk full' >&2; exit 3"
"""

TOOLS = '''
def add(a: int, b: int = 0) -> int:
    """Adds two whole numbers."""
    if a < 0:
        raise ValueError("no negatives")
    return a + b
'''


async def test_a_run_is_one_trace_nested_by_address(write_flow: WriteFlow, traces: Traces) -> None:
    """Loop, forEach, graph, agent with tools and a failing step: the whole span tree."""
    path = write_flow(FLOW, handlers=TOOLS)
    events: list[Event] = []
    async with Runtime(telemetry=traces.telemetry) as runtime:
        handle = await runtime.start(path, on_event=events.append)
        result = await handle.result()
    assert result.status == "failed"
    spans = traces.spans()
    assert traces.started == len(spans)  # every span was ended

    run = run_span(spans)
    assert run.name == "run traced"
    assert {s.context.trace_id for s in spans if s.context} == {run.context.trace_id}
    for span in spans:
        assert attribute(span, "cadenza.run_id") == result.run_id
        assert attribute(span, "cadenza.workflow") == "traced"
    # The run failed with the step's error, recorded as an exception.
    assert attribute(run, "cadenza.status") == "failed"
    assert run.status.status_code is StatusCode.ERROR
    assert any("disk full" in m for m in exception_messages(run))

    # Loop: step -> iteration -> body step -> model and tool calls.
    loop = one(spans, "dev-cycle", "step dev-cycle")
    assert parent(spans, loop) is run
    assert attribute(loop, "cadenza.step.kind") == "loop"
    assert attribute(loop, "cadenza.loop.iterations") == 2
    assert attribute(loop, "cadenza.termination_reason") == "maxIterations"
    for n in (0, 1):
        iteration = one(spans, f"dev-cycle.{n}", "iteration dev-cycle")
        assert parent(spans, iteration) is loop
        assert attribute(iteration, "cadenza.iteration") == n
        assert attribute(iteration, "cadenza.status") == "completed"
        for step in ("implement", "check"):
            body = one(spans, f"dev-cycle.{n}.{step}", f"step {step}")
            assert parent(spans, body) is iteration
            assert attribute(body, "cadenza.status") == "completed"
            assert body.status.status_code is StatusCode.UNSET
    implement = one(spans, "dev-cycle.0.implement", "step implement")
    assert attribute(implement, "cadenza.step.kind") == "agent"
    assert attribute(implement, "cadenza.agent") == "coder"
    assert attribute(implement, "cadenza.attempt") == 1
    calls = at(spans, "dev-cycle.0.implement", "chat coder")
    assert [attribute(c, "cadenza.llm.turn") for c in calls] == [1, 2]
    for call in calls:
        assert parent(spans, call) is implement
        assert attribute(call, "gen_ai.operation.name") == "chat"
        assert attribute(call, "gen_ai.provider.name") == "scripted"
        assert isinstance(attribute(call, "gen_ai.usage.input_tokens"), int)
        assert isinstance(attribute(call, "gen_ai.usage.output_tokens"), int)
    tools = at(spans, "dev-cycle.0.implement", "execute_tool add")
    assert [parent(spans, t) for t in tools] == [implement, implement]
    assert [attribute(t, "gen_ai.tool.call.id") for t in tools] == ["call_1_1", "call_1_2"]
    assert [t.status.status_code for t in tools] == [StatusCode.UNSET, StatusCode.ERROR]
    assert exception_messages(tools[1]) == ["no negatives"]
    assert implement.status.status_code is StatusCode.UNSET  # the model heard of it; no failure

    # Token usage: each call's own; the step's and the run's as their events say.
    ends = {e.step_id: e for e in events if e.type == "step_end"}
    step_tokens = ends["dev-cycle.0.implement"].tokens
    assert step_tokens is not None
    assert attribute(implement, "cadenza.tokens.total") == step_tokens.total
    chats = [s for s in spans if s.name.startswith("chat ")]
    spent = sum(
        int(str(attribute(c, "gen_ai.usage.input_tokens")))
        + int(str(attribute(c, "gen_ai.usage.output_tokens")))
        for c in chats
    )
    assert attribute(run, "cadenza.tokens.total") == spent
    assert spent == result.usage.prompt_tokens + result.usage.completion_tokens

    # forEach: step -> item -> the item's step at the same address.
    fan = one(spans, "fan", "step fan")
    assert attribute(fan, "cadenza.step.kind") == "forEach"
    for index in (0, 1):
        item = one(spans, f"fan[{index}]", "item fan")
        assert parent(spans, item) is fan
        assert attribute(item, "cadenza.index") == index
        body = one(spans, f"fan[{index}]", "step fan")
        assert parent(spans, body) is item
        assert attribute(body, "cadenza.step.kind") == "command"

    # Graph: each state visit is a span under the graph; transitions are its events.
    graph = one(spans, "router", "step router")
    assert attribute(graph, "cadenza.graph.path") == ("analyze", "calc", "analyze")
    visits = [
        one(spans, "router.0.analyze", "step analyze"),
        one(spans, "router.1.calc", "step calc"),
        one(spans, "router.2.analyze", "step analyze"),
    ]
    for n, visit in enumerate(visits):
        assert parent(spans, visit) is graph
        assert attribute(visit, "cadenza.graph.visit") == n
    assert attribute(visits[1], "cadenza.graph.state") == "calc"
    transitions = [e for e in graph.events if e.name == "graph_transition"]
    assert [(e.attributes or {}).get("cadenza.graph.to") for e in transitions] == [
        "calc",
        "analyze",
        "END",
    ]
    revisit = at(spans, "router.2.analyze")
    assert sorted(c.name for c in revisit) == ["chat analyst", "step analyze"]

    # A failing step with a retry: one span per attempt, each an error.
    attempts = at(spans, "broken", "step broken")
    assert [attribute(a, "cadenza.attempt") for a in attempts] == [1, 2]
    assert [attribute(a, "cadenza.retried") for a in attempts] == [True, None]
    for attempt in attempts:
        assert parent(spans, attempt) is run
        assert attempt.status.status_code is StatusCode.ERROR
        assert attribute(attempt, "cadenza.status") == "failed"
        (message,) = exception_messages(attempt)
        assert "exit code 3" in message
        assert "disk full" in message
        assert attempt.status.description is not None
        assert "CommandFailed" in attempt.status.description

    # Times are the events' own, and children lie within their parents.
    starts = [e for e in events if e.type == "workflow_start"]
    finish = [e for e in events if e.type == "workflow_end"]
    assert run.start_time == nanoseconds(starts[0].timestamp)
    assert run.end_time == nanoseconds(finish[0].timestamp)
    for span in spans:
        if span is run:
            continue
        above = parent(spans, span)
        times = (above.start_time, span.start_time, span.end_time, above.end_time)
        assert None not in times
        assert list(times) == sorted(times), span.name  # type: ignore[type-var]


async def test_control_loop_iterations_are_spans(traces: Traces) -> None:
    """A control step's iterations hold the actor's and evaluator's workflows."""
    async with Runtime(telemetry=traces.telemetry) as runtime:
        result = await runtime.run(EXAMPLES / "control-tagline.yaml")
    assert result.status == "completed", result.error
    spans = traces.spans()
    control = one(spans, "tagline", "step tagline")
    assert attribute(control, "cadenza.step.kind") == "control"
    assert [(e.attributes or {}).get("cadenza.decision") for e in control.events] == [
        "retry",
        "accept",
    ]
    iterations = [s for s in spans if s.name == "iteration tagline"]
    assert [attribute(s, "cadenza.address") for s in iterations] == ["tagline.0", "tagline.1"]
    for n, iteration in enumerate(iterations):
        assert parent(spans, iteration) is control
        actor = one(spans, f"tagline.{n}.actor", "step actor")
        assert parent(spans, actor) is iteration
        draft = one(spans, f"tagline.{n}.actor.draft", "step draft")
        assert parent(spans, draft) is actor
        (chat,) = at(spans, f"tagline.{n}.actor.draft", "chat copywriter")
        assert parent(spans, chat) is draft


async def test_no_telemetry_no_spans(
    write_flow: WriteFlow, traces: Traces, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off by default: a runtime without telemetry makes no spans at all."""
    monkeypatch.delenv("CADENZA_OTEL", raising=False)
    path = write_flow(FLOW, handlers=TOOLS)
    async with Runtime() as runtime:
        assert runtime.telemetry is None
        result = await runtime.run(path)
    assert result.status == "failed"
    assert traces.spans() == []
    assert traces.started == 0


HUMAN_ROUNDS = """
name: rounds
steps:
  - id: draft
    command: "printf v1"
  - id: rounds
    dependsOn: [draft]
    loop:
      maxIterations: 2
      steps:
        - id: ask
          human: {prompt: "A number?", schema: {type: integer}}
        - id: double
          dependsOn: [ask]
          command: "echo doubled"
"""


async def test_a_resumed_run_traces_what_it_runs(
    write_flow: WriteFlow, traces: Traces, tmp_path: Path
) -> None:
    """The resumed run is a trace of its own: what ran before is not in it, and the
    loop it continues is there again, holding what runs now."""
    path = write_flow(HUMAN_ROUNDS)
    store = tmp_path / "runs.db"
    async with Runtime(store=store, telemetry=traces.telemetry) as runtime:
        waiting = await runtime.run(path, run_id="r1")
    assert waiting.status == "waiting"
    first = traces.spans()
    assert attribute(run_span(first), "cadenza.status") == "waiting"
    assert attribute(one(first, "rounds.0.ask", "step ask"), "cadenza.status") == "waiting"
    traces.clear()

    async with Runtime(store=store, telemetry=traces.telemetry) as runtime:
        await runtime.signal("r1", "rounds.0.ask", 21)
        handle = await runtime.resume("r1")
        again = await handle.result()
    assert again.status == "waiting"  # the second round asks again
    spans = traces.spans()
    assert traces.started == len(spans)
    run = run_span(spans)
    assert attribute(run, "cadenza.resumed") is True
    assert attribute(run, "cadenza.run_id") == "r1"
    assert run.context.trace_id != run_span(first).context.trace_id
    assert at(spans, "draft") == []  # finished before: not run again
    assert at(spans, "rounds.0.ask") == []  # answered: its record is replayed, not run

    loop = one(spans, "rounds", "step rounds")
    assert parent(spans, loop) is run
    assert attribute(loop, "cadenza.resumed") is True
    assert attribute(loop, "cadenza.status") == "waiting"
    resumed = one(spans, "rounds.0", "iteration rounds")
    assert parent(spans, resumed) is loop
    double = one(spans, "rounds.0.double", "step double")
    assert parent(spans, double) is resumed
    assert attribute(double, "cadenza.status") == "completed"
    following = one(spans, "rounds.1", "iteration rounds")
    assert parent(spans, following) is loop
    assert attribute(one(spans, "rounds.1.ask", "step ask"), "cadenza.status") == "waiting"


HANGING = """
name: hang
steps:
  - id: wait
    loop:
      maxIterations: 3
      steps:
        - id: forever
          handler: "HANDLERS:hang"
"""


class _Stop(Exception):
    pass


@pytest.mark.parametrize("how", ["leave", "raise"])
async def test_spans_end_when_the_runtime_stops_mid_run(
    write_flow: WriteFlow, traces: Traces, how: str
) -> None:
    """Leaving the runtime, or an error inside it, with a run in flight: every span ends."""
    path = write_flow(HANGING, handlers=HANG)
    running = asyncio.Event()

    def watch(event: Event) -> None:
        if event.type == "step_start" and event.step_id == "wait.0.forever":
            running.set()

    with pytest.raises(_Stop) if how == "raise" else contextlib.nullcontext():
        async with Runtime(telemetry=traces.telemetry) as runtime:
            handle = await runtime.start(path, on_event=watch)
            await running.wait()
            if how == "raise":
                raise _Stop
    with contextlib.suppress(asyncio.CancelledError):  # the run was torn down with it
        await handle.result()
    spans = traces.spans()
    assert traces.started == len(spans) >= 4
    run = run_span(spans)
    assert attribute(run, "cadenza.status") in ("cancelled", "interrupted")
    step = one(spans, "wait.0.forever", "step forever")
    assert attribute(step, "cadenza.status") in ("cancelled", "interrupted")
    assert parent(spans, parent(spans, step)) is one(spans, "wait", "step wait")


JUDGED = """
name: judged
agents:
  judge:
    resultSchema:
      type: object
      properties: {done: {type: boolean}, reason: {type: string}}
      required: [done]
    script:
      - toolCalls: [{name: submit_result, arguments: {done: false, reason: "again"}}]
      - toolCalls: [{name: submit_result, arguments: {done: true, reason: "good"}}]
steps:
  - id: polish
    loop:
      maxIterations: 3
      untilAgent: judge
    command: "echo draft"
  - id: publish
    dependsOn: [polish]
    condition: "steps.polish.content == 'never'"
    command: "echo published"
"""


async def test_judges_and_skipped_steps(write_flow: WriteFlow, traces: Traces) -> None:
    """A judge runs after its iteration, under the loop; a skipped step is a span too."""
    path = write_flow(JUDGED)
    async with Runtime(telemetry=traces.telemetry) as runtime:
        result = await runtime.run(path)
    assert result.status == "completed", result.error
    spans = traces.spans()
    loop = one(spans, "polish", "step polish")
    assert attribute(loop, "cadenza.termination_reason") == "judge"
    verdicts = [e.attributes or {} for e in loop.events if e.name == "judge_verdict"]
    assert [(v.get("cadenza.iteration"), v.get("cadenza.judge.done")) for v in verdicts] == [
        (0, False),
        (1, True),
    ]
    for n in (0, 1):
        judge = one(spans, f"polish.{n}.untilAgent", "step untilAgent")
        assert parent(spans, judge) is loop
        assert attribute(judge, "cadenza.step.kind") == "judge"
        (chat,) = at(spans, f"polish.{n}.untilAgent", "chat judge")
        assert parent(spans, chat) is judge
    skipped = one(spans, "publish", "step publish")
    assert parent(spans, skipped) is run_span(spans)
    assert attribute(skipped, "cadenza.status") == "skipped"
    assert skipped.start_time == skipped.end_time
    assert skipped.status.status_code is StatusCode.UNSET
