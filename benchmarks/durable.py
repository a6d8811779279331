"""What a durable step costs: SQLite-backed chain, loop and graph, beside a raw commit.

Usage: python benchmarks/durable.py [--repeats N] [--instructions | --syscalls] [SHAPE ...]
(shapes: chain, loop, graph)

``benchmarks/run.py`` measures each SQLite figure once against a raw commit
measured earlier; on a shared machine the disk's fsync time drifts between the
two. Here every repeat measures the raw commit (``BEGIN; INSERT; COMMIT`` in WAL
with ``synchronous=FULL``) and the shape back to back, in a fresh interpreter
each, and the ratio printed is the median of the repeats' ratios. Beside it, per
unit (a step, an iteration): commits (fsyncs of the WAL), bytes written, and
context switches of all the process's threads, the counts that explain a ratio.

``--instructions`` counts instead the CPU instructions per unit under Valgrind's
callgrind (exact and repeatable, but serialising the threads), 1,000 units
differenced against 10 as ``instructions.py`` does, split into the event loop's
thread and the store's writer thread, after those of one raw commit.
``--syscalls`` counts system calls per unit under strace (fsyncs are commits;
futex calls are threads waking threads).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHAPES = ("chain", "loop", "graph")

# One unit of a shape, run on a fresh SQLite store; prints JSON figures per unit.
_PROGRAM = """
import asyncio, gc, json, os, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, {here!r})
import bench_dag, bench_loops
from cadenza import Runtime

gc.collect()
gc.freeze()

n, shape, raw = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "raw"
if len(sys.argv) > 4:  # under callgrind: 50 times slower, the writer's linger timer
    # would fire within steps, which at full speed a flush always beats.
    import cadenza.store.sqlite._writer
    cadenza.store.sqlite._writer.LINGER = 3600.0
build = {{"chain": bench_dag._chain, "loop": bench_loops.loop_document,
          "graph": bench_loops.graph_document}}[shape]


def switches() -> int:
    total = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{{task}}/status") as status:
                for line in status:
                    if "ctxt_switches" in line:
                        total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total


def io() -> dict[str, int]:
    with open("/proc/self/io") as f:
        return {{k: int(v) for k, v in (line.split(": ") for line in f)}}


async def main() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        if raw:
            bench_dag._raw_commit_us(10)  # warm
            return {{"us": bench_dag._raw_commit_us(n)}}
        document = build(n)
        async with Runtime(store=str(Path(tmp) / "runs.db")) as runtime:
            await runtime.run(build(3))  # warm: imports, caches, the schema
            before_io, before_sw = io(), switches()
            started = time.perf_counter()
            result = await runtime.run(document)
            elapsed = time.perf_counter() - started
            after_io, after_sw = io(), switches()
        assert result.status == "completed", result.error
        return {{
            "us": elapsed / n * 1e6,
            "writes": (after_io["syscw"] - before_io["syscw"]) / n,
            "kib": (after_io["wchar"] - before_io["wchar"]) / n / 1024,
            "switches": (after_sw - before_sw) / n,
        }}

print(json.dumps(asyncio.run(main())))
"""

_ENV = {**os.environ, "PYTHONHASHSEED": "0"}


def _once(n: int, shape: str, raw: bool) -> dict[str, float]:
    program = _PROGRAM.format(here=str(HERE))
    done = subprocess.run(
        [sys.executable, "-c", program, str(n), shape, "raw" if raw else "run"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        env=_ENV,
    )
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def wall(shape: str, n: int, repeats: int) -> None:
    """Prints the median ratio to a raw commit and the per-unit counts."""
    ratios, runs = [], []
    for _ in range(repeats):
        raw = _once(n, shape, raw=True)["us"]
        run = _once(n, shape, raw=False)
        ratios.append(run["us"] / raw)
        runs.append(run)
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
    print(
        f"{shape:6} {statistics.median(ratios):5.2f}x raw commit ({spread}, {repeats} runs)"
        f"  {median['us']:7.1f} us/unit  {median['writes']:5.2f} write calls"
        f"  {median['kib']:6.2f} KiB written  {median['switches']:5.2f} context switches"
    )


def _callgrind(n: int, shape: str, out: Path, mode: str = "run") -> list[int]:
    """Instructions per thread (the main thread first) of one run under callgrind."""
    program = _PROGRAM.format(here=str(HERE))
    command = [
        "valgrind",
        "--tool=callgrind",
        "--separate-threads=yes",
        f"--callgrind-out-file={out}/cg.out",
    ]
    subprocess.run(
        [*command, sys.executable, "-c", program, str(n), shape, mode, "slow"],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
        env=_ENV,
    )
    counts = []
    for path in sorted(out.glob("cg.out-*"), key=lambda p: int(p.name.rsplit("-", 1)[1])):
        match = re.search(r"^summary:\s*(\d+)", path.read_text(errors="replace"), re.MULTILINE)
        counts.append(int(match.group(1)) if match else 0)
        path.unlink()
    return counts


def instructions(shape: str) -> None:
    """Prints instructions per unit: all threads, the loop's, the writer's."""
    with tempfile.TemporaryDirectory() as tmp:
        big, small = _callgrind(1000, shape, Path(tmp)), _callgrind(10, shape, Path(tmp))
    # Thread 1 runs the event loop; the busiest other thread is the store's writer
    # (the rest are anyio's workers for reads and opening the file).
    loop = (big[0] - small[0]) / 990
    others = [b - s for b, s in zip(big[1:], small[1:], strict=False)]
    writer = max(others, default=0) / 990
    total = (sum(big) - sum(small)) / 990
    print(
        f"{shape:6} {total / 1000:7.1f}k instructions per unit (callgrind):"
        f" loop thread {loop / 1000:.1f}k, writer thread {writer / 1000:.1f}k"
    )


_SYSCALLS = "fsync,fdatasync,futex,write,sendto,recvfrom,read,epoll_wait"


def _strace(n: int, shape: str) -> dict[str, int]:
    """Calls of each traced system call, all threads, during one run under strace."""
    program = _PROGRAM.format(here=str(HERE))
    command = ["strace", "-f", "-c", "-e", f"trace={_SYSCALLS}"]
    done = subprocess.run(
        [*command, sys.executable, "-c", program, str(n), shape, "run"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        env=_ENV,
    )
    calls = {}
    for line in done.stderr.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[-1] in _SYSCALLS.split(",") and fields[3].isdigit():
            calls[fields[-1]] = int(fields[3])
    return calls


def syscalls(shape: str) -> None:
    """Prints system calls per unit, 1,000 units differenced against 10."""
    big, small = _strace(1000, shape), _strace(10, shape)
    per_unit = {name: (big.get(name, 0) - small.get(name, 0)) / 990 for name in big}
    shown = "  ".join(f"{name} {count:.2f}" for name, count in sorted(per_unit.items()))
    print(f"{shape:6} system calls per unit: {shown}")


def raw_instructions() -> None:
    """Prints the instructions of one raw committed INSERT, the floor of the ratios."""
    with tempfile.TemporaryDirectory() as tmp:
        big = _callgrind(1000, "chain", Path(tmp), "raw")
        small = _callgrind(10, "chain", Path(tmp), "raw")
    per_commit = (sum(big) - sum(small)) / 990 / 1000
    print(f"raw    {per_commit:7.1f}k instructions per commit (callgrind)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("shapes", nargs="*", metavar="SHAPE", help=f"of {SHAPES}")
    parser.add_argument("--repeats", type=int, default=5, help="runs per shape (default 5)")
    parser.add_argument("-n", type=int, default=1000, help="units per run (default 1,000)")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions under callgrind"
    )
    parser.add_argument("--syscalls", action="store_true", help="count system calls (strace)")
    args = parser.parse_args()
    unknown = sorted(set(args.shapes) - set(SHAPES))
    if unknown:
        parser.error(f"unknown shape(s) {unknown}; have {list(SHAPES)}")
    if args.instructions and shutil.which("valgrind") is None:
        print("--instructions needs valgrind", file=sys.stderr)
        return 2
    if args.instructions:
        raw_instructions()
    for shape in args.shapes or SHAPES:
        if args.instructions:
            instructions(shape)
        elif args.syscalls:
            syscalls(shape)
        else:
            wall(shape, args.n, args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
