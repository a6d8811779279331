"""Resuming runs: finished work is replayed, work in flight runs again, one driver per run."""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from pathlib import Path

import anyio
import pytest

from cadenza import Event, RunNotFound, Runtime
from cadenza.kernel import FakeClock
from cadenza.testing import (
    CrashHarness,
    KillPoint,
    RequestMatch,
    ServerRule,
    compare_results,
)
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import cadenza, run_flow, run_on
from tests.conftest import WriteFlow

from .conftest import PowerCut, event_is

LOGGING = """
import json
from pathlib import Path


def log(context):
    with open(Path(context.workflow_dir) / "calls.log", "a") as calls:
        calls.write(context.address + "\\n")
    return {"at": context.address, "item": context.item}


async def hang_once(context):
    if context.attempt == 1:
        import asyncio
        await asyncio.Event().wait()  # in flight until the process is killed
    return context.idempotency_key
"""

NESTED = """
name: nested
includes:
  child: child.yaml
steps:
  - id: fan
    loop:
      forEach: [1, 2, 3]
      maxConcurrency: 1
      steps:
        - id: a
          handler: "HANDLERS:log"
        - id: b
          dependsOn: [a]
          handler: "HANDLERS:log"
  - id: route
    dependsOn: [fan]
    graph:
      start: first
      states:
        first: {handler: "HANDLERS:log"}
        second: {include: child}
      edges:
        - {from: first, to: second, condition: "result.at == 'route.0.first'"}
        - {from: second, to: END}
  - id: again
    dependsOn: [route]
    loop:
      maxIterations: 3
    handler: "HANDLERS:log"
"""

CHILD = """
name: child
steps:
  - id: inner
    handler: "HANDLERS:log"
"""


def calls(directory: Path) -> Counter[str]:
    return Counter((directory / "calls.log").read_text().split())


async def test_a_finished_run_resumes_to_its_stored_result(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """Resuming a completed run returns its stored result and runs nothing."""
    flow = write_flow(
        "name: done\nsteps:\n  - id: a\n    handler: 'HANDLERS:log'\n", handlers=LOGGING
    )
    async with run_on(tmp_path / "runs.db", flow) as (runtime, first):
        handle = await runtime.resume("r")
        assert handle.done
        assert await handle.result() == first
        assert len(await runtime.stored_events("r")) == 4
    assert calls(tmp_path) == {"a": 1}


async def test_resuming_an_unknown_run_is_refused(tmp_path: Path) -> None:
    """A run id the store does not hold is RunNotFound."""
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        with pytest.raises(RunNotFound, match="nope"):
            await runtime.resume("nope")


async def test_containers_resume_where_the_power_went(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """forEach, graph, include and loop resume to the same result; finished leaves never rerun."""
    write_flow(CHILD, name="child.yaml", handlers=LOGGING)
    flow = write_flow(NESTED, handlers=LOGGING)
    store = PowerCut(tmp_path / "runs.db", event_is("step_end", "route.0.first"))
    uninterrupted = await run_flow(flow, run_id="r", store=store)
    before = calls(tmp_path)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        resumed = await (await runtime.resume("r")).result()
    assert compare_results(uninterrupted, resumed) == []
    assert resumed.graphs["route"].path == ["first", "second"]
    again = calls(tmp_path) - before
    # The power went right after route.0.first was recorded: only what followed runs again.
    assert set(again) == {"route.1.second.inner", "again.0", "again.1", "again.2"}
    assert all(count == 1 for count in again.values())


async def test_a_summary_foreach_resumes_without_running_its_finished_items_again(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """outputMode summary forgets completed items in memory, not in the store: cut
    after item 1, the resumed run replays items 0 and 1 and runs only 2 and 3."""
    flow = write_flow(
        """
        name: many
        steps:
          - id: fan
            loop: {forEach: [0, 1, 2, 3], maxConcurrency: 1, outputMode: summary}
            handler: "HANDLERS:log"
        """,
        handlers=LOGGING,
    )
    store = PowerCut(tmp_path / "runs.db", event_is("step_end", "fan[1]"))
    uninterrupted = await run_flow(flow, run_id="r", store=store)
    before = calls(tmp_path)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        resumed = await (await runtime.resume("r")).result()
    assert compare_results(uninterrupted, resumed) == []
    assert resumed.status == "completed", resumed.error
    # The power went right after fan[1] was recorded: only the items after it run again.
    assert calls(tmp_path) - before == {"fan[2]": 1, "fan[3]": 1}
    assert resumed.steps["fan"].result["counts"] == {"completed": 4}
    assert [a for a in resumed.steps if a.startswith("fan[")] == []


async def test_a_streamed_foreach_resumes_reading_its_file_again_and_skipping_done_items(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """forEach over a JSON-lines file, cut after item 2: the resumed run reads the file
    from the start, replays items 0-2 by index and runs only 3-5."""
    (tmp_path / "items.jsonl").write_text("".join(f'{{"n": {n}}}\n' for n in range(6)))
    flow = write_flow(
        """
        name: streamed
        steps:
          - id: fan
            loop: {forEach: {lines: items.jsonl}, maxConcurrency: 1, outputMode: summary}
            handler: "HANDLERS:log"
        """,
        handlers=LOGGING,
    )
    store = PowerCut(tmp_path / "runs.db", event_is("step_end", "fan[2]"))
    uninterrupted = await run_flow(flow, run_id="r", store=store)
    before = calls(tmp_path)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        resumed = await (await runtime.resume("r")).result()
    assert compare_results(uninterrupted, resumed) == []
    assert resumed.status == "completed", resumed.error
    assert calls(tmp_path) - before == {"fan[3]": 1, "fan[4]": 1, "fan[5]": 1}
    assert resumed.steps["fan"].result["counts"] == {"completed": 6}


def test_a_streamed_foreach_killed_mid_way_resumes_without_running_done_items(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """A real `cadenza run` of a forEach over a generator, SIGKILLed after its fifth
    item was recorded on SQLite: `cadenza resume` finishes it, each item run once."""
    flow = write_flow(
        """
        name: generated
        steps:
          - id: fan
            loop: {forEach: {handler: "HANDLERS:items"}, maxConcurrency: 1, outputMode: summary}
            handler: "HANDLERS:log"
        """,
        handlers=LOGGING + "\n\ndef items(context):\n    yield from range(12)\n",
    )
    with CrashHarness(flow, directory=tmp_path / "runs") as harness:
        outcome = harness.crash(KillPoint.at("step.after_record", 5))
    assert outcome.kills == 1
    assert outcome.result.status == "completed", outcome.result.error
    assert outcome.result.steps["fan"].result["counts"] == {"completed": 12}
    assert calls(tmp_path) == {f"fan[{n}]": 1 for n in range(12)}


async def test_a_resumed_loop_does_not_wait_its_delay_again(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """The delays before iterations that had started are not waited through on resume."""
    flow = write_flow(
        """
        name: slow
        steps:
          - id: tick
            loop: {maxIterations: 3, delay: "1h"}
            handler: "HANDLERS:log"
        """,
        handlers=LOGGING,
    )
    clock = FakeClock()
    ended = [anyio.Event() for _ in range(3)]

    def watch(event: Event) -> None:
        if event.type == "iteration_end" and event.step_id is not None:
            ended[int(event.step_id.rsplit(".", 1)[1])].set()

    store = PowerCut(tmp_path / "runs.db", event_is("iteration_start", "tick.2"))
    async with Runtime(store=store, clock=clock) as runtime:
        handle = await runtime.start(flow, run_id="r", on_event=watch)
        for n in (0, 1):  # the loop sleeps after iterations 0 and 1; let the hour pass
            await ended[n].wait()
            await clock.advance(3600)
        await handle.result()
    # A fresh clock that never moves: any delay waited on resume would hang the run.
    with anyio.fail_after(30):
        async with Runtime(store=tmp_path / "runs.db", clock=FakeClock()) as runtime:
            resumed = await (await runtime.resume("r")).result()
    assert resumed.status == "completed"
    assert resumed.loops["tick"].iterations == 3


def test_a_step_in_flight_runs_again_under_a_new_idempotency_key(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """Killed mid-step, the step runs again as attempt 2; its finished sibling does not."""
    flow = write_flow(
        """
        name: keys
        steps:
          - id: slow
            handler: "HANDLERS:hang_once"
          - id: quick
            handler: "HANDLERS:log"
        """,
        handlers=LOGGING,
    )
    with CrashHarness(flow, directory=tmp_path / "runs") as harness:
        # quick's record is the first made durable; slow's start went with it.
        outcome = harness.crash(KillPoint.at("step.after_record", 1))
    assert outcome.kills == 1
    assert outcome.result.status == "completed"
    assert outcome.result.steps["slow"].content == f"{outcome.run_id}:slow:2"
    assert outcome.result.steps["slow"].attempts == 2
    assert calls(tmp_path) == {"quick": 1}


def test_two_processes_cannot_drive_one_run(tmp_path: Path, write_flow: WriteFlow) -> None:
    """While `cadenza run` drives a run, `cadenza resume` of it exits 2 and names the driver."""
    ready, gate = tmp_path / "ready", tmp_path / "gate"
    os.mkfifo(ready)
    os.mkfifo(gate)
    flow = write_flow(
        f"""
        name: held
        steps:
          - id: wait
            command: "echo up > {ready}; cat {gate}"
        """
    )
    holder = threading.Thread(
        target=cadenza,
        args=("run", str(flow), "--run-id", "r", "--store", "runs.db"),
        kwargs={"cwd": tmp_path},
    )
    holder.start()
    try:
        assert ready.read_text() == "up\n"  # blocks until the step is running
        refused = cadenza("resume", "r", "--store", "runs.db", cwd=tmp_path)
        assert refused.returncode == 2, refused.stderr
        assert "being driven by process" in refused.stderr
        assert "Traceback" not in refused.stderr
    finally:
        gate.write_text("go\n")
        holder.join()
    done = cadenza("resume", "r", "--store", "runs.db", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["steps"]["wait"]["content"] == "go\n"


def test_resume_all_continues_every_interrupted_run(tmp_path: Path, write_flow: WriteFlow) -> None:
    """`cadenza resume --all` finishes each killed run and leaves finished ones alone."""
    flow = write_flow(
        """
        name: pair
        steps:
          - {id: a, handler: "HANDLERS:log"}
          - {id: b, dependsOn: [a], handler: "HANDLERS:log"}
        """,
        handlers=LOGGING,
    )
    with CrashHarness(flow, directory=tmp_path / "runs") as harness:
        assert harness.run("one", kill=KillPoint.at("step.after_record", 1)).killed
        assert harness.run("two", kill=KillPoint.at("step.after_record", 1)).killed
        assert harness.run("three").result is not None
    resumed = cadenza("resume", "--all", "--json", "--store", "runs/runs.db", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    results = [json.loads(line) for line in resumed.stdout.splitlines()]
    assert sorted((r["runId"], r["status"]) for r in results) == [
        ("one", "completed"),
        ("two", "completed"),
    ]
    assert calls(tmp_path) == {"a": 3, "b": 3}


def test_a_real_cadenza_process_is_killed_through_its_environment(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """CADENZA_FAILPOINT in a plain `python -m cadenza` kills it; the resume finishes it."""
    flow = write_flow(
        "name: one\nsteps:\n  - id: a\n    handler: 'HANDLERS:log'\n", handlers=LOGGING
    )
    with CrashHarness(flow, directory=tmp_path / "runs", launcher="exec") as harness:
        outcome = harness.crash(KillPoint.at("step.after_record", 1))
    assert outcome.kills == 1
    assert outcome.result.steps["a"].status == "completed"
    assert calls(tmp_path) == {"a": 1}


async def test_an_agent_remembers_its_replayed_visits(
    tmp_path: Path,
    write_flow: WriteFlow,
    model_server: StartLLMServer,
) -> None:
    """With memory: accumulate, the visit after a resume sees the turns of replayed visits."""
    server = model_server(
        [
            ServerRule([f"draft {n}"], match=RequestMatch(last=f"Draft number {n}."))
            for n in range(3)
        ]
    )
    flow = write_flow(
        """
        name: remembering
        agents:
          writer: {model: "openai:gpt-test"}
        steps:
          - id: drafts
            loop: {maxIterations: 3, memory: accumulate, feedback: false}
            agent: writer
            instructions: "Draft number {{ iteration }}."
        """
    )
    store = PowerCut(tmp_path / "runs.db", event_is("iteration_start", "drafts.2"))
    uninterrupted = await run_flow(flow, run_id="r", store=store)
    asked = len(server.requests)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        resumed = await (await runtime.resume("r")).result()
    assert compare_results(uninterrupted, resumed) == []
    again = server.requests[asked:]
    assert len(again) == 1  # only iteration 2 asks the model again
    assert again[0].messages == server.requests[asked - 1].messages
    assert "draft 1" in json.dumps(again[0].messages)
