"""Cadenza beside LangGraph and AutoGen core, on the same workloads, in one run.

    pip install -e '.[bench]'
    python benchmarks/peers/run.py            # full sizes; writes docs/benchmarks.md
    python benchmarks/peers/run.py --quick    # small sizes, prints only

Every workload runs in a fresh process (``workloads.py``), so imports and memory
of one never colour another; each is run ``--repeat`` times and the median kept.
A peer that is not installed is skipped and its rows say so.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
DOCS = HERE.parents[1] / "docs" / "benchmarks.md"


@dataclass(frozen=True)
class Pair:
    """One comparison: a Cadenza workload against a peer's, and how to read it."""

    title: str
    cadenza: str
    peer: str
    peer_name: str
    size: int
    quick: int
    unit: str  # "step" (per-step time), "op" (per round trip) or "actor" (bytes)
    target: str
    note: str


PAIRS = [
    Pair(
        "writer/critic loop, 1,000 iterations, no checkpointer",
        "cadenza-loop",
        "langgraph-loop",
        "LangGraph (async, no checkpointer)",
        1000,
        100,
        "step",
        ">= 15x",
        "",
    ),
    Pair(
        "writer/critic loop, SQLite checkpoints",
        "cadenza-loop-sqlite",
        "langgraph-loop-sqlite-sync",
        'LangGraph SqliteSaver, durability "sync"',
        1000,
        30,
        "step",
        ">= 3x",
        "",
    ),
    Pair(
        "writer/critic loop, SQLite checkpoints (async saver)",
        "cadenza-loop-sqlite",
        "langgraph-loop-async-sqlite",
        "LangGraph AsyncSqliteSaver (default durability)",
        1000,
        30,
        "step",
        ">= 5x",
        "",
    ),
    Pair(
        "fan-out and join, 10,000 items",
        "cadenza-fanout",
        "langgraph-fanout",
        "LangGraph Send + reducer",
        10_000,
        500,
        "step",
        ">= 24x, <= 1/6 memory",
        "",
    ),
    Pair(
        "request/reply between two agents, 10,000 round trips",
        "cadenza-ask",
        "autogen-ask",
        "AutoGen core SingleThreadedAgentRuntime",
        10_000,
        500,
        "op",
        ">= 8x",
        "",
    ),
    Pair(
        "memory per idle actor (10,000 actors)",
        "cadenza-idle",
        "autogen-idle",
        "AutoGen core agent instances",
        10_000,
        1000,
        "actor",
        "(none)",
        "",
    ),
]

PEER_PACKAGES = {"langgraph": "langgraph", "autogen": "autogen-core"}


def installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def measure(name: str, size: int, repeat: int) -> dict[str, float] | None:
    """The median figures of ``repeat`` fresh-process runs, or None if it failed."""
    runs = []
    for _ in range(repeat):
        done = subprocess.run(
            [sys.executable, str(HERE / "workloads.py"), name, str(size)],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if done.returncode != 0:
            sys.stderr.write(f"{name} failed:\n{done.stderr[-2000:]}\n")
            return None
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def per_unit(figures: dict[str, float], unit: str) -> float:
    """Microseconds per step or op, or bytes per actor."""
    if unit == "actor":
        return figures["bytes_per_actor"]
    count = figures.get("steps") or figures["ops"]
    return figures["seconds"] / count * 1e6


def machine() -> list[str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    versions = ", ".join(
        f"{package} {installed(package) or 'not installed'}"
        for package in ("cadenza", "langgraph", "langgraph-checkpoint-sqlite", "autogen-core")
    )
    return [
        f"- Machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        f"- Python {platform.python_version()}; {versions}",
        f"- Load average when the run started: {load} (a shared machine: read the ratios)",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes; do not write docs")
    parser.add_argument("--repeat", type=int, default=1, help="runs per workload (median)")
    args = parser.parse_args()
    rows = []
    for pair in PAIRS:
        size = pair.quick if args.quick else pair.size
        peer_package = PEER_PACKAGES[pair.peer.split("-")[0]]
        ours = measure(pair.cadenza, size, args.repeat)
        theirs = measure(pair.peer, size, args.repeat) if installed(peer_package) else None
        rows.append((pair, size, ours, theirs, peer_package))
        ratio = "-"
        if ours and theirs:
            ratio = f"{per_unit(theirs, pair.unit) / per_unit(ours, pair.unit):.2f}x"
        sys.stdout.write(f"{pair.title}: cadenza {ours} | {pair.peer_name} {theirs} | {ratio}\n")
    if not args.quick:
        DOCS.write_text(render(rows))
        sys.stdout.write(f"wrote {DOCS}\n")
    return 0


def render(
    rows: list[tuple[Pair, int, dict[str, float] | None, dict[str, float] | None, str]],
) -> str:
    lines = [
        "# Benchmarks: Cadenza beside LangGraph and AutoGen core",
        "",
        "Written by `python benchmarks/peers/run.py` (peers from `pip install -e '.[bench]'`).",
        "Each workload runs in a fresh process; the figures are from one run on this machine:",
        "",
        *machine(),
        "",
        "Ratio = the peer's cost / Cadenza's (above 1: Cadenza is ahead). Times are per step",
        "(a node or step execution) or per round trip; memory is per idle actor.",
        "",
        "| workload | Cadenza | peer | peer figure | ratio | issue target |",
        "|---|---|---|---|---|---|",
    ]
    for pair, _size, ours, theirs, package in rows:
        unit = {"step": "µs/step", "op": "µs/round trip", "actor": "bytes/actor"}[pair.unit]
        ours_text = f"{per_unit(ours, pair.unit):,.0f} {unit}" if ours else "failed"
        if theirs is None:
            lines.append(
                f"| {pair.title} | {ours_text} | {pair.peer_name} | not installed ({package}) "
                f"| - | {pair.target} |"
            )
            continue
        theirs_text = f"{per_unit(theirs, pair.unit):,.0f} {unit}"
        ratio = per_unit(theirs, pair.unit) / per_unit(ours, pair.unit) if ours else 0.0
        lines.append(
            f"| {pair.title} | {ours_text} | {pair.peer_name} | {theirs_text} | "
            f"**{ratio:.2f}x** | {pair.target} |"
        )
        if pair.unit == "step" and "fan-out" in pair.title and ours:
            mine, peer = ours["rss_growth"], theirs["rss_growth"]
            share = mine / peer if peer else float("nan")
            lines.append(
                f"| ... peak RSS growth of that run | {mine / 2**20:,.1f} MiB | {pair.peer_name} "
                f"| {peer / 2**20:,.1f} MiB | {share:.2f} of the peer's | <= 1/6 |"
            )
    lines += ["", "SIZES: " + ", ".join(f"{p.cadenza}={size}" for p, size, *_ in rows), ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
