"""Retention: ``keepLast`` trims a long loop's history; ``runs prune`` removes finished runs."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from cadenza.protocols import RunStatus
from cadenza.store import RunRow
from cadenza.testing import CrashHarness, KillPoint, compare_results
from cadenza.workflow import validate_file
from tests._helpers import cadenza, run_on
from tests.conftest import StoreFactory, WriteFlow

LONG = """
name: long
steps:
  - id: spin
    loop:
      maxIterations: 12
      keepLast: 3
      outputMode: cumulative
      steps:
        - id: a
          handler: "HANDLERS:step"
        - id: b
          dependsOn: [a]
          handler: "HANDLERS:step"
"""

STEP = """
from pathlib import Path


def step(context):
    with open(Path(context.workflow_dir) / "calls.log", "a") as calls:
        calls.write(context.address + "\\n")
    return f"{context.address} saw {context.brief.feedback is not None}"
"""


def kept(addresses: Iterable[str]) -> list[str]:
    return sorted(address for address in addresses if address.startswith("spin."))


async def test_keep_last_keeps_only_the_newest_iterations(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """With keepLast: 3, the result and the store hold iterations 9-11 only; the count is 12."""
    flow = write_flow(LONG, handlers=STEP)
    async with run_on(tmp_path / "runs.db", flow) as (runtime, result):
        stored = await runtime.store.steps("r")
    assert result.loops["spin"].iterations == 12
    expected = [f"spin.{n}{s}" for n in (10, 11, 9) for s in ("", ".a", ".b")]
    assert kept(result.steps) == sorted(expected)
    assert kept(stored) == sorted(expected)
    content = result.steps["spin"].content or ""
    assert content.count("---") == 11  # cumulative output keeps every iteration's block


def test_a_keep_last_loop_resumes_from_its_checkpoint(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """Killed mid-loop, it resumes after its newest checkpoint, to the golden result."""
    flow = write_flow(LONG, handlers=STEP)
    with CrashHarness(flow, directory=tmp_path / "runs") as harness:
        golden = harness.golden()
        before = Counter((tmp_path / "calls.log").read_text().split())
        outcome = harness.crash(
            KillPoint.at("step.after_record", 15), then=[KillPoint.at("step.before_work", 5)]
        )
    assert outcome.kills == 2
    assert compare_results(golden, outcome.result) == []
    calls = Counter((tmp_path / "calls.log").read_text().split()) - before
    # Each of the 24 leaves ran once, and at most the two in flight ran again.
    assert set(calls) == set(before)
    assert sum(calls.values()) - len(calls) <= 2


def test_keep_last_is_checked_where_it_is_written(tmp_path: Path, write_flow: WriteFlow) -> None:
    """keepLast belongs to repeat-until loops and is at least 1."""
    bad = write_flow(
        """
        name: bad
        steps:
          - id: each
            loop: {forEach: [1, 2], keepLast: 1}
            command: "true"
          - id: zero
            loop: {maxIterations: 2, keepLast: 0}
            command: "true"
        """
    )
    problems = [str(problem) for problem in validate_file(bad)]
    assert any("forEach cannot be combined with keepLast" in p for p in problems), problems
    assert any("keepLast must be at least 1" in p for p in problems), problems


async def test_prune_removes_only_finished_runs(
    tmp_path: Path, write_flow: WriteFlow, durable_store_factory: StoreFactory
) -> None:
    """--older-than and --keep choose among finished runs; running and waiting ones stay.

    The same on SQLite and PostgreSQL: retention and ``runs list`` do not depend on the backend.
    """
    spec = durable_store_factory.spec
    assert spec is not None
    store = durable_store_factory()
    await store.open()
    old = time.time() - 30 * 86400  # a month ago
    statuses: dict[str, RunStatus] = {
        "old-done": "completed",
        "old-failed": "failed",
        "old-running": "running",
        "old-waiting": "waiting",
    }
    for run_id, status in statuses.items():
        store.begin_run(RunRow(run_id, "w", None, status, {}, old, old))
    await store.flush()
    await store.close()
    flow = write_flow("name: quick\nsteps:\n  - id: a\n    command: 'true'\n")
    async with run_on(spec, flow, "new-1") as (runtime, _):
        await runtime.run(flow, run_id="new-2")

    pruned = cadenza("runs", "prune", "--older-than", "7d", "--store", spec, cwd=tmp_path)
    assert pruned.returncode == 0, pruned.stderr
    assert sorted(pruned.stdout.split()) == ["old-done", "old-failed"]
    kept_one = cadenza("runs", "prune", "--keep", "1", "--store", spec, cwd=tmp_path)
    assert kept_one.stdout.split() == ["new-1"]
    listed = cadenza("runs", "list", "--store", spec, cwd=tmp_path)
    assert sorted(line.split()[0] for line in listed.stdout.splitlines()) == [
        "new-2",
        "old-running",
        "old-waiting",
    ], (listed.stdout, listed.stderr)
    newest = cadenza("runs", "list", "--limit", "1", "--store", spec, cwd=tmp_path)
    assert [line.split()[0] for line in newest.stdout.splitlines()] == ["new-2"]
    gone = cadenza("runs", "show", "new-1", "--store", spec, cwd=tmp_path)
    assert gone.returncode == 2
    nothing = cadenza("runs", "prune", "--store", spec, cwd=tmp_path)
    assert nothing.returncode == 2
    assert "--older-than" in nothing.stderr
    assert json.loads(cadenza("runs", "show", "new-2", "--store", spec, cwd=tmp_path).stdout)
