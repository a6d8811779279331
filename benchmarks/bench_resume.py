"""Resuming a run killed with 10,000 events recorded, beside the raw cost of reading them.

A single-step loop of no-op handler steps runs in a real ``cadenza`` process
until its 10,000th event, where a failpoint kills it with SIGKILL. Then, in
this process, on a fresh copy of that SQLite file each time: (a) the time from
opening the store to the first step the resumed run starts anew, which is what
a restarted service waits before work goes on; (b) the time until the resumed
run has finished. The floor is reading the same events and records with raw
``sqlite3`` and decoding them with msgspec; the target is under 1 s.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import msgspec

from _harness import Figure, best_of, now
from cadenza import Event, Runtime
from cadenza.protocols import StepRecord

GROUP = "resume"
EVENTS_PER_ITERATION = 4  # iteration_start, step_start, step_end, iteration_end

FLOW = """
name: long-loop
steps:
  - id: spin
    loop: {{maxIterations: {n}}}
    handler: "resume_noop:noop"
"""
NOOP = "async def noop(context):\n    return None\n"


def interrupted(directory: Path, events: int) -> Path:
    """A store holding run ``r``, killed by SIGKILL right after its ``events``-th event."""
    iterations = events // EVENTS_PER_ITERATION + 50  # the kill comes before the end
    (directory / "resume_noop.py").write_text(NOOP)
    flow = directory / "flow.yaml"
    flow.write_text(FLOW.format(n=iterations))
    store = directory / "runs.db"
    environ = {**os.environ, "CADENZA_FAILPOINT": f"event:{events}"}
    killed = subprocess.run(
        [sys.executable, "-m", "cadenza", "run", str(flow), "--store", str(store), "--run-id", "r"],
        env=environ,
        capture_output=True,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr.decode()
    return store


def _copy(store: Path, target: Path) -> Path:
    for suffix in ("", "-wal"):
        source = Path(f"{store}{suffix}")
        if source.exists():
            shutil.copy(source, f"{target}{suffix}")
    return target


async def _resume(store: Path) -> tuple[float, float, int]:
    """Seconds to the first new step, seconds to the end, events before the resume."""
    started = now()
    first: list[float] = []
    resumed = False

    def watch(event: Event) -> None:
        nonlocal resumed
        resumed = resumed or event.type == "run_resumed"
        if resumed and event.type == "step_start" and not first:
            first.append(now())

    async with Runtime(store=store) as runtime:
        before = len(await runtime.stored_events("r"))
        opened = now()
        handle = await runtime.resume("r", on_event=watch)
        result = await handle.result()
        ended = now()
    assert result.status == "completed", result.error
    assert first, "the resumed run started no step"
    return first[0] - started, ended - opened + (opened - started), before


def _raw_read(store: Path) -> float:
    import sqlite3

    decode_event = msgspec.json.Decoder(Event).decode
    decode_pack = msgspec.json.Decoder(list[Event]).decode
    decode_step = msgspec.json.Decoder(StepRecord).decode
    started = now()
    connection = sqlite3.connect(store)
    events = connection.execute("SELECT body, last_seq FROM events WHERE run_id = 'r' ORDER BY seq")
    for body, last_seq in events:  # a row is one event, or a pack of a commit's (a list)
        if last_seq is None:
            decode_event(body)
        else:
            decode_pack(body)
    for (record,) in connection.execute("SELECT record FROM steps WHERE run_id = 'r'"):
        decode_step(record)
    connection.close()
    return now() - started


def run(quick: bool) -> list[Figure]:
    """Resume figures for a run of 10,000 recorded events (2,000 with ``quick``)."""
    events = 2_000 if quick else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        store = interrupted(directory, events)
        copies = iter(range(1_000))
        samples: list[tuple[float, float, int]] = []

        def measure() -> float:
            copy = _copy(store, directory / f"copy-{next(copies)}.db")
            samples.append(asyncio.run(_resume(copy)))
            return samples[-1][0]

        to_step = best_of(3, measure)
        to_end = sorted(sample[1] for sample in samples)[1]
        recorded = samples[0][2]
        raw = best_of(3, lambda: _raw_read(_copy(store, directory / f"raw-{next(copies)}.db")))
    name = f"resume, {recorded:,} events recorded"
    return [
        Figure(
            group=GROUP,
            name=f"{name}: open to next step",
            value=to_step,
            unit="s",
            baseline=raw,
            baseline_name="sqlite3 read + msgspec decode of the log",
            target="< 1 s",
            ok=to_step < 1.0,
        ),
        Figure(
            group=GROUP,
            name=f"{name}: open to finished",
            value=to_end,
            unit="s",
            baseline=raw,
            baseline_name="sqlite3 read + msgspec decode of the log",
            target="< 1 s",
            ok=to_end < 1.0,
        ),
    ]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _harness import format_table

    print(format_table(run("--quick" in sys.argv)))
