"""A fleet on one machine: 3 supervisors, 8 workers, one PostgreSQL, queued runs.

The shape of issue 30's first acceptance: a throwaway PostgreSQL (tests/_postgres.py),
3 ``cadenza supervise --capacity 50 --workers ...`` and 8 ``cadenza worker --store
...`` processes; N submitted runs of a 3-step workflow of no-op Python handler
steps, all run on the workers. When a third of the runs have completed, one
supervisor and one worker are SIGKILLed. Then the store is checked: every run
completed, every step recorded completed once (one ``step_end``), one
``workflow_start`` and one ``workflow_end`` per run, its events numbered without
a gap or a repeat (a second owner writing at once would need the fence the
first one holds: its writes are refused), and how many runs were taken over.

Figures: runs/s and steps/s from the first submit to the last completion, beside
the floors measured in the same run: a raw asyncpg ``FOR UPDATE SKIP LOCKED``
dequeue loop (one connection, one row per statement) and a raw ZeroMQ
ROUTER/DEALER round trip of a msgspec message (``bench_remote``'s echo peer).
No target: every process shares this machine's cores.

``python benchmarks/run.py fleet`` runs 300 runs (60 with ``--quick``);
``python benchmarks/bench_fleet.py --runs 10000`` the full figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from _harness import Figure, format_table, now
from bench_remote import _Raw
from cadenza import Runtime
from cadenza.workflow import load_workflow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from tests._postgres import Cluster, started_cluster, unavailable  # noqa: E402

GROUP = "fleet"
SUPERVISORS, WORKERS, CAPACITY, CONCURRENCY = 3, 8, 50, 8

FLOW = """
name: three
steps:
  - id: a
    handler: "fleet_steps:step"
  - id: b
    dependsOn: [a]
    handler: "fleet_steps:step"
  - id: c
    dependsOn: [b]
    handler: "fleet_steps:step"
"""

STEPS = """
async def step(ctx):
    return None
"""


async def _new_database(cluster: Cluster, name: str) -> str:
    import asyncpg

    connection = await asyncpg.connect(cluster.url())
    try:
        await connection.execute(f"CREATE DATABASE {name}")
    finally:
        await connection.close()
    return cluster.url(name)


async def _skip_locked_per_s(url: str, n: int) -> float:
    """Rows taken per second by a raw ``FOR UPDATE SKIP LOCKED`` dequeue, one per statement."""
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        await connection.execute(
            "CREATE TABLE q (id bigserial PRIMARY KEY, taken boolean NOT NULL DEFAULT false)"
        )
        await connection.execute("CREATE INDEX q_free ON q (id) WHERE NOT taken")
        await connection.execute(
            "INSERT INTO q (taken) SELECT false FROM generate_series(1, $1)", n
        )
        taken = 0
        started = now()
        while await connection.fetchval(
            "UPDATE q SET taken = true WHERE id = (SELECT id FROM q WHERE NOT taken "
            "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
        ):
            taken += 1
        return taken / (now() - started)
    finally:
        await connection.close()


async def _zmq_round_trips_per_s(rounds: int) -> float:
    """Round trips per second of a msgspec message to ``bench_remote``'s echo process."""
    context = zmq.asyncio.Context()
    router = context.socket(zmq.ROUTER)
    router.bind("tcp://127.0.0.1:*")
    endpoint = router.getsockopt_string(zmq.LAST_ENDPOINT)
    echo = _start_echo(endpoint)
    try:
        peer = (await router.recv_multipart())[0]
        raw = _Raw(router, [peer, peer])
        await raw.latency_us(200)
        return 1e6 / await raw.latency_us(rounds)
    finally:
        echo.kill()
        echo.wait()
        router.close(linger=0)
        context.term()


def _start_echo(endpoint: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, str(HERE / "bench_remote.py"), "echo", endpoint]
    return subprocess.Popen(command, cwd=HERE, stdout=subprocess.DEVNULL)


def _spawn(cwd: Path, log: str, *argv: str) -> subprocess.Popen[bytes]:
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd), *sys.path])}
    with (cwd / log).open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "cadenza", *argv],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=environ,
        )


async def _count(connection: Any, sql: str) -> int:
    return int(await connection.fetchval(sql))


async def _fleet(url: str, runs: int, work: Path) -> dict[str, float]:
    """Runs the fleet; returns its figures and what the store's check found."""
    import asyncpg

    (work / "fleet_steps.py").write_text(STEPS)
    (work / "flow.yaml").write_text(FLOW)
    sys.path.insert(0, str(work))
    supervise = ("supervise", "--store", url, "--workers", "tcp://127.0.0.1:*")
    options = ("--capacity", str(CAPACITY), "--lease-ttl", "3")
    processes: list[subprocess.Popen[bytes]] = []
    connection = await asyncpg.connect(url)
    try:
        async with Runtime(store=url):  # creates the schema before the fleet starts
            pass
        processes.extend(
            _spawn(work, f"supervisor-{n}.log", *supervise, *options) for n in range(SUPERVISORS)
        )
        on_roll = "SELECT count(*) FROM cadenza_supervisors"
        while True:  # the workers find them all at their first look
            if await _count(connection, on_roll) >= SUPERVISORS:
                break
            await asyncio.sleep(0.1)
        serve = ("worker", "--store", url, "--concurrency", str(CONCURRENCY))
        processes.extend(
            _spawn(work, f"worker-{n}.log", *serve, "--name", f"w{n}") for n in range(WORKERS)
        )
        document = load_workflow(work / "flow.yaml")
        started = now()
        async with Runtime(store=url) as submitter:
            for n in range(runs):
                await submitter.submit(document, run_id=f"r{n:06}")
        submitted = now() - started
        killed = False
        done = 0
        while done < runs:
            await asyncio.sleep(0.2)
            done = await _count(
                connection, "SELECT count(*) FROM cadenza_runs WHERE status = 'completed'"
            )
            if not killed and done >= runs // 3:
                processes[0].send_signal(signal.SIGKILL)  # a supervisor
                processes[SUPERVISORS].send_signal(signal.SIGKILL)  # a worker
                killed = True
            failed = await _count(
                connection,
                "SELECT count(*) FROM cadenza_runs WHERE status NOT IN ('completed', 'queued',"
                " 'running')",
            )
            if failed:
                raise RuntimeError(f"{failed} runs ended otherwise than completed: see {work}")
        elapsed = now() - started
        check = await _check(connection, runs)
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        await connection.close()
    return {"elapsed": elapsed, "submitted": submitted, **check}


async def _check(connection: Any, runs: int) -> dict[str, float]:
    """What the store holds of the runs: raises if any promise is broken."""
    problems = []
    completed = await _count(
        connection, "SELECT count(*) FROM cadenza_runs WHERE status = 'completed'"
    )
    if completed != runs:
        problems.append(f"{completed} of {runs} runs completed")
    steps = await connection.fetchval(
        "SELECT count(*) FROM cadenza_steps WHERE status = 'completed' AND address IN ('a','b','c')"
    )
    if steps != 3 * runs:
        problems.append(f"{steps} step records completed, not {3 * runs}")
    twice = await connection.fetch(
        "SELECT run_id, step_id, count(*) FROM cadenza_events WHERE type = 'step_end' "
        "GROUP BY run_id, step_id HAVING count(*) <> 1 LIMIT 5"
    )
    if twice:
        problems.append(f"steps whose end is recorded other than once: {list(map(tuple, twice))}")
    bounds = await connection.fetch(
        "SELECT run_id FROM cadenza_events GROUP BY run_id HAVING count(*) <> max(seq) "
        "OR min(seq) <> 1 OR count(*) FILTER (WHERE type = 'workflow_start') <> 1 "
        "OR count(*) FILTER (WHERE type = 'workflow_end') <> 1 LIMIT 5"
    )
    if bounds:
        problems.append(f"runs whose record has a gap or two starts or ends: {bounds}")
    off_workers = await _count(
        connection,
        "SELECT count(*) FROM cadenza_events WHERE type = 'step_end' "
        "AND (body::json -> 'data' ->> 'worker') IS NULL",
    )
    if off_workers:
        problems.append(f"{off_workers} steps did not run on a worker")
    if problems:
        raise RuntimeError("; ".join(problems))
    takeovers = await _count(
        connection, "SELECT count(*) FROM cadenza_events WHERE type = 'run_resumed'"
    )
    return {"takeovers": float(takeovers)}


def measure(runs: int) -> list[Figure]:
    """The fleet's runs/s and steps/s beside the two floors."""
    with started_cluster() as cluster, tempfile.TemporaryDirectory(prefix="fleet-") as work:
        url = asyncio.run(_new_database(cluster, "fleet"))
        raw_url = asyncio.run(_new_database(cluster, "raw"))
        dequeue = asyncio.run(_skip_locked_per_s(raw_url, max(2000, runs)))
        round_trips = asyncio.run(_zmq_round_trips_per_s(2000))
        found = asyncio.run(_fleet(url, runs, Path(work)))
    per_s = runs / found["elapsed"]
    note = f"{int(found['takeovers'])} runs taken over after the SIGKILLs; store checked"
    print(
        f"bench_fleet: {runs} runs in {found['elapsed']:.1f} s (submitting took "
        f"{found['submitted']:.1f} s); {note}",
        file=sys.stderr,
    )
    return [
        Figure(GROUP, f"{runs} queued 3-step runs, 3 supervisors, 8 workers", per_s, "ops/s",
               dequeue, "raw asyncpg SKIP LOCKED dequeue (rows/s)"),
        Figure(GROUP, "their steps on the workers", 3 * per_s, "ops/s", round_trips,
               "raw ZeroMQ ROUTER/DEALER round trips/s"),
    ]  # fmt: skip


def run(quick: bool) -> list[Figure]:
    """The fleet (60 runs with ``quick``, else 300); skipped without PostgreSQL."""
    reason = unavailable()
    if reason is not None:
        print(f"bench_fleet: skipped: {reason}", file=sys.stderr)
        return []
    return measure(60 if quick else 300)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the fleet benchmark alone")
    parser.add_argument("--runs", type=int, default=300, help="runs submitted (default 300)")
    print(format_table(measure(parser.parse_args().runs)))
