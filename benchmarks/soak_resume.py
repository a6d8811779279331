"""Soak: 200 SIGKILLs across the crash tests' workload, every run resumed to the golden result.

Usage: python benchmarks/soak_resume.py [--kills N] [--seed S] [--chain K]

The workload is the one ``tests/durability`` uses: a 20-iteration loop of agent
steps with a judge, then a forEach of agent steps, against a local scripted
OpenAI-compatible server that logs every call. Kill points are drawn at random
(seeded): after N events, or at the Nth pass of a store or step failpoint.
Runs are chains of K kills (the run, then each resume, killed in turn) and a
final resume. Printed: resumed runs over kills, calls repeated for steps that
had finished (must be 0) and for steps in flight (at most one per step and
kill), and the time from each restart to its first new step.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.durability.workload import crash_and_count, rules, write_workload  # noqa: E402

from cadenza.testing import (  # noqa: E402
    CrashHarness,
    KillPoint,
    ScriptedLLMServer,
    compare_results,
)

FAILPOINTS = (
    ("event", 480),
    ("store.before_commit", 120),
    ("store.after_commit", 120),
    ("step.before_work", 90),
    ("step.before_record", 90),
    ("step.after_record", 90),
)
"""Failpoint names with a bound on the count drawn (about what one run passes)."""


def draw(chance: random.Random, first: bool) -> KillPoint:
    """A kill point; resumes are killed earlier on average (they have less left to do)."""
    name, bound = chance.choice(FAILPOINTS)
    return KillPoint.at(name, chance.randint(1, bound if first else max(2, bound // 4)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--chain", type=int, default=4, help="kills per run")
    args = parser.parse_args()
    chance = random.Random(args.seed)
    kills = resumed = repeated_completed = repeated_in_flight = worst_in_flight = 0
    restarts: list[float] = []
    mismatched: list[str] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ScriptedLLMServer(rules()) as server:
        flow = write_workload(Path(tmp))
        with CrashHarness(flow, directory=Path(tmp) / "runs", environ=server.environ()) as harness:
            golden = harness.golden()
            serial = 0
            while kills < args.kills:
                serial += 1
                chain = [draw(chance, n == 0) for n in range(min(args.chain, args.kills - kills))]
                result, tally = crash_and_count(harness, server, chain, f"soak-{serial}")
                if tally.kills == 0:
                    continue  # every kill point fell past the end of the run
                kills += tally.kills
                resumed += 1
                repeated_completed += tally.repeated_completed
                repeated_in_flight += sum(tally.repeated_in_flight.values())
                worst_in_flight = max([worst_in_flight, *tally.repeated_in_flight.values()])
                restarts.extend(tally.restarts)
                differences = compare_results(golden, result)
                if differences:
                    mismatched.append(f"soak-{serial} {[str(p) for p in chain]}: {differences[:3]}")
    elapsed = time.perf_counter() - started
    ordered = sorted(restarts)
    p95 = ordered[int(len(ordered) * 0.95)] if ordered else float("nan")
    print(f"kills: {kills} in {resumed} runs ({elapsed:.0f} s)")
    print(f"runs resumed to the golden result: {resumed - len(mismatched)}/{resumed}")
    print(f"calls repeated for finished steps: {repeated_completed}")
    print(
        f"calls repeated for steps in flight: {repeated_in_flight} "
        f"(at most {worst_in_flight} for one step at one kill)"
    )
    if ordered:
        print(
            f"restart to next step: median {statistics.median(ordered) * 1000:.0f} ms, "
            f"p95 {p95 * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms ({len(ordered)} restarts)"
        )
    for line in mismatched:
        print("MISMATCH", line)
    return 1 if mismatched or repeated_completed or worst_in_flight > 1 else 0


if __name__ == "__main__":
    sys.exit(main())
