"""Running DAGs of command and handler steps through the Python API."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import cadenza
from cadenza import Runtime
from tests._helpers import run_flow, started
from tests._processes import running
from tests._workflows import HANG, PROBE
from tests.conftest import RunYaml, WriteFlow


def gone(pid: int, *, within: float = 5.0) -> bool:
    """Waits (bounded) for a killed process to disappear: signal delivery is asynchronous."""
    deadline = time.monotonic() + within
    while running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


async def test_dependents_see_their_dependencies_outputs(run_yaml: RunYaml) -> None:
    """A step's env templates and handler context see the outputs of the steps before it."""
    result = await run_yaml(
        """
        name: chain
        inputs:
          who: {type: string, default: world}
        steps:
          - id: greet
            command: 'printf "hello %s" "$WHO"'
            env: {WHO: "{{ inputs.who }}"}
          - id: shout
            dependsOn: [greet]
            handler: "HANDLERS:shout"
        output: "steps.shout.content"
        """,
        handlers="""
        def shout(ctx):
            return ctx.steps["greet"].content.upper()
        """,
        inputs={"who": "cadenza"},
    )
    assert result.status == "completed", result.error
    assert result.output == "HELLO CADENZA"
    assert result.steps["greet"].result == {"exitCode": 0, "stdout": "hello cadenza", "stderr": ""}
    assert result.steps["shout"].attempts == 1


async def test_a_fast_branch_does_not_wait_for_a_slow_one(run_yaml: RunYaml) -> None:
    """No superstep barrier: b2 runs while a1 is still blocked, because it only needs b1."""
    result = await run_yaml(
        """
        name: branches
        steps:
          - id: a1
            handler: "HANDLERS:slow"
          - id: b1
            handler: "HANDLERS:fast"
          - id: b2
            dependsOn: [b1]
            handler: "HANDLERS:release"
          - id: a2
            dependsOn: [a1]
            handler: "HANDLERS:fast"
        """,
        handlers="""
        import asyncio
        gate = None
        async def slow(ctx):
            global gate
            gate = gate or asyncio.Event()
            await gate.wait()
            return "slow"
        async def fast(ctx):
            return "fast"
        async def release(ctx):
            global gate
            gate = gate or asyncio.Event()
            gate.set()
            return "released"
        """,
    )
    assert result.status == "completed"
    assert [result.steps[s].status for s in ("a1", "b1", "b2", "a2")] == ["completed"] * 4


async def test_a_false_condition_skips_the_step_and_dependents_still_run(
    run_yaml: RunYaml,
) -> None:
    """condition false → skipped; a dependent can read the skipped step's status."""
    result = await run_yaml(
        """
        name: cond
        steps:
          - id: check
            command: "echo no"
          - id: deploy
            dependsOn: [check]
            condition: "steps.check.content.contains('yes')"
            command: "echo deployed"
          - id: report
            dependsOn: [deploy]
            handler: "HANDLERS:report"
        """,
        handlers="""
        def report(ctx):
            return "deploy was " + ctx.steps["deploy"].status
        """,
    )
    assert result.status == "completed"
    assert result.steps["deploy"].status == "skipped"
    assert result.steps["report"].content == "deploy was skipped"


async def test_retries_rerun_a_failing_step_and_count_attempts(run_yaml: RunYaml) -> None:
    """retries: 2 gives three attempts; the third succeeds and attempts says 3."""
    result = await run_yaml(
        """
        name: flaky
        steps:
          - id: flaky
            retries: 2
            handler: "HANDLERS:flaky"
        """,
        handlers="""
        calls = []
        def flaky(ctx):
            calls.append(ctx.attempt)
            if ctx.attempt < 3:
                raise RuntimeError(f"attempt {ctx.attempt} failed")
            return f"ok after {calls}"
        """,
    )
    assert result.status == "completed"
    assert result.steps["flaky"].attempts == 3
    assert result.steps["flaky"].content == "ok after [1, 2, 3]"


FAILING = """
name: failing
options:
  onStepFailure: {strategy}
steps:
  - id: broken
    command: "echo partial; echo boom >&2; exit 3"
  - id: after-broken
    dependsOn: [broken]
    command: "echo never"
  - id: after-after
    dependsOn: [after-broken]
    command: "echo never"
  - id: independent
    command: "echo fine"
"""


async def test_cascade_cancels_every_dependent(write_flow: WriteFlow) -> None:
    """cascade: dependents of a failed step are cancelled, with no error of their own."""
    result = await run_flow(write_flow(FAILING.format(strategy="cascade")))
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.address == "broken"
    assert result.error.message == "exit code 3: boom"
    assert result.steps["broken"].result == {
        "exitCode": 3,
        "stdout": "partial\n",
        "stderr": "boom\n",
    }
    for dependent in ("after-broken", "after-after"):
        assert result.steps[dependent].status == "cancelled"
        assert result.steps[dependent].error is None
    assert result.steps["independent"].status == "completed"


async def test_skip_dependents_skips_the_direct_ones_and_runs_the_rest(
    write_flow: WriteFlow,
) -> None:
    """skip-dependents: direct dependents are skipped; a skipped step counts as finished."""
    result = await run_flow(write_flow(FAILING.format(strategy="skip-dependents")))
    assert result.status == "failed"
    assert result.steps["after-broken"].status == "skipped"
    assert result.steps["after-broken"].error is None
    assert result.steps["after-after"].status == "completed"  # zenflow: skips do not cascade
    assert result.steps["independent"].status == "completed"


async def test_abort_cancels_running_steps_and_starts_nothing_new(run_yaml: RunYaml) -> None:
    """abort: a running step is cancelled and recorded so; dependents never start."""
    result = await run_yaml(
        """
        name: abort
        options: {onStepFailure: abort}
        steps:
          - id: hang
            handler: "HANDLERS:hang"
          - id: broken
            handler: "HANDLERS:broken"
          - id: after
            dependsOn: [broken]
            command: "echo never"
        """,
        handlers=HANG + "async def broken(ctx):\n    raise ValueError('bad value')\n",
    )
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.type == "ValueError"
    assert result.steps["hang"].status == "cancelled"
    assert "after" not in result.steps


async def test_on_error_continue_lets_dependents_run(run_yaml: RunYaml) -> None:
    """onError: continue records the failure but the run and its dependents go on."""
    result = await run_yaml(
        """
        name: tolerant
        steps:
          - id: test
            command: "exit 1"
            onError: continue
          - id: fix
            dependsOn: [test]
            condition: "steps.test.result.exitCode != 0"
            command: "echo fixed"
        """
    )
    assert result.status == "completed"
    assert result.steps["test"].status == "failed"
    assert result.steps["fix"].content == "fixed\n"


async def test_a_step_timeout_fails_the_step(run_yaml: RunYaml) -> None:
    """A step that outlives its timeout fails with a Timeout error naming the limit."""
    result = await run_yaml(
        """
        name: slow
        steps:
          - id: slow
            timeout: 1s
            handler: "HANDLERS:hang"
        """,
        handlers=HANG,
    )
    assert result.steps["slow"].status == "failed"
    assert result.error is not None
    assert (result.error.type, result.error.message) == ("Timeout", "timed out after 1s")


async def test_command_timeout_kills_grandchildren(run_yaml: RunYaml, tmp_path: Path) -> None:
    """The whole process group goes on timeout: a grandchild writing its pid is killed."""
    pid_file = tmp_path / "grandchild.pid"
    result = await run_yaml(
        f"""
        name: grandchild
        steps:
          - id: spawn
            timeout: 1s
            command: 'sh -c "echo \\$\\$ > {pid_file}; exec sleep 300" & wait'
        """
    )
    assert result.steps["spawn"].status == "failed"
    assert gone(int(pid_file.read_text()))


async def test_stdin_reaches_the_command_verbatim(write_flow: WriteFlow) -> None:
    """Hostile text through stdin and env arrives byte for byte and never runs."""
    hostile = "$(touch pwned) `rm -rf /` ; 'quote\" \n second line"
    path = write_flow(
        """
        name: stdin
        inputs:
          text: {type: string}
        steps:
          - id: echo
            command: ["cat"]
            stdin: "{{ inputs.text }}"
          - id: env
            command: 'printf "%s" "$TEXT"'
            env: {TEXT: "{{ inputs.text }}"}
        """
    )
    result = await run_flow(path, inputs={"text": hostile})
    assert result.steps["echo"].content == hostile
    assert result.steps["env"].content == hostile
    assert not (path.parent / "pwned").exists()


async def test_max_concurrency_is_never_exceeded(run_yaml: RunYaml) -> None:
    """A probe handler counts how many run at once: never more than maxConcurrency."""
    ids = [f"s{i}" for i in range(12)]
    steps = "".join(f"  - {{id: {i}, handler: 'HANDLERS:probe'}}\n" for i in ids)
    report = f"  - {{id: report, dependsOn: [{', '.join(ids)}], handler: 'HANDLERS:peak_seen'}}\n"
    result = await run_yaml(
        "name: wide\noptions: {maxConcurrency: 3}\nsteps:\n" + steps + report, handlers=PROBE
    )
    assert result.status == "completed", result.error
    assert result.steps["report"].result == {"peak": 3}


async def test_missing_input_is_an_input_error(write_flow: WriteFlow) -> None:
    """A required input that is not given stops the run before it starts."""
    path = write_flow(
        """
        name: needs
        inputs:
          target: {type: string}
        steps:
          - id: go
            command: "echo go"
        """
    )
    with pytest.raises(cadenza.InputError, match="missing required input"):
        await run_flow(path)


async def test_cancel_records_cancelled_steps_and_leaves_no_task(write_flow: WriteFlow) -> None:
    """RunHandle.cancel stops a running step; the run is cancelled; no task outlives it."""
    path = write_flow(
        """
        name: cancel
        steps:
          - id: hang
            handler: "HANDLERS:hang"
        """,
        handlers=HANG,
    )
    before = set(asyncio.all_tasks())
    handles: list[cadenza.RunHandle] = []

    def cancel_when_started(event: cadenza.Event) -> None:
        if event.type == "step_start":
            handles[0].cancel("enough")

    async with Runtime() as runtime:
        handles.append(await runtime.start(path, on_event=cancel_when_started))
        result = await handles[0].result()
    assert result.status == "cancelled"
    assert result.steps["hang"].status == "cancelled"
    assert set(asyncio.all_tasks()) - before == set()


async def test_events_stream_from_start_to_end(write_flow: WriteFlow) -> None:
    """A subscriber sees workflow_start first, workflow_end last, seq without gaps."""
    path = write_flow(
        """
        name: events
        steps:
          - id: one
            command: "echo 1"
          - id: two
            dependsOn: [one]
            command: "echo 2"
        """
    )
    async with started(path) as (handle, _):
        events = [event async for event in handle.events()]
    types = [event.type for event in events]
    assert types[0] == "workflow_start"
    assert types[-1] == "workflow_end"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [(e.type, e.step_id) for e in events if e.type == "step_end"] == [
        ("step_end", "one"),
        ("step_end", "two"),
    ]


async def test_sqlite_store_keeps_the_result(write_flow: WriteFlow, tmp_path: Path) -> None:
    """A run recorded in SQLite can be read back by a new runtime: result and events."""
    path = write_flow("name: kept\nsteps:\n  - id: a\n    command: 'echo kept'\n")
    store = tmp_path / "runs.db"
    result = await run_flow(path, run_id="r1", store=store)
    async with Runtime(store=store) as runtime:
        row = await runtime.get_run("r1")
        events = await runtime.stored_events("r1")
    assert row.status == "completed"
    assert row.result == result
    assert events[-1].type == "workflow_end"


PARALLEL_THREE = """
name: three-at-once
options: {maxConcurrency: 3}
steps:
  - {id: a, handler: "HANDLERS:step"}
  - {id: b, handler: "HANDLERS:step"}
  - {id: c, handler: "HANDLERS:step"}
"""
COUNTING = """
import asyncio
running = peak = 0

async def step(ctx):
    global running, peak
    running += 1
    peak = max(peak, running)
    await asyncio.sleep(0)  # yield once: every step the limit lets start is in by now
    running -= 1
    return {"peak": peak}
"""


@pytest.mark.parametrize(("runtime_limit", "call_limit", "peak"), [(1, None, 3), (1, 2, 2)])
async def test_the_workflow_concurrency_wins_over_the_runtime_default(
    write_flow: WriteFlow, runtime_limit: int, call_limit: int | None, peak: int
) -> None:
    """Runtime(max_concurrency) applies when a workflow does not say; a per-run value wins."""
    path = write_flow(PARALLEL_THREE, handlers=COUNTING)
    async with Runtime(max_concurrency=runtime_limit) as runtime:
        result = await runtime.run(path, max_concurrency=call_limit)
    assert result.status == "completed"
    assert max(record.result["peak"] for record in result.steps.values()) == peak
