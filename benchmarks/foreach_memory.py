"""Peak RSS growth and time per item of a large forEach, in one process, in memory.

Usage: python benchmarks/foreach_memory.py [--items N] [--store memory|quiet] [--mode MODE]

Issue 30's line: a 1,000,000-item forEach of no-op async handler steps, run by
the `Runtime` API on the in-memory store, should finish with its process's
peak RSS grown by at most 256 MiB and each item no slower than in the
10,000-item forEach of ``benchmarks/run.py loops``. Each size runs in a fresh
interpreter (peak RSS is a process's high-water mark), warmed up first.

``--store quiet`` is a memory store that keeps no events and no step records:
the difference from ``memory`` is what the store holds, the rest is the run's
own (journal, controller, result). The default of 100,000 items takes a few
seconds; ``--items 1000000`` takes minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import msgspec

HERE = Path(__file__).resolve().parent
FLOOR_MIB = 256
"""Issue 30's ceiling on the growth of a 1,000,000-item forEach."""


def _status_kib(field: str) -> int:
    """A ``/proc/self/status`` figure (``VmRSS``, ``VmHWM``: this process's peak) in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


def _child(items: int, store_kind: str, mode: str) -> dict[str, float]:
    sys.path.insert(0, str(HERE))
    from bench_loops import foreach_document
    from cadenza import Runtime
    from cadenza.protocols import Event, StepRecord
    from cadenza.store import MemoryRunStore
    from cadenza.workflow import LoadedWorkflow

    class QuietStore(MemoryRunStore):
        """Keeps runs and leases, drops events and step records."""

        def append_event(self, event: Event) -> None:
            pass

        def put_step(self, run_id: str, address: str, record: StepRecord) -> None:
            pass

    def document(n: int) -> LoadedWorkflow:
        loaded = foreach_document(n)
        if not mode:
            return loaded
        step = loaded.workflow.steps[0]
        assert step.loop is not None
        loop = msgspec.structs.replace(step.loop, output_mode=mode)
        steps = [msgspec.structs.replace(step, loop=loop)]
        workflow = msgspec.structs.replace(loaded.workflow, steps=steps)
        return dataclasses.replace(loaded, workflow=workflow)

    async def once(n: int) -> float:
        store = QuietStore() if store_kind == "quiet" else MemoryRunStore()
        async with Runtime(store=store) as runtime:
            loaded = document(n)
            started = time.perf_counter()
            result = await runtime.run(loaded)
            elapsed = time.perf_counter() - started
        assert result.status == "completed", result.error
        return elapsed

    asyncio.run(once(10))  # lazy imports and caches, so the figure is what the items cost
    before = _status_kib("VmRSS")
    elapsed = asyncio.run(once(items))
    peak = _status_kib("VmHWM")
    return {"mib": max(peak - before, 0) / 1024, "us_per_item": elapsed / items * 1e6}


def measure(items: int, store: str = "memory", mode: str = "") -> dict[str, float]:
    """Peak RSS growth (MiB) and microseconds per item of ``items``, in a fresh process."""
    command = [sys.executable, __file__, "--child", "--items", str(items), "--store", store]
    if mode:
        command += ["--mode", mode]
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=HERE).stdout
    figures: dict[str, float] = json.loads(out)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--store", choices=("memory", "quiet"), default="memory")
    parser.add_argument("--mode", default="", help="the forEach's outputMode")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.items, args.store, args.mode)))
        return
    figures = measure(args.items, args.store, args.mode)
    per_item_kib = figures["mib"] * 1024 / args.items
    mode = args.mode or "default"
    print(
        f"{args.items:,}-item forEach, {args.store} store, outputMode {mode}: "
        f"peak RSS growth {figures['mib']:.1f} MiB ({per_item_kib:.2f} KiB/item), "
        f"{figures['us_per_item']:.1f} us/item"
    )
    if args.items >= 1_000_000:
        verdict = "ok" if figures["mib"] <= FLOOR_MIB else "OVER"
        print(f"ceiling {FLOOR_MIB} MiB: {verdict}")


if __name__ == "__main__":
    main()
