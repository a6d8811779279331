"""Workers shared by a fleet: ``cadenza worker --store`` serves every supervisor on the
store's roll (``cadenza supervise --workers``), following them as they come and go.

Real stores (a SQLite file, a throwaway PostgreSQL), real ZeroMQ on 127.0.0.1,
real ``cadenza`` processes. Every handler step appends a line (run, address,
the worker's pid) to a file of side effects, so a test tells how often each
step ran and where; the store tells which worker's result it recorded.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

import anyio
import pytest

from cadenza import Runtime
from cadenza.protocols import EventType
from cadenza.remote import Dispatcher, FleetWorker, WorkerEvent, generate_keys
from cadenza.remote._fleet import split_credits
from cadenza.store import SupervisorRow
from tests._helpers import CLI, Sink, effects_of, eventually, opened_store, run_statuses
from tests.conftest import WriteFlow

from .conftest import worker_names

pytestmark = pytest.mark.timeout(300)

DEADLINE = 120.0

THREE = """
name: three
steps:
  - id: a
    handler: "HANDLERS:step"
  - id: b
    dependsOn: [a]
    handler: "HANDLERS:step"
  - id: c
    dependsOn: [b]
    handler: "HANDLERS:step"
"""
"""Three handler steps in a chain."""

STEP = """
import os, time

def step(ctx):
    time.sleep({pause})
    with open({effects!r}, "a") as effects:
        effects.write(f"{{ctx.run_id}} {{ctx.address}} {{os.getpid()}}\\n")
    return os.getpid()
"""
"""Each step takes ``pause`` seconds, then logs (run, address, worker pid) to ``effects``."""

ECHO = """
name: echo
steps:
  - id: a
    command: echo a
  - id: b
    dependsOn: [a]
    command: echo b
"""


def spawn(cwd: Path, log: str, *argv: str) -> subprocess.Popen[bytes]:
    """``cadenza ARGV`` in ``cwd``, logging at info into ``cwd/LOG``."""
    environ = {**os.environ, "CADENZA_LOG_LEVEL": "info"}
    with (cwd / log).open("wb") as stderr:  # the child has its own copy of the descriptor
        return subprocess.Popen(
            [*CLI, *argv], cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr, env=environ
        )


def test_credits_are_split_one_each_then_by_what_each_has_to_do() -> None:
    assert split_credits(8, {}) == {}
    assert split_credits(8, {"a": 0, "b": 0}) == {"a": 4, "b": 4}  # nothing to do: evenly
    assert split_credits(8, {"a": 20, "b": 10}) == {"a": 5, "b": 3}  # 1 each, then 6 as 2:1
    assert split_credits(8, {"a": 5, "b": 0, "c": 0}) == {"a": 6, "b": 1, "c": 1}
    assert split_credits(2, {"a": 1, "b": 9, "c": 4}) == {"a": 0, "b": 1, "c": 1}
    for total in range(1, 20):
        shares = split_credits(total, {"a": 3, "b": 7, "c": 0, "d": 11})
        assert sum(shares.values()) == total
        assert all(share >= 1 for share in shares.values()) or total < 4


async def test_a_fleet_worker_follows_supervisors_as_they_come_and_go(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """A supervisor that appears after the worker started is served (its run's steps
    run on the worker); one that shuts down, and one that dies (its row expires), are
    not served any more."""
    spec = tmp_path / "runs.db"
    flow = write_flow(ECHO)
    fleet = FleetWorker(spec, concurrency=2, name="fleet", poll=0.05)
    async with anyio.create_task_group() as group:
        group.start_soon(fleet.run)
        dispatcher = Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)
        events: Sink[WorkerEvent] = Sink()
        dispatcher.subscribe(events)
        async with Runtime(store=spec, workers=dispatcher, capacity=2) as supervisor:
            await events.until(lambda e: "fleet" in worker_names(e, "worker_connected"))
            assert fleet.serving == [dispatcher.endpoint]
            run_id = await supervisor.submit(flow)

            async def completed() -> bool:
                return (await run_statuses(spec))["completed"] == 1

            await eventually("the run to complete", completed)
            async with opened_store(spec) as store:
                records = await store.steps(run_id)
            assert {address: record.worker for address, record in records.items()} == {
                "a": "fleet",
                "b": "fleet",
            }

        async def none_served() -> bool:
            return fleet.serving == []

        await eventually("the worker to let the supervisor go", none_served)

        # A supervisor that dies: its last beat's row expires, and the worker leaves it.
        ghost = Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)
        seen: Sink[WorkerEvent] = Sink()
        ghost.subscribe(seen)
        async with ghost, opened_store(spec) as store:
            row = SupervisorRow("ghost", "host", 1, ghost.advertised)
            await store.beat_supervisor(row, ttl=1.0)
            await seen.until(lambda e: "fleet" in worker_names(e, "worker_connected"))
            await seen.until(lambda e: "fleet" in worker_names(e, "worker_left"))
            assert fleet.serving == []
        fleet.stop()


def _keys_of_every_kind(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The supervisor's keys; a pair it never authorized; the right pair, another server's key."""
    keys, unknown, wrong_server = tmp_path / "keys", tmp_path / "unknown", tmp_path / "wrong"
    generate_keys(keys)
    generate_keys(unknown)
    shutil.copyfile(keys / "server.key", unknown / "server.key")
    generate_keys(wrong_server)
    for name in ("worker.key", "worker.key_secret"):
        shutil.copyfile(keys / name, wrong_server / name)
    return keys, unknown, wrong_server


async def test_fleet_workers_without_the_supervisors_keys_are_refused(
    write_flow: WriteFlow, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """Found through the store, a worker still has to pass CURVE: one without keys, one
    with an unauthorized key and one with a wrong server key are refused and run no
    step; the one with valid keys runs them all."""
    keys, unknown, wrong_server = _keys_of_every_kind(tmp_path)
    spec = tmp_path / "runs.db"
    flow = write_flow(ECHO)
    dispatcher = Dispatcher("tcp://127.0.0.1:*", curve_keys=keys, heartbeat=0.2)
    events: Sink[WorkerEvent] = Sink()
    dispatcher.subscribe(events)
    async with Runtime(store=spec, workers=dispatcher, capacity=2) as supervisor:
        fleet = ("worker", "--store", str(spec))
        processes.append(spawn(tmp_path, "no-keys.log", *fleet, "--name", "no-keys"))
        for name, directory in (("unknown-key", unknown), ("wrong-server", wrong_server)):
            options = ("--name", name, "--curve-keys", str(directory))
            processes.append(spawn(tmp_path, f"{name}.log", *fleet, *options))

        def refusals(items: list[WorkerEvent]) -> set[str]:
            return {e.data["code"] for e in items if e.type == "peer_refused" and e.data}

        await events.until(lambda e: refusals(e) >= {"no-curve", "bad-handshake", "unknown-key"})
        run_id = await supervisor.submit(flow)
        valid = ("--name", "valid", "--curve-keys", str(keys))
        processes.append(spawn(tmp_path, "valid.log", *fleet, *valid))

        async def completed() -> bool:
            return (await run_statuses(spec))["completed"] == 1

        await eventually("the run to complete", completed)
        connected = worker_names(events.items, "worker_connected")
    assert connected == {"valid"}
    async with opened_store(spec) as store:
        assert {record.worker for record in (await store.steps(run_id)).values()} == {"valid"}
    no_keys = (tmp_path / "no-keys.log").read_text()
    assert "worker_refused" in no_keys
    assert "--curve-keys" in no_keys  # it says how to fix it


async def test_two_supervisors_share_two_fleet_workers_and_a_killed_ones_runs_finish_on_them(
    postgres_url: str,
    write_flow: WriteFlow,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """Two ``supervise --workers`` and two ``worker --store`` on one PostgreSQL: every
    step of every submitted run runs on a worker and is recorded once; SIGKILL one
    supervisor mid-way, and the other takes its runs over and finishes them on the
    same workers (a step runs again only where the kill cut it short)."""
    effects = tmp_path / "effects.txt"
    flow = write_flow(THREE, handlers=STEP.format(pause=0.3, effects=str(effects)))
    run_ids = [f"f{n:02}" for n in range(12)]
    supervise = ("supervise", "--store", postgres_url, "--workers", "tcp://127.0.0.1:*")
    options = ("--capacity", "3", "--lease-ttl", "2")
    victim, survivor = (
        spawn(tmp_path, f"supervisor-{n}.log", *supervise, *options) for n in (1, 2)
    )
    processes.extend([victim, survivor])

    async def both_on_roll() -> bool:
        async with opened_store(postgres_url) as store:
            rows = await store.live_supervisors()
        return {row.pid for row in rows} == {victim.pid, survivor.pid}

    await eventually("both supervisors on the roll", both_on_roll)
    for name in ("w1", "w2"):
        argv = ("worker", "--store", postgres_url, "--name", name, "--concurrency", "3")
        processes.append(spawn(tmp_path, f"{name}.log", *argv))
    async with Runtime(store=postgres_url) as submitter:
        for run_id in run_ids:
            await submitter.submit(flow, run_id=run_id)

    async def victim_busy() -> bool:  # it took runs, and their steps are under way
        taken = _taken(tmp_path / "supervisor-1.log")
        done = {run_id for run_id, _, _ in effects_of(effects)}
        return len(taken) >= 2 and bool(taken & done)

    await eventually("the first supervisor to drive runs", victim_busy)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)

    async def all_completed() -> bool:
        return (await run_statuses(postgres_url))["completed"] == len(run_ids)

    await eventually("every run to complete", all_completed)
    ran = Counter((run_id, address) for run_id, address, _ in effects_of(effects))
    assert set(ran) == {(run_id, step) for run_id in run_ids for step in "abc"}
    workers = {int(pid) for _, _, pid in effects_of(effects)}
    assert workers <= {process.pid for process in processes[2:]}  # never in a supervisor
    taken_over = 0
    async with opened_store(postgres_url) as store:
        for run_id in run_ids:
            events = await store.events(run_id)
            kinds = [event.type for event in events]
            assert kinds.count("workflow_start") == 1, (run_id, kinds)
            records = await store.steps(run_id)
            for step in "abc":
                assert records[step].status == "completed", (run_id, step, records[step])
                assert records[step].worker in {"w1", "w2"}, (run_id, step, records[step])
            resumed = kinds.count("run_resumed")
            taken_over += resumed
            again = sum(ran[run_id, step] - 1 for step in "abc")
            assert again <= resumed, (run_id, again, resumed)  # only a step cut short by the kill
            if resumed:  # the new owner's steps went to the workers too
                after = kinds.index("run_resumed")
                later = [e for e in events[after:] if e.type == EventType.STEP_DISPATCHED]
                assert all(e.data and e.data["worker"] in {"w1", "w2"} for e in later)
    assert taken_over >= 1  # the killed supervisor drove runs: the other finished them
    async with opened_store(postgres_url) as store:
        [left] = await store.live_supervisors()
    assert left.pid == survivor.pid  # the dead one's row expired


def _taken(log: Path) -> set[str]:
    """The runs a supervisor's log says it took from the queue."""
    lines = log.read_text().splitlines() if log.exists() else []
    return {
        line.split("run_id=")[1].split()[0].strip("'")
        for line in lines
        if "took a queued run" in line
    }
