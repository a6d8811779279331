"""A 20,000-item forEach SIGKILLed half way resumes without running a completed item again.

The resume reads the run's journal a page at a time (`Replay.read`); what this
test holds it to is what a user sees: the run completes with every item once
in its counts, and no item whose record was completed in the store when the
process died runs in the resumed process (each execution of the handler
leaves a line in a file of its process).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from cadenza import Runtime
from cadenza.testing import CrashHarness, KillPoint

ITEMS = 20_000

FLOW = """
name: large
inputs:
  n: {type: integer}
steps:
  - id: fan
    handler: "large_steps:work"
    loop:
      forEach: {handler: "large_steps:numbers"}
      maxConcurrency: 32
      outputMode: summary
"""

STEPS = """
import os
from pathlib import Path

def numbers(ctx):
    return range(ctx.inputs["n"])

def work(ctx):
    # A side channel outside the store: which process ran which item.
    with open(Path(__file__).parent / f"ran-{os.getpid()}.txt", "a") as ran:
        ran.write(f"{ctx.index}\\n")
"""


def _ran(directory: Path) -> dict[str, list[int]]:
    """The items each process ran, by its file's name."""
    return {
        path.name: [int(line) for line in path.read_text().split()]
        for path in directory.glob("ran-*.txt")
    }


async def _completed(store: Path) -> set[str]:
    async with Runtime(store=store) as runtime:
        steps = await runtime.store.steps("large")
    return {address for address, record in steps.items() if record.status == "completed"}


def test_a_killed_large_foreach_runs_no_completed_item_again(tmp_path: Path) -> None:
    (tmp_path / "flow.yaml").write_text(FLOW)
    (tmp_path / "large_steps.py").write_text(STEPS)
    with CrashHarness(
        tmp_path / "flow.yaml", directory=tmp_path, inputs={"n": ITEMS}, timeout=600
    ) as harness:
        killed = harness.run("large", kill=KillPoint.after_events(2 * ITEMS))  # ~ half way
        assert killed.exit_code == -9, killed.stderr
        done = asyncio.run(_completed(harness.directory / "runs.db"))
        before = _ran(tmp_path)
        assert ITEMS // 4 < len(done) < ITEMS, len(done)

        resumed = harness.resume("large")

    assert resumed.exit_code == 0, resumed.stderr
    assert resumed.result is not None
    assert resumed.result.status == "completed"
    assert resumed.result.steps["fan"].result["counts"] == {"completed": ITEMS}
    again = [i for name, items in _ran(tmp_path).items() if name not in before for i in items]
    assert not [i for i in again if f"fan[{i}]" in done]  # no completed item ran again
    # Every item without a completed record ran in the resume, once.
    assert sorted(again) == sorted(i for i in range(ITEMS) if f"fan[{i}]" not in done)
