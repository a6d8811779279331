"""A long-lived runtime (a service) does not grow with the runs it has finished.

The soak (``benchmarks/soak.py``) showed resident memory climbing steadily on one
`Runtime` while the store was pruned. This is the in-process, CI-sized version:
many small runs on one runtime with a pruned SQLite store, Python allocations
measured with tracemalloc, per finished run.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

from cadenza import Runtime
from tests.conftest import WriteFlow

FLOW = """
name: small-fan
steps:
  - id: fan
    handler: "HANDLERS:step"
    loop:
      forEach: "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]"
"""
HANDLER = """
async def step(ctx):
    return {"i": ctx.item}
"""
PER_RUN_LIMIT = 4 * 1024
"""Bytes a finished, pruned run may leave behind (caches fill up during warm-up)."""


async def test_finished_runs_are_not_kept_in_memory(write_flow: WriteFlow, tmp_path: Path) -> None:
    """After warm-up, 60 more runs (pruned from the store) leave under 4 KB each behind."""
    path = write_flow(FLOW, handlers=HANDLER)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        for _ in range(10):
            await runtime.run(path)
        await runtime.prune(keep=1)
        await runtime.store.flush()
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(60):
                await runtime.run(path)
            await runtime.prune(keep=1)
            await runtime.store.flush()
            gc.collect()
            retained = (tracemalloc.get_traced_memory()[0] - before) / 60
        finally:
            tracemalloc.stop()
    assert retained < PER_RUN_LIMIT, f"{retained:,.0f} bytes kept per finished run"


async def test_a_forEach_leaves_no_garbage_cycle_per_item(write_flow: WriteFlow) -> None:
    """An ended step's actor and its ref do not hold each other: the items of a forEach
    are freed as they end, not left for the cycle collector (which, at a million
    items, works harder as the heap grows). 400 items leave no more cycles than 40."""

    path = write_flow(
        """
        name: fan
        inputs: {n: {type: integer}}
        steps:
          - id: fan
            handler: "HANDLERS:step"
            loop: {forEach: {handler: "HANDLERS:items"}, outputMode: summary}
        """,
        handlers=HANDLER + "\n\ndef items(ctx):\n    return range(ctx.inputs['n'])\n",
    )

    async def cycles(items: int) -> int:
        async with Runtime() as runtime:
            await runtime.run(path, inputs={"n": items})  # warm: caches, lazy imports
            gc.collect()
            gc.disable()
            try:
                await runtime.run(path, inputs={"n": items})
                return gc.collect()  # unreachable objects found: those in cycles
            finally:
                gc.enable()

    few, many = await cycles(40), await cycles(400)
    assert many - few < 100, f"{few} objects in cycles after 40 items, {many} after 400"
