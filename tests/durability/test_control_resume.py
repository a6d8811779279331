"""Control loops under SIGKILL, and waiting for a person: the decision log comes back intact.

Real ``cadenza`` processes kill themselves with SIGKILL at failpoints inside a
control loop (a model call in flight, right after the evaluator, right after a
decision was ruled or recorded, inside the store's commit); ``cadenza resume``
in a new process must finish the run to the golden, uninterrupted result:
the same decision log, iteration by iteration, the same ``tokensSpent`` (so
the budget stops where it did), and no model call repeated for a step that had
finished. The planner, actor, delegate and evaluator are agents answered by a
local `ScriptedLLMServer` whose replies depend only on the request, and whose
rules are named after the address that calls them.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cadenza import RunResult, Runtime
from cadenza.protocols import Event
from cadenza.testing import (
    CrashHarness,
    KillPoint,
    RecordedRequest,
    RequestMatch,
    ScriptedLLMServer,
    ServerReply,
    ServerRule,
    ServerToolCall,
    compare_results,
)
from tests._helpers import cadenza, read_run, run_flow

from .conftest import PowerCut

AGENT = """\
name: {name}
inputs: {inputs}
agents:
  {agent}:
    model: "openai:gpt-test"
    prompt: "{prompt}"
    resultSchema: {schema}
steps:
  - id: {step}
    agent: {agent}
    instructions: "{instructions}"
output: steps.{step}.result
"""

DRAFTS = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
ACTING = {
    "objective": {"type": "string"},
    "plan": {"type": "string"},
    "feedback": {"type": "string"},
    "iteration": {"type": "integer"},
}
ACT = (
    "{{ inputs.objective }}: attempt {{ inputs.iteration }} by the %s."
    " Feedback: {{ inputs.feedback }}"
)


def drafter(name: str, agent: str, prompt: str) -> str:
    """An actor child workflow: one agent step ``write`` that drafts, as the ``name``."""
    return AGENT.format(
        name=name,
        inputs=json.dumps(ACTING),
        agent=agent,
        prompt=prompt,
        schema=json.dumps(DRAFTS),
        step="write",
        instructions=ACT % name,
    )


CHILDREN = {
    "planner.yaml": AGENT.format(
        name="planner",
        inputs=json.dumps({k: {} for k in ("objective", "criteria", "feedback", "history")}),
        agent="strategist",
        prompt="You plan.",
        schema=json.dumps({"type": "object", "required": ["plan"]}),
        step="plan",
        instructions="Plan {{ inputs.objective }} after {{ size(inputs.history) }} decisions.",
    ),
    "actor.yaml": drafter("actor", "writer", "You write drafts."),
    "delegate.yaml": drafter("delegate", "specialist", "You write drafts, better."),
    "evaluator.yaml": AGENT.format(
        name="evaluator",
        inputs=json.dumps({"objective": {}, "criteria": {}, "result": {"type": "object"}}),
        agent="critic",
        prompt="You judge drafts.",
        schema=json.dumps({"type": "object", "required": ["passed", "score"]}),
        step="judge",
        instructions="Judge [{{ inputs.result.text }}] for {{ inputs.objective }}.",
    ),
}

# `draft` retries (a check beats the judge), replans, delegates, retries, accepts;
# `budget` then stops on maxTokens 500 before its third evaluator call: 3 x 120 + 2 x 60.
WORKFLOW = """\
name: control-drafts
steps:
  - id: draft
    control:
      objective: "Tagline"
      criteria: "at most 40 characters"
      planner: planner.yaml
      actor: actor.yaml
      delegate: delegate.yaml
      evaluator: evaluator.yaml
      checks:
        - expr: "size(result.text) <= 40"
          feedback: "Too long: {{ size(result.text) }} chars, limit 40"
      limits: {maxIterations: 8, maxRetries: 1, maxReplans: 1, noProgressAfter: 3}
  - id: budget
    dependsOn: [draft]
    onError: continue
    control:
      objective: "Slogan"
      actor: actor.yaml
      evaluator: evaluator.yaml
      limits: {maxIterations: 10, maxTokens: 500, maxRetries: 9, noProgressAfter: 9}
output: "steps.draft.result.result.text"
"""

# The person's loop: escalates after its first attempt, waits, heeds the answer.
ESCALATING = """\
name: control-pitch
steps:
  - id: pitch
    control:
      objective: "Pitch"
      actor: actor.yaml
      evaluator: evaluator.yaml
      escalate: human
      limits: {maxIterations: 4, maxRetries: 0}
output: "steps.pitch.result.result.text"
"""


def _submit(arguments: dict[str, Any]) -> list[ServerToolCall]:
    return [ServerToolCall("submit_result", arguments)]


def _rule(address: str, user: str, arguments: dict[str, Any], usage: tuple[int, int]) -> ServerRule:
    reply = ServerReply(tool_calls=_submit(arguments), usage=usage)
    return ServerRule([reply], match=RequestMatch(user=user), name=address)


def rules() -> list[ServerRule]:
    """One rule per calling address, matched on what only that call's prompt says."""
    found = []

    def act(address: str, user: str, text: str, usage: tuple[int, int] = (40, 20)) -> None:
        found.append(_rule(f"{address}.write", user, {"text": text}, usage))

    def judge(address: str, text: str, verdict: dict[str, Any], usage: tuple[int, int]) -> None:
        found.append(_rule(f"{address}.judge", f"Judge [{text}]", verdict, usage))

    plan = "Plan Tagline after {} decisions."
    found.append(_rule("draft.0.planner.plan", plan.format(0), {"plan": "Be brief"}, (30, 7)))
    found.append(_rule("draft.2.planner.plan", plan.format(2), {"plan": "Stress speed"}, (31, 8)))
    long = "T0 " + "x" * 50
    steps: list[tuple[str, str, dict[str, Any]]] = [
        ("actor", long, {"passed": True, "score": 0.9, "feedback": "Lovely"}),
        ("actor", "T1 slow", {"passed": False, "score": 0.3, "feedback": "Say fast"}),
        ("actor", "T2 quick", {"passed": False, "score": 0.5, "recommend": "delegate"}),
        ("delegate", "T3 swift", {"passed": False, "score": 0.6, "feedback": "Almost"}),
        ("delegate", "T4 fast", {"passed": True, "score": 0.95}),
    ]
    for n, (role, text, verdict) in enumerate(steps):
        act(f"draft.{n}.{role}", f"Tagline: attempt {n} by the {role}.", text, (40 + n, 20))
        judge(f"draft.{n}.evaluator", text, verdict, (25, 5 + n))
    for n in range(4):
        act(f"budget.{n}.actor", f"Slogan: attempt {n} by the actor.", f"S{n}", (100, 20))
        verdict = {"passed": False, "score": 0.1 * (n + 1), "feedback": "More"}
        judge(f"budget.{n}.evaluator", f"S{n}", verdict, (50, 10))
    act("pitch.0.actor", "Pitch: attempt 0 by the actor.", "P0", (11, 3))
    judge("pitch.0.evaluator", "P0", {"passed": False, "score": 0.2, "feedback": "Dull"}, (12, 4))
    act("pitch.1.actor", "Pitch: attempt 1 by the actor. Feedback: Say fast\nDull", "P1 fast")
    judge("pitch.1.evaluator", "P1 fast", {"passed": True, "score": 0.9}, (13, 5))
    return found


def write_flows(directory: Path) -> tuple[Path, Path]:
    """The two workflows and their children; their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in CHILDREN.items():
        (directory / name).write_text(text)
    (directory / "drafts.yaml").write_text(WORKFLOW)
    (directory / "pitch.yaml").write_text(ESCALATING)
    return directory / "drafts.yaml", directory / "pitch.yaml"


def calls_by_step(requests: Iterable[RecordedRequest]) -> Counter[str]:
    """Model calls per address (a request cut off by the kill reached no rule: not a call)."""
    return Counter(request.rule for request in requests if request.rule is not None)


def read_store(path: Path | str, run_id: str) -> tuple[list[Event], set[str]]:
    """The run's stored events and the addresses with a final record."""
    stored = read_run(path, run_id)
    return stored.events, stored.finished


def decisions(events: list[Event], address: str) -> list[dict[str, Any]]:
    """The ``decision`` events of the control step at ``address``, as their data."""
    return [e.data or {} for e in events if e.type == "decision" and e.step_id == address]


def seq_of(events: list[Event], type: str, step_id: str, **data: Any) -> int:
    """The number of the first event of ``type`` at ``step_id`` whose data holds ``data``."""
    for event in events:
        held = event.data or {}
        if (
            event.type == type
            and event.step_id == step_id
            and all(held.get(k) == v for k, v in data.items())
        ):
            return event.seq
    raise AssertionError(f"no {type} event at {step_id} with {data}")


def records_until(events: list[Event], seq: int) -> int:
    """How many records a fresh run has written once event ``seq`` is out (its outcomes)."""
    outcomes = ("step_end", "error", "step_skipped", "step_waiting")
    return sum(1 for event in events if event.seq <= seq and event.type in outcomes)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer(rules()) as server:
        yield server


@pytest.fixture(scope="module")
def flows(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_flows(tmp_path_factory.mktemp("control"))


@pytest.fixture(scope="module")
def harness(flows: tuple[Path, Path], server: ScriptedLLMServer) -> Iterator[CrashHarness]:
    directory = flows[0].parent / "runs"
    with CrashHarness(flows[0], directory=directory, environ=server.environ()) as harness:
        yield harness


@pytest.fixture(scope="module")
def golden(harness: CrashHarness, server: ScriptedLLMServer) -> tuple[RunResult, list[Event]]:
    before = len(server.requests)
    result = harness.golden()
    assert result.status == "completed", result.error
    assert set(calls_by_step(server.requests[before:]).values()) == {1}
    events, _ = read_store(harness.store, "golden")
    return result, events


def test_the_golden_run_does_what_the_workload_promises(
    golden: tuple[RunResult, list[Event]],
) -> None:
    """Retry, replan, delegate, retry, accept; then a budget stop with 480 tokens spent."""
    result, _ = golden
    draft = result.steps["draft"].result
    assert [e["decision"] for e in draft["decisionLog"]] == [
        "retry",
        "replan",
        "delegate",
        "retry",
        "accept",
    ]
    assert draft["status"] == "succeeded"
    assert result.output == "T4 fast"
    # 2 planner calls (37, 39), 5 actor/delegate calls (60..64), 5 evaluator calls (30..34).
    assert draft["tokensSpent"] == 37 + 39 + sum(range(60, 65)) + sum(range(30, 35))
    budget = result.steps["budget"].result
    assert budget["status"] == "stopped_budget"
    assert [e["decision"] for e in budget["decisionLog"]] == ["retry", "retry", "stop"]
    assert budget["tokensSpent"] == 480
    assert "the evaluator is reserved 60" in budget["decisionLog"][-1]["reason"]


def kill_points(events: list[Event]) -> dict[str, KillPoint]:
    """Named moments of the golden run, as failpoints a fresh run reaches at the same moment."""
    request = seq_of(events, "agent_turn", "draft.2.actor.write", phase="request")
    answered = seq_of(events, "agent_turn", "draft.3.delegate.write", phase="response")
    judged = seq_of(events, "step_end", "draft.1.evaluator")
    ruled = seq_of(events, "decision", "draft", iteration=2)
    recorded = seq_of(events, "step_end", "draft.3")
    budget = seq_of(events, "step_end", "budget.1")
    budget_actor = seq_of(events, "step_start", "budget.2.actor.write")
    starts = sum(1 for e in events if e.type == "step_start" and e.seq <= budget_actor)
    return {
        "actor call about to go out": KillPoint.after_events(request),
        "delegate answered, not recorded": KillPoint.after_events(answered),
        "after the evaluator": KillPoint.at("step.after_record", records_until(events, judged)),
        "decision ruled, not recorded": KillPoint.after_events(ruled),
        "decision recorded": KillPoint.at("step.after_record", records_until(events, recorded)),
        "inside a commit": KillPoint.at("store.before_commit", 9),
        "budget loop, after iteration 1": KillPoint.at(
            "step.after_record", records_until(events, budget)
        ),
        "budget loop, its last actor starting": KillPoint.at("step.before_work", starts),
    }


def crash(
    harness: CrashHarness, server: ScriptedLLMServer, run_id: str, chain: list[KillPoint]
) -> tuple[RunResult, int, int, list[list[dict[str, Any]]]]:
    """Runs killed at ``chain[0]``, resumes killed at the rest, then resumes to the end.

    Returns the result, the kills, the calls repeated for steps that had finished,
    and, after each kill, the decisions of ``draft`` and ``budget`` in the store.
    """
    seen = len(server.requests)
    process = harness.run(run_id, kill=chain[0])
    kills = repeated = 0
    logs = []
    for point in [*chain[1:], None]:
        if not process.killed:
            break
        kills += 1
        events, done = read_store(harness.store, run_id)
        logs.append(decisions(events, "draft") + decisions(events, "budget"))
        seen = len(server.requests)
        process = harness.resume(run_id, kill=point)
        calls = calls_by_step(server.requests[seen:])
        repeated += sum(count for step, count in calls.items() if step in done)
    assert process.result is not None, process.stderr
    return process.result, kills, repeated, logs


def test_a_control_loop_killed_anywhere_resumes_with_its_decision_log_intact(
    harness: CrashHarness, server: ScriptedLLMServer, golden: tuple[RunResult, list[Event]]
) -> None:
    """SIGKILL at eight moments of the two loops: each run resumes to the golden result."""
    expected, events = golden
    golden_log = decisions(events, "draft") + decisions(events, "budget")
    for index, (name, point) in enumerate(kill_points(events).items()):
        run_id = f"single-{index}"
        result, kills, repeated, logs = crash(harness, server, run_id, [point])
        assert kills == 1, f"{name}: {point} was never reached"
        assert compare_results(expected, result) == [], name
        assert repeated == 0, name
        # What the store held after the kill was the golden log's beginning...
        assert logs[0] == golden_log[: len(logs[0])], name
        # ... and the finished run states every decision once, numbered without a gap.
        stored, _ = read_store(harness.store, run_id)
        assert decisions(stored, "draft") + decisions(stored, "budget") == golden_log, name
        starts = [e.step_id for e in stored if e.type == "iteration_start"]
        assert starts == [e.step_id for e in events if e.type == "iteration_start"], name
        assert [e.seq for e in stored] == list(range(1, len(stored) + 1)), name


def test_a_loop_killed_again_during_each_resume_still_comes_back(
    harness: CrashHarness, server: ScriptedLLMServer, golden: tuple[RunResult, list[Event]]
) -> None:
    """Chains of kills (each resume killed too) end equal to the golden run, budget included."""
    expected, _ = golden
    chains = [
        [KillPoint.after_events(n) for n in (40, 25, 25, 25, 25)],
        [KillPoint.at("step.after_record", n) for n in (8, 8, 8, 8, 8)],
        [KillPoint.at("step.before_work", n) for n in (30, 9, 9, 9)],
    ]
    for index, chain in enumerate(chains):
        result, kills, repeated, _ = crash(harness, server, f"chain-{index}", chain)
        assert kills == len(chain), f"chain {index} ran out before its last kill"
        assert compare_results(expected, result) == [], chain
        assert repeated == 0, chain
        assert result.steps["budget"].result["tokensSpent"] == 480


async def test_tokens_spent_counts_the_replayed_steps_and_the_budget_holds(
    tmp_path: Path,
    flows: tuple[Path, Path],
    server: ScriptedLLMServer,
    golden: tuple[RunResult, list[Event]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Power lost after the budget loop's iteration 1: the resumed loop counts what it replayed.

    Without the replayed steps' 360 tokens it would think it had spent nothing
    and run on past the budget.
    """
    for name, value in server.environ().items():
        monkeypatch.setenv(name, value)
    expected, _ = golden
    store = PowerCut(
        tmp_path / "runs.db", lambda e: e.type == "step_end" and e.step_id == "budget.1"
    )

    await run_flow(flows[0], run_id="r", store=store)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        result = await (await runtime.resume("r")).result()
    assert store.dead
    budget = result.steps["budget"].result
    assert budget["tokensSpent"] == expected.steps["budget"].result["tokensSpent"] == 480
    assert budget["decisionLog"] == expected.steps["budget"].result["decisionLog"]
    assert (
        result.steps["draft"].result["tokensSpent"] == expected.steps["draft"].result["tokensSpent"]
    )
    assert compare_results(expected, result) == []


def test_an_escalation_waits_for_a_person_through_the_command_line(
    flows: tuple[Path, Path], server: ScriptedLLMServer, tmp_path: Path
) -> None:
    """run exits 3 asking at pitch.0.human; a bad answer exits 2; signal and resume finish it."""
    environ = {**os.environ, **server.environ()}
    pitch = str(flows[1])
    store = ("--store", str(tmp_path / "runs.db"))
    waiting = cadenza("run", pitch, "--run-id", "r", *store, cwd=tmp_path, env=environ)
    assert waiting.returncode == 3, waiting.stderr
    assert "waiting at pitch.0.human: The control loop 'pitch' escalated iteration 0" in (
        waiting.stdout
    )
    assert 'Result: {"text":"P0"}' in waiting.stdout
    assert "cadenza signal r pitch.0.human --data JSON" in waiting.stdout
    assert "waiting at pitch:" not in waiting.stdout  # the loop waits; it asks nothing itself

    bad = cadenza(
        "signal",
        "r",
        "pitch.0.human",
        "--data",
        '{"decision": "maybe"}',
        *store,
        cwd=tmp_path,
        env=environ,
    )
    assert bad.returncode == 2
    assert "decision: 'maybe' is not one of ['accept', 'retry', 'stop']" in bad.stderr
    answer = '{"decision": "retry", "feedback": "Say fast"}'
    good = cadenza(
        "signal", "r", "pitch.0.human", "--data", answer, *store, cwd=tmp_path, env=environ
    )
    assert good.returncode == 0, good.stderr

    resumed = cadenza("resume", "r", "--json", *store, cwd=tmp_path, env=environ)
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert result["status"] == "completed"
    assert result["output"] == "P1 fast"
    log = result["steps"]["pitch"]["result"]["decisionLog"]
    assert [(e["iteration"], e["decision"]) for e in log] == [
        (0, "escalate"),
        (0, "retry"),
        (1, "accept"),
    ]
    assert log[0]["reason"].endswith("retries and replans are spent; escalate: human asks a person")
    assert log[1]["reason"] == "a person asked for another attempt at pitch.0.human: Say fast"
    assert result["steps"]["pitch"]["result"]["tokensSpent"] == (11 + 3) + (12 + 4) + 60 + 18


def test_a_resumed_escalation_killed_again_keeps_the_persons_answer(
    flows: tuple[Path, Path], server: ScriptedLLMServer, tmp_path: Path
) -> None:
    """Killed while it heeds the answer, the loop resumes to the same log and result."""
    answer = '{"decision": "retry", "feedback": "Say fast"}'
    with CrashHarness(flows[1], directory=tmp_path, environ=server.environ()) as harness:
        store = ("--store", str(harness.store))

        def wait_and_answer(run_id: str) -> None:
            assert harness.run(run_id).exit_code == 3
            signal = cadenza(
                "signal", run_id, "pitch.0.human", "--data", answer, *store, cwd=tmp_path
            )
            assert signal.returncode == 0, signal.stderr

        wait_and_answer("golden")
        expected = harness.resume("golden").result
        assert expected is not None
        assert expected.output == "P1 fast"
        golden_log = decisions(read_store(harness.store, "golden")[0], "pitch")
        # Counted in the resumed process: run_resumed, three replays, then the person's ruling.
        points = [
            KillPoint.after_events(5),  # the person's ruling emitted, not yet durable
            KillPoint.after_events(10),  # iteration 1's actor call about to go out
            KillPoint.after_events(11),  # ... and answered, the answer not recorded
            KillPoint.at("step.after_record", 1),  # the actor's outcome recorded
        ]
        for index, point in enumerate(points):
            run_id = f"answered-{index}"
            wait_and_answer(run_id)
            assert harness.resume(run_id, kill=point).killed, point
            _, done = read_store(harness.store, run_id)
            seen = len(server.requests)
            again = harness.resume(run_id)
            assert again.result is not None, again.stderr
            assert compare_results(expected, again.result) == [], point
            stored, _ = read_store(harness.store, run_id)
            assert decisions(stored, "pitch") == golden_log, point
            assert not set(calls_by_step(server.requests[seen:])) & done, point
