"""CPU instructions per step, the figure that repeats within ~1% on a noisy machine.

Usage: python benchmarks/instructions.py [SHAPE ...]   (shapes: chain, loop, graph, foreach)

Wall-clock figures here move by 15% from run to run; the count of instructions
a process retires barely moves. Each shape runs twice in a fresh interpreter
under ``perf stat -e instructions``: once with 1,000 steps and once with 10.
The difference divided by 990 is what one more step costs, with interpreter
start-up, imports and the runtime's own set-up cancelled out; the objects the
imports made are frozen (``gc.freeze``) first, so that where a full garbage
collection happens to fall does not move the figure. Needs Linux
``perf`` (Debian: ``linux-perf``) and permission to count (root, or
``kernel.perf_event_paranoid`` <= 2). Where the machine has no hardware
counter (many virtual machines: perf says ``<not supported>``) it counts the
instructions under Valgrind's callgrind instead (Debian: ``valgrind``), which
is exact and repeatable but some fifty times slower; without either it reports
CPU microseconds per unit, the best of three runs each.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Each shape: a workflow of n units (steps, iterations, graph steps, items) of
# async no-op handlers, run once in memory.
_PROGRAM = """
import asyncio, gc, sys
sys.path.insert(0, {here!r})
from cadenza import Runtime
from cadenza.workflow import LoadedWorkflow, Loop, Step, Workflow
import bench_dag

# What the imports left is frozen out of the collector's view: otherwise when a
# full collection happens to fall moves the count by several per cent.
gc.collect()
gc.freeze()

n = int(sys.argv[1])
shape = sys.argv[2]
noop = "bench_dag:noop"
if shape == "chain":
    steps = [Step(id=f"s{{i}}", handler=noop, depends_on=[f"s{{i - 1}}"] if i else [])
             for i in range(n)]
elif shape == "loop":
    steps = [Step(id="l", handler=noop, loop=Loop(max_iterations=n))]
elif shape == "foreach":
    steps = [Step(id="f", handler=noop, loop=Loop(for_each=list(range(n)), max_concurrency=64))]
else:
    raise SystemExit(f"unknown shape {{shape}}")
document = LoadedWorkflow(
    workflow=Workflow(name=shape, steps=steps), path=None, base_dir=bench_dag.HERE, includes={{}}
)

async def main() -> None:
    async with Runtime() as runtime:
        result = await runtime.run(document)
    assert result.status == "completed", result.error

asyncio.run(main())
"""

SHAPES = ("chain", "loop", "foreach")

# String hashing is seeded per process: dicts and sets then differ in layout, and
# the count by a few per cent. One fixed seed makes two runs of one tree agree.
_ENV = {**os.environ, "PYTHONHASHSEED": "0"}


def instructions(n: int, shape: str) -> int | None:
    """Instructions retired running ``shape`` with ``n`` units (None: no counter here)."""
    program = _PROGRAM.format(here=str(HERE))
    command = ["perf", "stat", "-x,", "-e", "instructions", sys.executable, "-c", program]
    done = subprocess.run(
        [*command, str(n), shape], capture_output=True, text=True, check=True, timeout=600, env=_ENV
    )
    for line in done.stderr.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("instructions"):
            return int(fields[0]) if fields[0].isdigit() else None
    raise RuntimeError(f"perf printed no instruction count:\n{done.stderr}")


def simulated_instructions(n: int, shape: str) -> int:
    """Instructions executed running ``shape`` with ``n`` units, counted by callgrind."""
    program = _PROGRAM.format(here=str(HERE))
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    done = subprocess.run(
        [*command, sys.executable, "-c", program, str(n), shape],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
        env=_ENV,
    )
    for line in done.stderr.splitlines():
        if "Collected :" in line:
            return int(line.rsplit(":", 1)[1])
    raise RuntimeError(f"callgrind printed no instruction count:\n{done.stderr}")


def cpu_seconds(n: int, shape: str) -> float:
    """User plus system CPU of an interpreter running ``shape`` with ``n`` units, best of 3."""
    program = _PROGRAM.format(here=str(HERE))
    best = float("inf")
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        command = [sys.executable, "-c", program, str(n), shape]
        subprocess.run(command, check=True, timeout=600, env=_ENV)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best = min(best, spent)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("shapes", nargs="*", metavar="SHAPE", help=f"of {SHAPES}")
    args = parser.parse_args()
    if shutil.which("perf") is None and shutil.which("valgrind") is None:
        print("needs perf (Debian: linux-perf) or valgrind", file=sys.stderr)
        return 2
    unknown = sorted(set(args.shapes) - set(SHAPES))
    if unknown:
        parser.error(f"unknown shape(s) {unknown}; have {list(SHAPES)}")
    for shape in args.shapes or SHAPES:
        big = small = None
        if shutil.which("perf") is not None:
            big, small = instructions(1000, shape), instructions(10, shape)
        if big is not None and small is not None:
            print(f"{shape:8} {(big - small) / 990 / 1000:8.1f}k instructions per unit")
            continue
        if shutil.which("valgrind") is not None:
            big, small = simulated_instructions(1000, shape), simulated_instructions(10, shape)
            per_unit = (big - small) / 990 / 1000
            print(f"{shape:8} {per_unit:8.1f}k instructions per unit (callgrind)")
            continue
        cpu = (cpu_seconds(1000, shape) - cpu_seconds(10, shape)) / 990 * 1e6
        print(f"{shape:8} {cpu:8.1f} us CPU per unit (perf: no instruction counter here)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
