"""``options.supervisor``: a failed step runs again, with its siblings by OTP's strategies.

Real runs: handler and command steps that fail the first time, each start of a
step counted in a file beside the workflow, so what ran how often is what the
steps themselves saw. Steps that must be running when a sibling fails wait for
an ``asyncio.Event`` that the failing step sets first (no timing involved).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cadenza import build as b
from cadenza.protocols import Event
from cadenza.workflow import Supervision, WorkflowError, load_workflow
from tests._helpers import run_flow, run_with_events
from tests._workflows import flaky
from tests.conftest import WriteFlow

# Every handler appends its step id to starts.txt when it starts, so a test reads
# how many times each step ran. `running` holds one event per step: set once it runs.
HANDLERS = """
import asyncio
from collections import defaultdict
from pathlib import Path

STARTS = Path(__file__).with_name("starts.txt")
running = defaultdict(asyncio.Event)
release = asyncio.Event()

def _start(name):
    with STARTS.open("a") as out:
        out.write(name + "\\n")
    return STARTS.read_text().split().count(name)

async def hang_first(ctx):
    # Runs until stopped the first time; returns at once after a restart.
    n = _start(ctx.address)
    running[ctx.address].set()
    if n == 1:
        await asyncio.Event().wait()
    return f"{ctx.address} run {n}"

async def fail_first_when_running(ctx):
    # Fails its first run, once the steps named in its input are running.
    n = _start(ctx.address)
    for name in ctx.inputs.get("wait_for", []):
        await running[name].wait()
    if n == 1:
        raise RuntimeError("first run fails")
    release.set()
    return f"{ctx.address} run {n}"

async def wait_release(ctx):
    n = _start(ctx.address)
    running[ctx.address].set()
    await release.wait()
    return f"{ctx.address} run {n}"

async def always_fail(ctx):
    _start(ctx.address)
    raise RuntimeError("always fails")
"""


def starts(path: Path) -> list[str]:
    file = path.with_name("starts.txt")
    return file.read_text().split() if file.exists() else []


def restarts(events: list[Event]) -> list[tuple[str | None, dict[str, object]]]:
    return [(e.step_id, dict(e.data or {})) for e in events if e.type == "step_restart"]


async def test_one_for_one_runs_the_failed_command_again_and_nothing_else(
    write_flow: WriteFlow,
) -> None:
    path = write_flow(
        f"""
        name: one
        options: {{supervisor: {{strategy: one_for_one}}}}
        steps:
          - {flaky()}
          - id: steady
            handler: "HANDLERS:wait_release"
          - id: after
            dependsOn: [flaky]
            command: echo after
        """,
        handlers=HANDLERS.replace("await release.wait()", "pass"),
    )
    result, events = await run_with_events(path)
    assert result.status == "completed", result.error
    assert result.steps["flaky"].content == "ran 2 times\n"
    assert result.steps["flaky"].attempts == 2  # the restart's attempt counts on
    assert path.with_name("flaky.count").read_text() == "2\n"
    assert starts(path) == ["steady"]
    assert restarts(events) == [
        ("flaky", {"strategy": "one_for_one", "cause": "flaky", "restart": 1, "maxRestarts": 3})
    ]
    assert result.steps["after"].status == "completed"


async def test_one_for_all_stops_and_reruns_the_running_siblings(write_flow: WriteFlow) -> None:
    """`slow` is running when `flaky` fails: it is cancelled and runs again with it;
    `first`, finished before, keeps its record."""
    path = write_flow(
        """
        name: all
        options: {supervisor: {strategy: one_for_all}}
        inputs: {wait_for: {type: array, default: [slow]}}
        steps:
          - id: first
            command: echo finished early
          - id: slow
            handler: "HANDLERS:hang_first"
          - id: flaky
            dependsOn: [first]
            handler: "HANDLERS:fail_first_when_running"
        """,
        handlers=HANDLERS,
    )
    result, events = await run_with_events(path)
    assert result.status == "completed", result.error
    assert result.steps["slow"].content == "slow run 2"
    assert result.steps["flaky"].content == "flaky run 2"
    assert sorted(starts(path)) == ["flaky", "flaky", "slow", "slow"]
    assert sorted(restarts(events), key=str) == [
        ("flaky", {"strategy": "one_for_all", "cause": "flaky", "restart": 1, "maxRestarts": 3}),
        ("slow", {"strategy": "one_for_all", "cause": "flaky", "restart": 1, "maxRestarts": 3}),
    ]
    # The stopped sibling's first run is on record as cancelled by the restart.
    cancelled = [e for e in events if e.type == "error" and e.step_id == "slow"]
    assert len(cancelled) == 1
    assert "restarted with 'flaky' (one_for_all)" in (cancelled[0].error or "")
    assert result.steps["first"].content == "finished early\n"
    assert [e.step_id for e in events if e.type == "step_start"].count("first") == 1


async def test_rest_for_one_reruns_only_the_siblings_started_after(write_flow: WriteFlow) -> None:
    """a, b, c start in that order; b fails: c runs again, a runs on untouched."""
    path = write_flow(
        """
        name: rest
        options: {supervisor: {strategy: rest_for_one, maxRestarts: 1}}
        inputs: {wait_for: {type: array, default: [a, c]}}
        steps:
          - id: a
            handler: "HANDLERS:wait_release"
          - id: b
            handler: "HANDLERS:fail_first_when_running"
          - id: c
            handler: "HANDLERS:hang_first"
        """,
        handlers=HANDLERS,
    )
    result, events = await run_with_events(path)
    assert result.status == "completed", result.error
    assert sorted(starts(path)) == ["a", "b", "b", "c", "c"]
    assert (result.steps["a"].content, result.steps["c"].content) == ("a run 1", "c run 2")
    assert sorted(str(step) for step, _ in restarts(events)) == ["b", "c"]


async def test_past_max_restarts_the_supervisor_gives_up_and_the_run_fails(
    write_flow: WriteFlow,
) -> None:
    """retries re-run the step in place first; then each restart runs it (and its retries)
    again; the third failure is one restart too many: the running sibling is cancelled."""
    path = write_flow(
        """
        name: giveup
        options: {supervisor: {strategy: one_for_one, maxRestarts: 2, within: 1h}}
        steps:
          - id: doomed
            handler: "HANDLERS:always_fail"
            retries: 1
          - id: slow
            handler: "HANDLERS:hang_first"
          - id: never
            dependsOn: [doomed]
            command: echo never
        """,
        handlers=HANDLERS,
    )
    result, events = await run_with_events(path)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.type == "SupervisorEscalation"
    assert "step 'doomed' failed" in result.error.message
    assert "3 restarts within 1h, more than maxRestarts=2" in result.error.message
    assert starts(path).count("doomed") == 6  # (1 + 1 retry) x (1 + 2 restarts)
    assert result.steps["doomed"].attempts == 6
    assert [e.data for e in events if e.type == "step_retry"] == [
        {"attempt": 1, "of": 2},
        {"attempt": 3, "of": 4},
        {"attempt": 5, "of": 6},
    ]
    assert [data["restart"] for _, data in restarts(events)] == [1, 2]
    assert result.steps["slow"].status == "cancelled"
    assert "never" not in result.steps or result.steps["never"].status != "completed"


async def test_a_tolerated_failure_is_not_restarted(write_flow: WriteFlow) -> None:
    path = write_flow(
        """
        name: tolerated
        options: {supervisor: {strategy: one_for_all}}
        steps:
          - id: doomed
            handler: "HANDLERS:always_fail"
            onError: continue
          - id: after
            dependsOn: [doomed]
            command: echo after
        """,
        handlers=HANDLERS,
    )
    result, events = await run_with_events(path)
    assert result.status == "completed", result.error
    assert starts(path) == ["doomed"]
    assert restarts(events) == []


async def test_each_loop_iteration_supervises_its_own_steps(write_flow: WriteFlow) -> None:
    path = write_flow(
        f"""
        name: looped
        options: {{supervisor: {{}}}}
        steps:
          - id: outer
            loop:
              maxIterations: 1
              steps:
                - {flaky()}
        """
    )
    result, events = await run_with_events(path)
    assert result.status == "completed", result.error
    assert result.steps["outer.0.flaky"].content == "ran 2 times\n"
    assert [step for step, _ in restarts(events)] == ["outer.0.flaky"]


async def test_a_container_is_restarted_whole_its_attempts_counted_on(
    write_flow: WriteFlow,
) -> None:
    """A looped step whose iteration fails runs again from iteration 0, as attempt 2."""
    path = write_flow(
        f"""
        name: container
        options: {{supervisor: {{strategy: one_for_one}}}}
        steps:
          - {flaky(loop="{maxIterations: 1}")}
        """
    )
    result, events = await run_with_events(path)
    assert result.status == "completed", result.error
    assert result.steps["flaky"].attempts == 2
    assert result.steps["flaky.0"].content == "ran 2 times\n"
    starts = [e.data for e in events if e.type == "step_start" and e.step_id == "flaky"]
    assert [start["attempt"] for start in starts if start] == [1, 2]


async def test_without_a_supervisor_a_failure_is_final(write_flow: WriteFlow) -> None:
    path = write_flow(f"name: plain\nsteps:\n  - {flaky()}\n")
    result, events = await run_with_events(path)
    assert result.status == "failed"
    assert path.with_name("flaky.count").read_text() == "1\n"
    assert restarts(events) == []


@pytest.mark.parametrize(
    ("options", "where", "words"),
    [
        ("{supervisor: {strategy: one_for_some}}", "options.supervisor.strategy", "rest_for_one"),
        ("{supervisor: {maxRestarts: -1}}", "options.supervisor.maxRestarts", "at least 0"),
        ("{supervisor: {within: 0s}}", "options.supervisor.within", "longer than 0s"),
        ("{supervisor: {within: soon}}", "options.supervisor.within", "is not a duration"),
        (
            "{supervisor: {strategy: one_for_all, intensity: 3}}",
            "options.supervisor.intensity",
            "unknown key",
        ),
        ("{restartStrategy: one_for_all}", "options.restartStrategy", "unknown key"),
    ],
)
def test_the_supervisor_is_checked_when_the_workflow_loads(
    tmp_path: Path, options: str, where: str, words: str
) -> None:
    path = tmp_path / "flow.yaml"
    path.write_text(f"name: x\noptions: {options}\nsteps:\n  - {{id: a, command: echo}}\n")
    with pytest.raises(WorkflowError) as raised:
        load_workflow(path)
    (problem,) = raised.value.problems
    assert problem.line == 2
    assert problem.path.startswith(where), problem
    assert words in problem.message, problem


def test_the_builder_takes_a_strategy_or_a_supervision(tmp_path: Path) -> None:
    written = tmp_path / "flow.yaml"
    written.write_text(
        "name: x\noptions: {supervisor: {strategy: one_for_all}}\n"
        "steps:\n  - {id: a, command: echo}\n"
    )
    from_yaml = load_workflow(written).workflow.options
    built = b.workflow("x", steps=[b.command("a", "echo")], supervisor="one_for_all")
    assert built.workflow.options == from_yaml
    spelled = b.workflow(
        "x",
        steps=[b.command("a", "echo")],
        supervisor=Supervision(strategy="rest_for_one", max_restarts=5, within="1m"),
    )
    assert spelled.workflow.options.supervisor == Supervision("rest_for_one", 5, "1m")
    with pytest.raises(WorkflowError, match="within must be longer than 0s"):
        b.workflow("x", steps=[b.command("a", "echo")], supervisor=Supervision(within="0s"))


async def test_a_restarted_handler_sees_its_attempt_count_on(write_flow: WriteFlow) -> None:
    """The restarted execution has an attempt number of its own (its idempotency key)."""
    path = write_flow(
        """
        name: attempts
        options: {supervisor: {strategy: one_for_one}}
        steps:
          - id: flaky
            handler: "HANDLERS:note_attempt"
            retries: 1
        """,
        handlers=HANDLERS
        + """
def note_attempt(ctx):
    n = _start(ctx.address)
    with STARTS.with_name("attempts.txt").open("a") as out:
        out.write(f"{ctx.attempt}\\n")
    if n < 3:
        raise RuntimeError("not yet")
    return "ok"
""",
    )
    result = await run_flow(path)
    assert result.status == "completed", result.error
    assert path.with_name("attempts.txt").read_text().split() == ["1", "2", "3"]
