"""A run being resumed keeps its lease while its journal is read, however long that takes.

A large run's journal takes seconds to read (50,000 recorded items: ~4 s on
PostgreSQL). Were its lease left unrenewed meanwhile, it would expire and the
run be an orphan again before it even restarted: another supervisor would take
it, lose it the same way, and so on for ever. Here the store's reads are slow
(a far or busy database: each page waits three lease ttls), and what the
fleet's supervisors see of the run at the end of the read is asked of the
store itself: it must not be among the orphaned runs.
"""

from __future__ import annotations

from pathlib import Path

import anyio

from cadenza import Runtime
from cadenza.protocols import StepRecord
from cadenza.store.sqlite import SqliteRunStore
from cadenza.testing import CrashHarness, KillPoint

TTL = 0.3

FLOW = """
name: slow-read
steps:
  - id: fan
    handler: "read_steps:work"
    loop:
      forEach: [1, 2, 3, 4, 5, 6, 7, 8]
      maxConcurrency: 1
"""

STEPS = """
def work(ctx):
    return ctx.item
"""


class _FarStore(SqliteRunStore):
    """A SQLite store whose record pages arrive slowly, as from a far database; it notes
    whether the run was an orphan (its lease expired) once each page arrived."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.orphaned_after_read: list[bool] = []

    async def steps(
        self, run_id: str, *, after: str | None = None, limit: int | None = None
    ) -> dict[str, StepRecord]:
        records = await super().steps(run_id, after=after, limit=limit)
        if limit is not None:  # a page of the resume's read
            await anyio.sleep(3 * TTL)
            orphans = await self.orphaned_runs()
            self.orphaned_after_read.append(run_id in {row.run_id for row in orphans})
        return records


def test_a_resume_that_reads_for_longer_than_its_lease_keeps_the_run(tmp_path: Path) -> None:
    (tmp_path / "flow.yaml").write_text(FLOW)
    (tmp_path / "read_steps.py").write_text(STEPS)
    with CrashHarness(tmp_path / "flow.yaml", directory=tmp_path) as harness:
        killed = harness.run("slow", kill=KillPoint.after_events(12))
        assert killed.exit_code == -9, killed.stderr
        store = _FarStore(harness.directory / "runs.db")

        async def resume() -> str:
            async with Runtime(store=store, lease_ttl=TTL) as runtime:
                handle = await runtime.resume("slow")
                return (await handle.result()).status

        status = anyio.run(resume)

    assert status == "completed"
    assert store.orphaned_after_read, "the resume read no page"
    assert not any(store.orphaned_after_read), "the lease expired while the journal was read"
