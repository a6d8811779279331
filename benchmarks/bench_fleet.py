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

Then the second acceptance's shape: the same fleet runs one forEach of N no-op
handler items (``--items N``: 20,000 by default in ``run.py fleet``, 1,000,000 for
the acceptance), its items from a generator so that the document stays small.
When half the items are completed, the supervisor that owns the run is SIGKILLed
(its peak RSS, ``VmHWM``, read just before); another takes it over. Reported:
wall time and items/s, the owner's and the taker's peak RSS, the store's growth
per item (``pg_database_size``), and the check: every item's record completed
and its ``step_end`` recorded once, and, by a side channel (each execution of the
handler writes its index to a file of its worker process), no item whose record
was completed when the owner died ran again.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
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


PROFILE = "CADENZA_BENCH_PROFILE"
"""A directory: each fleet process runs under cProfile and leaves ``NAME.prof`` there
when it exits (not one that is SIGKILLed)."""


def _spawn(cwd: Path, log: str, *argv: str) -> subprocess.Popen[bytes]:
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd), *sys.path])}
    profile = os.environ.get(PROFILE)
    profiler = []
    if profile:
        profiler = ["-m", "cProfile", "-o", str(Path(profile) / log.replace(".log", ".prof"))]
    with (cwd / log).open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, *profiler, "-m", "cadenza", *argv],
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
    processes: list[subprocess.Popen[bytes]] = []
    connection = await asyncpg.connect(url)
    try:
        await _start(url, work, connection, processes)
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
        _stop(processes)
        await connection.close()
    return {"elapsed": elapsed, "submitted": submitted, **check}


async def _start(
    url: str, work: Path, connection: Any, processes: list[subprocess.Popen[bytes]]
) -> None:
    """The fleet's supervisors, then (once they are all on the roll) its workers."""
    supervise = ("supervise", "--store", url, "--workers", "tcp://127.0.0.1:*")
    options = ("--capacity", str(CAPACITY), "--lease-ttl", "3")
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


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# Every stored event as a row, packs (schema 8: `last_seq`, a JSON array) unpacked.
EVENTS = """(
    SELECT run_id, seq + n - 1 AS seq, e ->> 'type' AS type, e ->> 'stepId' AS step_id, e AS body
    FROM cadenza_events, jsonb_array_elements(body::jsonb) WITH ORDINALITY AS x(e, n)
    WHERE last_seq IS NOT NULL
    UNION ALL
    SELECT run_id, seq, type, body::jsonb ->> 'stepId', body::jsonb FROM cadenza_events
    WHERE last_seq IS NULL
) AS ev"""


# The run's maxConcurrency (default 5) caps the loop's: both are raised.
ITEMS_FLOW = """
name: million
options: {maxConcurrency: 128}
inputs:
  n: {type: integer}
steps:
  - id: fan
    handler: "fleet_items:item"
    loop:
      forEach: {handler: "fleet_items:numbers"}
      maxConcurrency: 128
      outputMode: summary
"""

# The side channel: each execution of an item's handler leaves its index in a file
# of the worker process that ran it, whatever the store says.
ITEMS_STEPS = """
import os
from pathlib import Path

_ran = None

def numbers(ctx):
    return range(ctx.inputs["n"])

async def item(ctx):
    global _ran
    if _ran is None:
        _ran = open(Path(__file__).parent / f"ran-{os.getpid()}.txt", "a", buffering=1)
    _ran.write(f"{ctx.index}\\n")
"""

RUN = "million"
ITEM = "fan[%"


def _peak_mib(pid: int) -> float:
    """The peak RSS (``VmHWM``) of a live process, in MiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise LookupError(pid)


async def _owner(connection: Any) -> int | None:
    """The pid of the process holding the run's lease (unexpired), if any."""
    holder = await connection.fetchval(
        "SELECT holder FROM cadenza_leases WHERE run_id = $1 "
        "AND expires_at > extract(epoch FROM clock_timestamp())",
        RUN,
    )
    return None if holder is None else int(json.loads(holder)["pid"])


async def _foreach_fleet(url: str, items: int, work: Path) -> dict[str, float]:
    """One forEach of ``items`` no-op handler steps on the fleet; its owner SIGKILLed half
    way. Returns its figures; raises if any promise is broken."""
    import asyncpg

    (work / "fleet_items.py").write_text(ITEMS_STEPS)
    (work / "items.yaml").write_text(ITEMS_FLOW)
    sys.path.insert(0, str(work))
    processes: list[subprocess.Popen[bytes]] = []
    connection = await asyncpg.connect(url)
    size = "SELECT pg_database_size(current_database())"
    done_sql = "SELECT count(*) FROM cadenza_steps WHERE run_id = $1 AND status = 'completed'"
    figures: dict[str, float] = {}
    try:
        await _start(url, work, connection, processes)
        before = await connection.fetchval(size)
        started = now()
        async with Runtime(store=url) as submitter:
            document = load_workflow(work / "items.yaml")
            await submitter.submit(document, inputs={"n": items}, run_id=RUN)
        done_at_kill: set[str] | None = None
        owner = taker = None
        while True:
            await asyncio.sleep(0.2)  # a look: the fleet does some 4,000 items a second
            status = await connection.fetchval(
                "SELECT status FROM cadenza_runs WHERE run_id = $1", RUN
            )
            if status not in ("queued", "running"):
                break
            holder = await _owner(connection)
            if done_at_kill is None:
                owner = holder or owner
                done = await connection.fetchval(done_sql, RUN)
                if owner is not None and done >= items // 2:
                    figures["owner_peak_mib"] = _peak_mib(owner)
                    os.kill(owner, signal.SIGKILL)
                    figures["killed_at_s"] = now() - started
                    rows = await connection.fetch(
                        "SELECT address FROM cadenza_steps WHERE run_id = $1 "
                        "AND status = 'completed' AND address LIKE $2",
                        RUN,
                        ITEM,
                    )
                    done_at_kill = {row[0] for row in rows}
            elif holder is not None and holder != owner:
                taker = holder
                figures["taker_peak_mib"] = _peak_mib(taker)
        figures["elapsed"] = now() - started
        if status != "completed":
            raise RuntimeError(f"the run ended {status}: see {work}")
        if done_at_kill is None:
            raise RuntimeError(
                f"the {items:,}-item run ended before half its items were done at a look: "
                "its owner was never killed; give more items"
            )
        figures["bytes_per_item"] = (await connection.fetchval(size) - before) / items
        figures["done_at_kill"] = float(len(done_at_kill or ()))
        figures["ran_again"] = float(await _check_items(connection, items, work, done_at_kill))
    finally:
        _stop(processes)
        await connection.close()
    return figures


async def _check_items(
    connection: Any, items: int, work: Path, done_at_kill: set[str] | None
) -> int:
    """Every item's step completed once by record, none completed before the kill ran
    again (by the side channel); returns how many items ran more than once in all."""
    problems = []
    completed = await connection.fetchval(
        "SELECT count(*) FROM cadenza_steps WHERE run_id = $1 AND status = 'completed' "
        "AND address LIKE $2",
        RUN,
        ITEM,
    )
    if completed != items:
        problems.append(f"{completed} item records completed, not {items}")
    ends = await connection.fetchrow(
        f"SELECT count(*) AS ends, count(DISTINCT step_id) AS items FROM {EVENTS} "
        "WHERE run_id = $1 AND type = 'step_end' AND step_id LIKE $2",
        RUN,
        ITEM,
    )
    if (ends["ends"], ends["items"]) != (items, items):
        problems.append(f"{ends['ends']} item step_end events for {ends['items']} items")
    ran = _executions(work)
    if set(ran) != set(range(items)):
        problems.append(f"{items - len(set(ran) & set(range(items)))} items never ran")
    twice = [a for a in done_at_kill or () if ran[int(a[len("fan[") : -1])] != 1]
    if twice:
        problems.append(f"{len(twice)} items completed before the kill ran again: {twice[:5]}")
    if problems:
        raise RuntimeError("; ".join(problems))
    return sum(1 for count in ran.values() if count > 1)


def _executions(work: Path) -> collections.Counter[int]:
    """How many times each item's handler ran, by the workers' files."""
    ran: collections.Counter[int] = collections.Counter()
    for path in work.glob("ran-*.txt"):
        ran.update(int(line) for line in path.read_text().split())
    return ran


def measure_items(items: int) -> list[Figure]:
    """The fleet's forEach of ``items``: items/s, the owner's peak RSS, bytes per item."""
    with started_cluster() as cluster, tempfile.TemporaryDirectory(prefix="fleet-") as work:
        url = asyncio.run(_new_database(cluster, "fleet"))
        got = asyncio.run(_foreach_fleet(url, items, Path(work)))
    per_s = items / got["elapsed"]
    print(
        f"bench_fleet: a {items:,}-item forEach in {got['elapsed']:.1f} s (target <= 600 s "
        f"at 1,000,000), {per_s:,.0f} items/s; its owner SIGKILLed at "
        f"{got['killed_at_s']:.0f} s with {got['done_at_kill']:,.0f} items done, peak RSS "
        f"{got['owner_peak_mib']:.0f} MiB; the taker's peak RSS "
        f"{got.get('taker_peak_mib', float('nan')):.0f} MiB (target <= 512 MiB); store "
        f"growth {got['bytes_per_item']:,.0f} B/item (target <= 1,024); no completed item "
        f"ran again ({got['ran_again']:,.0f} items in flight at the kill ran twice)",
        file=sys.stderr,
    )
    return [
        Figure(GROUP, f"a {items:,}-item forEach, owner SIGKILLed half way", per_s, "ops/s",
               None, "items/s"),
    ]  # fmt: skip


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
        f"SELECT run_id, step_id, count(*) FROM {EVENTS} WHERE type = 'step_end' "
        "GROUP BY run_id, step_id HAVING count(*) <> 1 LIMIT 5"
    )
    if twice:
        problems.append(f"steps whose end is recorded other than once: {list(map(tuple, twice))}")
    bounds = await connection.fetch(
        f"SELECT run_id FROM {EVENTS} GROUP BY run_id HAVING count(*) <> max(seq) "
        "OR min(seq) <> 1 OR count(*) FILTER (WHERE type = 'workflow_start') <> 1 "
        "OR count(*) FILTER (WHERE type = 'workflow_end') <> 1 LIMIT 5"
    )
    if bounds:
        problems.append(f"runs whose record has a gap or two starts or ends: {bounds}")
    off_workers = await _count(
        connection,
        f"SELECT count(*) FROM {EVENTS} WHERE type = 'step_end' "
        "AND (body -> 'data' ->> 'worker') IS NULL",
    )
    if off_workers:
        problems.append(f"{off_workers} steps did not run on a worker")
    if problems:
        raise RuntimeError("; ".join(problems))
    takeovers = await _count(
        connection, f"SELECT count(*) FROM {EVENTS} WHERE type = 'run_resumed'"
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


ITEMS = 20_000
"""The forEach's items in ``run.py fleet``, ``--quick`` too (``run.py fleet --items
1000000``: the acceptance's). Fewer, and the run can end between two looks before
its owner is killed half way (2,000 items did, at 4,000 items a second)."""


def run(quick: bool) -> list[Figure]:
    """The fleet (60 runs with ``quick``, else 300), then its forEach of `ITEMS`;
    skipped without PostgreSQL."""
    reason = unavailable()
    if reason is not None:
        print(f"bench_fleet: skipped: {reason}", file=sys.stderr)
        return []
    return measure(60 if quick else 300) + measure_items(ITEMS)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the fleet benchmark alone")
    parser.add_argument("--runs", type=int, default=300, help="runs submitted (default 300)")
    parser.add_argument(
        "--items", type=int, default=0, help="instead: one forEach of N items (e.g. 20000)"
    )
    arguments = parser.parse_args()
    if arguments.items:
        print(format_table(measure_items(arguments.items)))
    else:
        print(format_table(measure(arguments.runs)))
