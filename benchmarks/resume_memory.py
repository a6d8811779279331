"""Reading a large forEach's journal back for a resume: time and peak RSS, by size.

Usage: python benchmarks/resume_memory.py [--items N ...]

Issue 30: resume of a million-item run reads its journal without loading it
whole, and replaying a million recorded items stays linear and fast. For each
size, a SQLite store is written with the journal of a forEach of N no-op
handler items, all completed (per item its ``item_start``, ``step_start``,
``step_end`` and ``item_end`` and its record, as a run writes them), then a
fresh interpreter reads it the way ``cadenza resume`` does (`Replay.read`: a
page of records, then of events, at a time) and reports the seconds it took
and how much its peak RSS grew. Linear means the time per item stays put from
100,000 to 1,000,000 items; the memory budget is the owning supervisor's 512 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cadenza.protocols import Event, StepRecord
from cadenza.store import RunRow

HERE = Path(__file__).resolve().parent
BUDGET_MIB = 512
RUN = "large"


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


async def write_journal(path: Path, items: int) -> None:
    """A finished forEach's journal of ``items`` no-op items, as a run writes it."""
    from cadenza.store import SqliteRunStore

    store = SqliteRunStore(path)
    await store.open()
    stamp = "2026-11-29T00:00:00.000Z"
    seq = 0

    def emit(kind: str, step_id: str | None, **fields: object) -> None:
        nonlocal seq
        seq += 1
        store.append_event(Event(kind, stamp, RUN, seq, step_id, **fields))  # type: ignore[arg-type]

    try:
        store.begin_run(RunRow(RUN, "large", None, "running", {}, 0.0, 0.0))
        emit("workflow_start", None, message="large")
        emit("step_start", "fan", data={"kind": "handler", "attempt": 1, "loop_type": "forEach"})
        store.put_step(RUN, "fan", StepRecord(status="running", attempts=1))
        start = {"kind": "handler", "attempt": 1, "index": 0, "total": 1}
        done = StepRecord(status="completed", content="", attempts=1, duration_ms=1)
        for i in range(items):
            address = f"fan[{i}]"
            emit("item_start", address, data={"total": items})
            emit("step_start", address, data=start)
            emit("step_end", address, duration="1ms")
            emit("item_end", address, data={"status": "completed"})
            store.put_step(RUN, address, done)
            if i % 5_000 == 4_999:
                await store.flush()
        await store.flush()
    finally:
        await store.close()


def _child(path: Path) -> dict[str, float]:
    from cadenza.actors.run import Replay
    from cadenza.store import SqliteRunStore

    async def read() -> tuple[float, int]:
        store = SqliteRunStore(path)
        await store.open()
        try:
            started = time.perf_counter()
            replay = await Replay.read(store, RUN)
            elapsed = time.perf_counter() - started
        finally:
            await store.close()
        assert replay.replayable > 0
        return elapsed, replay.last_seq

    asyncio.run(_warm(path))
    before = _status_kib("VmRSS")
    elapsed, last = asyncio.run(read())
    return {
        "seconds": elapsed,
        "events": last,
        "mib": (_status_kib("VmHWM") - before) / 1024,
        "rss_mib": _status_kib("VmHWM") / 1024,
    }


async def _warm(path: Path) -> None:
    """Imports and first-use costs, before the figure."""
    from cadenza.store import SqliteRunStore

    store = SqliteRunStore(path)
    await store.open()
    await store.events(RUN, limit=10)
    await store.close()


def measure(items: int) -> dict[str, float]:
    """Writes a journal of ``items`` and reads it in a fresh interpreter."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "runs.db"
        asyncio.run(write_journal(path, items))
        command = [sys.executable, __file__, "--child", str(path)]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    figures: dict[str, float] = json.loads(out)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(_child(args.child)))
        return
    for items in args.items:
        got = measure(items)
        per_item = got["seconds"] / items * 1e6
        print(
            f"{items:,} items ({got['events']:,.0f} events): read for resume in "
            f"{got['seconds']:.1f} s ({per_item:.1f} us/item), peak RSS grew "
            f"{got['mib']:.0f} MiB (process peak {got['rss_mib']:.0f} MiB; budget "
            f"{BUDGET_MIB} MiB: {'ok' if got['rss_mib'] <= BUDGET_MIB else 'OVER'})"
        )


if __name__ == "__main__":
    main()
