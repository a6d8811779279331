"""The PostgreSQL store: a durable chain step against one raw committed INSERT, and a forEach.

A throwaway PostgreSQL server is started for the run (tests/_postgres.py: Debian's
``postgresql`` package, ``fsync`` on, on 127.0.0.1; skipped, saying why, where it
is not installed). Floors measured in the same run, on the same server, with the
same driver (asyncpg): one single-row INSERT committed on its own (autocommit),
round trip included. Figures: a chain of no-op handler steps on the PostgreSQL
store, per step (target <= 2x the raw commit: a step boundary costs about one
commit), and a 10,000-item forEach of no-op handler steps, wall time (<= 3 s).

Across replicas: one runtime's look for commands sent to the 100 runs it
drives (what it does every ``command_interval``, 0.5 s) against a raw ``SELECT
1`` round trip, and how long a cancel sent through a second runtime takes to
end a run the first one drives (bounded by the interval plus a round trip).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from _harness import Figure, best_of, now, per_op_us
from bench_dag import _chain, _run_seconds
from bench_loops import foreach_document
from cadenza import Event, Runtime
from cadenza.store import make_store
from cadenza.workflow import LoadedWorkflow, Step, Workflow

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests._postgres import Cluster, started_cluster, unavailable  # noqa: E402

GROUP = "postgres"
_databases = iter(range(1 << 30))


async def _new_database(cluster: Cluster) -> str:
    import asyncpg

    name = f"bench_{next(_databases)}"
    connection = await asyncpg.connect(cluster.url())
    try:
        await connection.execute(f"CREATE DATABASE {name}")
    finally:
        await connection.close()
    return cluster.url(name)


async def _raw_commit_us(url: str, n: int) -> float:
    """One single-row INSERT per transaction, committed, round trip included."""
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        await connection.execute("CREATE TABLE IF NOT EXISTS raw (k text PRIMARY KEY, v text)")
        await connection.execute("TRUNCATE raw")
        started = now()
        for i in range(n):
            await connection.execute("INSERT INTO raw VALUES ($1, $2)", str(i), "{}")
        elapsed = now() - started
    finally:
        await connection.close()
    return per_op_us(elapsed, n)


async def _look_for_commands_us(url: str, n: int) -> tuple[float, float]:
    """One look for the commands of 100 driven runs, and one raw ``SELECT 1``, per op."""
    import asyncpg

    store = make_store(url)
    await store.open()
    connection = await asyncpg.connect(url)
    try:
        driven = [f"run-{i}" for i in range(100)]
        started = now()
        for _ in range(n):
            await store.take_commands(driven)
        look = per_op_us(now() - started, n)
        started = now()
        for _ in range(n):
            await connection.fetchval("SELECT 1")
        raw = per_op_us(now() - started, n)
    finally:
        await connection.close()
        await store.close()
    return look, raw


async def _cancel_across_replicas_s(url: str, runs: int) -> float:
    """Mean seconds from `Runtime.cancel` on one replica to the run's end on another."""
    parked = LoadedWorkflow(
        workflow=Workflow(name="parked", steps=[Step(id="park", command="sleep 600")]),
        path=None,
        base_dir=Path.cwd(),
        includes={},
    )
    total = 0.0
    async with Runtime(store=url) as owner, Runtime(store=url) as other:
        for n in range(runs):
            running = asyncio.Event()

            def on_event(event: Event, running: asyncio.Event = running) -> None:
                if event.type == "step_start":
                    running.set()

            handle = await owner.start(parked, run_id=f"cancel-{n}", on_event=on_event)
            await running.wait()
            started = now()
            await other.cancel(handle.run_id, "benchmark")
            result = await handle.result()
            total += now() - started
            assert result.status == "cancelled", result.status
    return total / runs


def _on_a_fresh_database(cluster: Cluster, document: LoadedWorkflow) -> float:
    url = asyncio.run(_new_database(cluster))
    return asyncio.run(_run_seconds(document, url))


def run(quick: bool) -> list[Figure]:
    """The chain per step against the raw commit, and the forEach's wall time."""
    reason = unavailable()
    if reason is not None:
        print(f"bench_postgres: skipped: {reason}", file=sys.stderr)
        return []
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        print("bench_postgres: skipped: the postgres extra is not installed", file=sys.stderr)
        return []
    n = 200 if quick else 1000
    items = 2000 if quick else 10_000
    with started_cluster() as cluster:
        raw_url = asyncio.run(_new_database(cluster))
        commit = best_of(3, lambda: asyncio.run(_raw_commit_us(raw_url, n)))
        chain = _chain(n)
        step = per_op_us(best_of(3, lambda: _on_a_fresh_database(cluster, chain)), n)
        fan = foreach_document(items)
        wall = best_of(1 if quick else 3, lambda: _on_a_fresh_database(cluster, fan))
        look, select = asyncio.run(_look_for_commands_us(raw_url, 200 if quick else 2000))
        cancel = asyncio.run(_cancel_across_replicas_s(raw_url, 3 if quick else 10))
    return [
        Figure(
            group=GROUP,
            name=f"{n}-step chain, PostgreSQL store, per step",
            value=step,
            unit="us",
            baseline=commit,
            baseline_name="raw asyncpg committed INSERT",
            target="<= 2x raw",
            ok=step <= 2 * commit,
        ),
        Figure(
            group=GROUP,
            name=f"{items}-item forEach, PostgreSQL store, wall time",
            value=wall,
            unit="s",
            baseline=commit * items / 1e6,
            baseline_name=f"{items} raw committed INSERTs, one by one",
            target="<= 3 s" if not quick else "",
            ok=wall <= 3 if not quick else None,
        ),
        Figure(
            group=GROUP,
            name="a look for commands sent to 100 driven runs (every 0.5 s)",
            value=look,
            unit="us",
            baseline=select,
            baseline_name="raw asyncpg SELECT 1 round trip",
        ),
        Figure(
            group=GROUP,
            name="a cancel through another replica, until the run ended (mean)",
            value=cancel,
            unit="s",
            target="<= 0.5 s + a round trip",
            ok=cancel <= 0.6,
        ),
    ]
