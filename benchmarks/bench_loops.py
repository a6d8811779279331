"""Loop, graph and forEach overhead, each beside its raw asyncio floor.

(a) a 1,000-iteration repeat-until loop and (b) a 1,000-step graph of no-op
async handler steps, per iteration or visit, against an asyncio future round
trip between two tasks; the same on the SQLite store against one raw durable
commit. (c) a 10,000-item forEach of no-op handler steps: wall time against
``asyncio.create_task`` + ``gather`` of 10,000 no-op coroutines, the growth
from 1,000 items, and the RSS it adds (each measured in a fresh process).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _harness import Figure, best_of, now, per_op_us
from bench_dag import _future_round_trips, _raw_commit_us
from cadenza import Runtime, StepContext
from cadenza.workflow import Edge, Graph, LoadedWorkflow, Loop, Options, State, Step, Workflow

GROUP = "loops"
HERE = Path(__file__).resolve().parent
HANDLER = "bench_loops:noop"


async def noop(context: StepContext) -> None:
    """The step under test: does nothing, asynchronously."""


def _document(step: Step, concurrency: int = 0) -> LoadedWorkflow:
    # Built directly, as the DAG benchmark does: no validation pass in the figure.
    workflow = Workflow(name=step.id, steps=[step], options=Options(max_concurrency=concurrency))
    return LoadedWorkflow(workflow=workflow, path=None, base_dir=HERE, includes={})


def loop_document(n: int) -> LoadedWorkflow:
    """A single-step loop of ``n`` iterations (no until: it runs to the cap)."""
    return _document(Step(id="spin", handler=HANDLER, loop=Loop(max_iterations=n)))


def graph_document(n: int) -> LoadedWorkflow:
    """Two states visited in turn, ``n`` visits in all; one edge condition per round."""
    graph = Graph(
        start="a",
        max_steps=n,
        states={"a": State(handler=HANDLER), "b": State(handler=HANDLER)},
        edges=[
            Edge(from_="a", to="END", condition=f"step >= {n + 1}"),
            Edge(from_="a", to="b"),
            Edge(from_="b", to="a"),
        ],
    )
    return _document(Step(id="router", graph=graph))


def foreach_document(n: int) -> LoadedWorkflow:
    """A forEach over ``n`` numbers, 64 iterations alive at once."""
    items = list(range(n))
    step = Step(id="fan", handler=HANDLER, loop=Loop(for_each=items, max_concurrency=64))
    return _document(step, concurrency=64)


async def _run_seconds(document: LoadedWorkflow, store: str | None) -> float:
    async with Runtime(store=store) as runtime:
        started = now()
        result = await runtime.run(document)
        elapsed = now() - started
    assert result.status == "completed", result.error
    return elapsed


def _measure(document: LoadedWorkflow, *, sqlite: bool, repeats: int = 3) -> float:
    def once() -> float:
        with tempfile.TemporaryDirectory() as tmp:
            store = str(Path(tmp) / "runs.db") if sqlite else None
            return asyncio.run(_run_seconds(document, store))

    return best_of(repeats, once)


async def _raw_gather(n: int) -> float:
    async def nothing() -> None:
        return None

    started = now()
    await asyncio.gather(*(asyncio.create_task(nothing()) for _ in range(n)))
    return now() - started


def _status_kib(field: str) -> int:
    """A ``/proc/self/status`` figure (``VmRSS``, ``VmHWM``: this process's own peak) in KiB.

    Not ``ru_maxrss``: after exec it still holds the forking parent's peak.
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


def _growth_in_child(kind: str, n: int) -> float:
    """MiB of peak RSS a fresh process adds while running ``kind`` over ``n`` items."""
    out = subprocess.run(
        [sys.executable, __file__, "--rss", kind, str(n)],
        capture_output=True,
        text=True,
        check=True,
        cwd=HERE,
    ).stdout
    return float(json.loads(out)["mib"])


def _child_main(kind: str, n: int) -> None:
    sys.path.insert(0, str(HERE))
    # Warm up first (lazy imports, caches), so the figure is what the items cost.
    asyncio.run(_raw_gather(10))
    asyncio.run(_run_seconds(foreach_document(10), None))
    before = _status_kib("VmRSS")
    if kind == "raw":
        asyncio.run(_raw_gather(n))
    else:
        asyncio.run(_run_seconds(foreach_document(n), None))
    peak = _status_kib("VmHWM")
    print(json.dumps({"mib": max(peak - before, 0) / 1024}))


def run(quick: bool) -> list[Figure]:
    """Loop, graph and forEach figures, in memory and in SQLite."""
    n = 200 if quick else 1000
    items = 2000 if quick else 10_000
    round_trip = per_op_us(best_of(3, lambda: asyncio.run(_future_round_trips(n))), n)
    commit = best_of(3, lambda: _raw_commit_us(n))
    figures: list[Figure] = []
    for shape, document in (("loop", loop_document(n)), ("graph", graph_document(n))):
        what = "iteration" if shape == "loop" else "step"
        memory = per_op_us(_measure(document, sqlite=False), n)
        figures.append(
            Figure(
                group=GROUP,
                name=f"{n}-{what} {shape}, in-memory store, per {what}",
                value=memory,
                unit="us",
                baseline=round_trip,
                baseline_name="asyncio future round trip",
                target="<= 25 us",
                ok=memory <= 25,
            )
        )
        durable = per_op_us(_measure(document, sqlite=True, repeats=1), n)
        figures.append(
            Figure(
                group=GROUP,
                name=f"{n}-{what} {shape}, SQLite store, per {what}",
                value=durable,
                unit="us",
                baseline=commit,
                baseline_name="raw sqlite3 WAL FULL commit",
                target="<= 2x raw",
                ok=durable <= 2 * commit,
            )
        )
    raw = best_of(3, lambda: asyncio.run(_raw_gather(items)))
    wall = _measure(foreach_document(items), sqlite=False)
    small = _measure(foreach_document(items // 10), sqlite=False)
    figures.append(
        Figure(
            group=GROUP,
            name=f"{items}-item forEach, in-memory store, wall time",
            value=wall,
            unit="s",
            baseline=raw,
            baseline_name="asyncio create_task + gather",
            target="<= 0.15 s" if not quick else "",  # issue 20
            ok=wall <= 0.15 if not quick else None,
        )
    )
    figures.append(
        Figure(
            group=GROUP,
            name=f"{items}-item forEach vs {items // 10} items, time ratio",
            value=wall / small,
            unit="x",
            target="<= 12x",
            ok=wall / small <= 12,
        )
    )
    durable = _measure(foreach_document(items), sqlite=True, repeats=1)
    figures.append(
        Figure(
            group=GROUP,
            name=f"{items}-item forEach, SQLite store, wall time",
            value=durable,
            unit="s",
            target="<= 2 s" if not quick else "",
            ok=durable <= 2 if not quick else None,
        )
    )
    grown = _growth_in_child("foreach", items)
    floor = _growth_in_child("raw", items)
    figures.append(
        Figure(
            group=GROUP,
            name=f"{items}-item forEach, RSS growth",
            value=grown,
            unit="MiB",
            baseline=floor or None,
            baseline_name="asyncio create_task + gather",
            target="<= 20 MiB" if not quick else "",
            ok=grown <= 20 if not quick else None,
        )
    )
    return figures


if __name__ == "__main__" and sys.argv[1:2] == ["--rss"]:
    _child_main(sys.argv[2], int(sys.argv[3]))
