"""Per-step overhead of the DAG executor: a 1,000-step chain and a 1,000-wide fan-in.

Each step is an async no-op handler, so what is measured is Cadenza itself:
spawning the step actor, the controller's bookkeeping, events, and the store.
Floors measured in the same run: an asyncio future round trip between two tasks
(for the in-memory store) and one raw sqlite3 WAL ``synchronous=FULL`` commit
(for the SQLite store, where every step boundary is durable).
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from pathlib import Path

from _harness import Figure, best_of, now, per_op_us
from cadenza import Runtime, StepContext
from cadenza.workflow import LoadedWorkflow, Options, Step, Workflow

HERE = Path(__file__).resolve().parent


async def noop(context: StepContext) -> None:
    """The step under test: does nothing, asynchronously."""


def _chain(n: int) -> LoadedWorkflow:
    steps = [
        Step(id=f"s{i}", handler="bench_dag:noop", depends_on=[f"s{i - 1}"] if i else [])
        for i in range(n)
    ]
    return _document(Workflow(name="chain", steps=steps))


def _fan_in(n: int) -> LoadedWorkflow:
    steps = [Step(id=f"s{i}", handler="bench_dag:noop") for i in range(n)]
    steps.append(Step(id="join", handler="bench_dag:noop", depends_on=[s.id for s in steps]))
    options = Options(max_concurrency=64)
    return _document(Workflow(name="fan-in", steps=steps, options=options))


def _document(workflow: Workflow) -> LoadedWorkflow:
    # Built directly: the 100-top-level-step cap of zenflow applies to documents.
    return LoadedWorkflow(workflow=workflow, path=None, base_dir=HERE, includes={})


async def _run_seconds(document: LoadedWorkflow, store: str | None) -> float:
    async with Runtime(store=store) as runtime:
        started = now()
        result = await runtime.run(document)
        elapsed = now() - started
    assert result.status == "completed", result.error
    return elapsed


def _measure_run(document: LoadedWorkflow, *, sqlite: bool) -> float:
    def once() -> float:
        with tempfile.TemporaryDirectory() as tmp:
            store = str(Path(tmp) / "runs.db") if sqlite else None
            return asyncio.run(_run_seconds(document, store))

    return best_of(3, once)


async def _future_round_trips(n: int) -> float:
    loop = asyncio.get_running_loop()
    requests: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()

    async def server() -> None:
        while True:
            (await requests.get()).set_result(None)

    task = asyncio.create_task(server())
    started = now()
    for _ in range(n):
        future = loop.create_future()
        requests.put_nowait(future)
        await future
    elapsed = now() - started
    task.cancel()
    return elapsed


def _raw_commit_us(n: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        connection = sqlite3.connect(Path(tmp) / "raw.db", isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT)")
        started = now()
        for i in range(n):
            connection.execute("BEGIN")
            connection.execute("INSERT INTO t VALUES (?, ?)", (str(i), "{}"))
            connection.execute("COMMIT")
        elapsed = now() - started
        connection.close()
    return per_op_us(elapsed, n)


def run(quick: bool) -> list[Figure]:
    """Chain and fan-in per-step overhead, in memory and in SQLite."""
    n = 200 if quick else 1000
    round_trip = per_op_us(best_of(3, lambda: asyncio.run(_future_round_trips(n))), n)
    commit = best_of(3, lambda: _raw_commit_us(n))
    figures = []
    for shape, document in (("chain", _chain(n)), ("fan-in", _fan_in(n))):
        memory = per_op_us(_measure_run(document, sqlite=False), n)
        figures.append(
            Figure(
                group="dag",
                name=f"{n}-step {shape}, in-memory store, per step",
                value=memory,
                unit="us",
                baseline=round_trip,
                baseline_name="asyncio future round trip",
                target="<= 20 us" if shape == "chain" else "",  # issue 20
                ok=memory <= 20 if shape == "chain" else None,
            )
        )
        durable = per_op_us(_measure_run(document, sqlite=True), n)
        figures.append(
            Figure(
                group="dag",
                name=f"{n}-step {shape}, SQLite store, per step",
                value=durable,
                unit="us",
                baseline=commit,
                baseline_name="raw sqlite3 WAL FULL commit",
                target="<= 1.5x raw" if shape == "chain" else "",  # issue 20
                ok=durable <= 1.5 * commit if shape == "chain" else None,
            )
        )
    return figures
