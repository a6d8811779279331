"""Queued runs: submitted by one process, started by supervisors that pull them.

Real stores (SQLite files, a throwaway PostgreSQL), real ``cadenza`` processes.
Every step appends a line (run, address, supervisor pid) to a file of side
effects, so a test tells how often each step ran, and where.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path

import anyio
import pytest

from cadenza import Runtime
from tests._helpers import CLI, effects_of, eventually, opened_store, run_statuses
from tests.conftest import StoreFactory, WriteFlow

pytestmark = pytest.mark.timeout(240)

DEADLINE = 120.0

STEPS = """
name: steps
steps:
  - id: a
    command: echo "$CADENZA_RUN_ID a $PPID" >> {effects}
  - id: b
    dependsOn: [a]
    command: echo "$CADENZA_RUN_ID b $PPID" >> {effects}
  - id: c
    dependsOn: [b]
    command: echo "$CADENZA_RUN_ID c $PPID" >> {effects}
"""
"""Three steps in a chain, each logging (run, step, the driving process) to ``effects``."""


async def test_submitted_runs_are_listed_queued_and_a_supervisor_completes_them(
    durable_store_factory: StoreFactory, write_flow: WriteFlow, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    flow = write_flow(STEPS.format(effects=effects))
    spec = str(durable_store_factory.spec)
    async with Runtime(store=spec) as submitter:
        run_ids = [await submitter.submit(flow, run_id=f"q{n}") for n in range(6)]
        listed = await submitter.list_runs()
    assert {row.run_id: row.status for row in listed} == dict.fromkeys(run_ids, "queued")
    assert effects_of(effects) == []  # submitting starts nothing

    async with Runtime(store=spec, capacity=2) as supervisor:

        async def all_completed() -> bool:
            return (await run_statuses(spec))["completed"] == len(run_ids)

        await eventually("every submitted run to complete", all_completed)
        assert supervisor.capacity == 2
    ran = Counter((run_id, step) for run_id, step, _ in effects_of(effects))
    assert ran == {(run_id, step): 1 for run_id in run_ids for step in "abc"}
    async with opened_store(spec) as store:
        for run_id in run_ids:
            kinds = [event.type for event in await store.events(run_id)]
            assert kinds[0] == "workflow_start"
            assert kinds[-1] == "workflow_end"
            assert "run_resumed" not in kinds


async def test_a_supervisor_starts_the_highest_priority_first_then_the_oldest(
    durable_store_factory: StoreFactory, write_flow: WriteFlow, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    flow = write_flow(STEPS.format(effects=effects))
    spec = str(durable_store_factory.spec)
    submitted = [("low", None), ("high", 5), ("middle", 1), ("high-later", 5), ("below", -1)]
    async with Runtime(store=spec) as submitter:
        for run_id, priority in submitted:
            await submitter.submit(flow, run_id=run_id, priority=priority)
    async with Runtime(store=spec, capacity=1) as supervisor:

        async def all_completed() -> bool:
            return (await run_statuses(spec))["completed"] == len(submitted)

        await eventually("every run to complete", all_completed)
        assert supervisor.capacity == 1
    started = [run_id for run_id, step, _ in effects_of(effects) if step == "a"]
    assert started == ["high", "high-later", "middle", "low", "below"]


async def test_a_cancelled_queued_run_never_starts(
    durable_store_factory: StoreFactory, write_flow: WriteFlow, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    flow = write_flow(STEPS.format(effects=effects))
    spec = str(durable_store_factory.spec)
    async with Runtime(store=spec) as submitter:
        await submitter.submit(flow, run_id="dropped")
        await submitter.submit(flow, run_id="kept")
    cancelled = await anyio.run_process([*CLI, "cancel", "dropped", "--store", spec], check=False)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout == b"run dropped is cancelled\n"
    async with Runtime(store=spec, capacity=4):

        async def kept_completed() -> bool:
            return (await run_statuses(spec))["completed"] == 1

        await eventually("the other run to complete", kept_completed)
    assert {run_id for run_id, _, _ in effects_of(effects)} == {"kept"}
    async with opened_store(spec) as store:
        row = await store.get_run("dropped")
        assert row is not None
        assert row.status == "cancelled"
        assert await store.events("dropped") == []


def test_submit_prints_the_id_and_runs_list_shows_it_queued(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    flow = write_flow(STEPS.format(effects=tmp_path / "effects.txt"))
    store = str(tmp_path / "runs.db")
    submitted = subprocess.run(
        [*CLI, "submit", str(flow), "--priority", "7", "--store", store],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    listed = subprocess.run(
        [*CLI, "runs", "list", "--store", store],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    [line] = listed.stdout.splitlines()
    assert line.split()[:2] == [run_id, "queued"]
    resumed = subprocess.run(
        [*CLI, "resume", run_id, "--store", store],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert resumed.returncode == 2
    assert "is queued" in resumed.stderr
    assert "Traceback" not in resumed.stderr


def _supervise(url: str, cwd: Path, n: int, capacity: int) -> subprocess.Popen[bytes]:
    log = (cwd / f"supervisor-{n}.log").open("wb")
    environ = {**os.environ, "CADENZA_LOG_LEVEL": "info"}
    with log:  # the child has its own copy of the descriptor
        return subprocess.Popen(
            [*CLI, "supervise", "--store", url, "--capacity", str(capacity), "--lease-ttl", "2"],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=environ,
        )


async def test_two_supervisors_on_postgres_never_start_one_run_twice(
    postgres_url: str, write_flow: WriteFlow, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    flow = write_flow(STEPS.format(effects=effects))
    run_ids = [f"p{n:02}" for n in range(40)]
    processes = [_supervise(postgres_url, tmp_path, n, capacity=2) for n in range(2)]
    try:
        async with Runtime(store=postgres_url) as submitter:
            for run_id in run_ids:
                await submitter.submit(flow, run_id=run_id)

        async def all_completed() -> bool:
            return (await run_statuses(postgres_url))["completed"] == len(run_ids)

        await eventually("every submitted run to complete", all_completed)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=30)
    lines = effects_of(effects)
    ran = Counter((run_id, step) for run_id, step, _ in lines)
    assert ran == {(run_id, step): 1 for run_id in run_ids for step in "abc"}
    drivers = {run_id: {pid for r, _, pid in lines if r == run_id} for run_id in run_ids}
    assert all(len(pids) == 1 for pids in drivers.values()), drivers
    spans: dict[str, list[tuple[str, int]]] = {}  # by driving process: (time, +1 start/-1 end)
    async with opened_store(postgres_url) as store:
        for run_id in run_ids:
            events = await store.events(run_id)
            kinds = [event.type for event in events]
            assert kinds.count("workflow_start") == 1
            assert "run_resumed" not in kinds
            [pid] = drivers[run_id]
            spans.setdefault(pid, []).extend([(events[0].timestamp, 1), (events[-1].timestamp, -1)])
    # Each supervisor drove at most its capacity at once (an end sorts before a start
    # at the same instant: a supervisor takes the next run once one has ended).
    for marks in spans.values():
        driving = peak = 0
        for _, step in sorted(marks):
            driving += step
            peak = max(peak, driving)
        assert peak <= 2, marks


async def test_a_queued_run_that_cannot_start_fails_and_does_not_block_the_queue(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """Its document is damaged: the supervisor ends it failed, saying why, and goes on."""
    effects = tmp_path / "effects.txt"
    flow = write_flow(STEPS.format(effects=effects))
    spec = str(tmp_path / "runs.db")
    async with Runtime(store=spec) as submitter:
        await submitter.submit(flow, run_id="damaged", priority=9)
        await submitter.submit(flow, run_id="sound")
    with sqlite3.connect(spec) as connection:
        connection.execute("UPDATE documents SET crc = crc + 1 WHERE run_id = 'damaged'")
    connection.close()
    async with Runtime(store=spec, capacity=1):

        async def both_ended() -> bool:
            return (await run_statuses(spec)) == Counter(completed=1, failed=1)

        await eventually("both runs to end", both_ended)
    async with opened_store(spec) as store:
        damaged = await store.get_run("damaged")
    assert damaged is not None
    assert damaged.result is not None
    assert damaged.result.error is not None
    assert damaged.result.error.type == "CorruptRecord"
    assert "cannot start the queued run" in damaged.result.error.message
    assert {run_id for run_id, _, _ in effects_of(effects)} == {"sound"}


SLOW = """
name: slow
steps:
  - id: a
    command: sleep 0.2; echo "$CADENZA_RUN_ID a $PPID" >> {effects}
  - id: b
    dependsOn: [a]
    command: sleep 0.2; echo "$CADENZA_RUN_ID b $PPID" >> {effects}
  - id: c
    dependsOn: [b]
    command: sleep 0.2; echo "$CADENZA_RUN_ID c $PPID" >> {effects}
"""


async def test_a_supervisor_killed_mid_queue_leaves_its_runs_to_the_other(
    postgres_url: str, write_flow: WriteFlow, tmp_path: Path
) -> None:
    """SIGKILL one of two supervisors while it drives queued runs: the other takes its
    started runs over (resumed, not started again) and the queue's rest; every step is
    recorded completed, and no run ever has two starts."""
    effects = tmp_path / "effects.txt"
    flow = write_flow(SLOW.format(effects=effects))
    run_ids = [f"k{n:02}" for n in range(16)]
    victim, survivor = (_supervise(postgres_url, tmp_path, n, capacity=3) for n in range(2))
    try:
        async with Runtime(store=postgres_url) as submitter:
            for run_id in run_ids:
                await submitter.submit(flow, run_id=run_id)

        async def victim_busy() -> bool:
            return sum(pid == str(victim.pid) for _, _, pid in effects_of(effects)) >= 3

        await eventually("the first supervisor to run steps", victim_busy)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)

        async def all_completed() -> bool:
            return (await run_statuses(postgres_url))["completed"] == len(run_ids)

        await eventually("every run to complete", all_completed)
    finally:
        for process in (victim, survivor):
            if process.poll() is None:
                process.terminate()
            process.wait(timeout=30)
    ran = Counter((run_id, step) for run_id, step, _ in effects_of(effects))
    assert set(ran) == {(run_id, step) for run_id in run_ids for step in "abc"}
    taken_over = 0
    async with opened_store(postgres_url) as store:
        for run_id in run_ids:
            kinds = [event.type for event in await store.events(run_id)]
            assert kinds.count("workflow_start") == 1, (run_id, kinds)
            records = await store.steps(run_id)
            assert all(records[step].status == "completed" for step in "abc"), records
            resumed = kinds.count("run_resumed")
            taken_over += resumed
            again = sum(ran[run_id, step] - 1 for step in "abc")
            assert again <= resumed, (run_id, again, resumed)  # only a step cut short by the kill
    assert taken_over >= 1  # the killed supervisor was driving runs: another finished them
