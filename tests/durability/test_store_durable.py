"""What every RunStore does for durable runs: documents, leases, retention, deletion.

Part of the store conformance suite: ``store`` is each backend in turn (tests/conftest.py).
"""

from __future__ import annotations

import os
import subprocess

import anyio
import pytest

from cadenza.errors import LeaseHeld
from cadenza.protocols import Event, StepRecord
from cadenza.store import LeaseHolder, RunRow, RunStore
from tests.conftest import StoreFactory


def row(run_id: str) -> RunRow:
    return RunRow(run_id, "w", None, "running", {}, 1.0, 1.0)


def dead_process() -> LeaseHolder:
    """A holder on this host whose process has exited (and been reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    holder = LeaseHolder.for_this_process()
    return LeaseHolder(holder.token + "-dead", holder.host, child.pid, None)


async def test_a_document_round_trips(store: RunStore) -> None:
    """The document saved with a run reads back byte for byte; other runs have none."""
    store.begin_run(row("r"))
    store.save_document("r", b'{"version": 1}')
    await store.flush()
    assert await store.document("r") == b'{"version": 1}'
    assert await store.document("other") is None


async def test_one_live_holder_at_a_time(store: RunStore) -> None:
    """A lease is exclusive between live holders, re-entrant for its own, free once released."""
    mine, theirs = LeaseHolder.for_this_process(), LeaseHolder.for_this_process()
    await store.acquire_lease("r", mine)
    await store.acquire_lease("r", mine)
    with pytest.raises(LeaseHeld, match=f"process {os.getpid()}"):
        await store.acquire_lease("r", theirs)
    store.release_lease("r", mine)
    await store.flush()
    await store.acquire_lease("r", theirs)


async def test_a_dead_holder_loses_its_lease(store: RunStore) -> None:
    """After kill -9 nobody releases the lease: a holder whose process is gone is replaced."""
    await store.acquire_lease("r", dead_process())
    await store.acquire_lease("r", LeaseHolder.for_this_process())


async def test_forgetting_an_iteration_keeps_its_neighbours(store: RunStore) -> None:
    """forget_steps('loop.1') drops loop.1 and what is inside it, not loop.10 or loop.2."""
    store.begin_run(row("r"))
    done = StepRecord(status="completed")
    for address in ("loop.1", "loop.1.a", "loop.1[0]", "loop.10", "loop.10.a", "loop.2"):
        store.put_step("r", address, done)
    store.forget_steps("r", "loop.1")
    await store.flush()
    assert sorted(await store.steps("r")) == ["loop.10", "loop.10.a", "loop.2"]


async def test_deleting_a_run_leaves_no_trace(store: RunStore) -> None:
    """delete_runs removes the row, events, records, document and lease."""
    store.begin_run(row("gone"))
    store.begin_run(row("kept"))
    for run_id in ("gone", "kept"):
        store.append_event(Event(type="workflow_start", timestamp="t", run_id=run_id, seq=1))
        store.put_step(run_id, "a", StepRecord(status="completed"))
        store.save_document(run_id, b"{}")
    await store.delete_runs(["gone"])
    assert await store.get_run("gone") is None
    assert await store.events("gone") == []
    assert await store.steps("gone") == {}
    assert await store.document("gone") is None
    assert [r.run_id for r in await store.list_runs()] == ["kept"]
    assert len(await store.events("kept")) == 1
    assert await store.check() == []


async def test_two_stores_racing_for_one_lease_give_it_to_one(
    durable_store_factory: StoreFactory,
) -> None:
    """Two processes' stores claiming one run at once: exactly one wins, the other is told."""
    outcomes: list[str] = []

    async def claim(store: RunStore) -> None:
        try:
            await store.acquire_lease("r", LeaseHolder.for_this_process())
            outcomes.append("won")
        except LeaseHeld:
            outcomes.append("refused")

    async with durable_store_factory.opened(2) as (first, second):
        for _ in range(5):
            outcomes.clear()
            async with anyio.create_task_group() as group:
                group.start_soon(claim, first)
                group.start_soon(claim, second)
            assert sorted(outcomes) == ["refused", "won"]
            await first.delete_runs(["r"])  # frees the lease for the next round
