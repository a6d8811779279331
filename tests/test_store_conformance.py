"""One conformance suite that every RunStore implementation passes.

The ``store`` fixture (tests/conftest.py) is each backend in turn: memory,
SQLite and PostgreSQL (a throwaway server, a fresh database per test; skipped
with the reason where PostgreSQL is not installed). ``durable_store_factory``
is the backends that outlive their process. Tests of one backend's own
machinery (SQLite's files, PostgreSQL's schema table) say so in their names.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from cadenza import StoreError
from cadenza.errors import CorruptRecord, LeaseHeld, LeaseLost, MessageRefused
from cadenza.protocols import CALL_BODY_LIMIT, CallKind, CallRecord, Event, RunResult, StepRecord
from cadenza.store import (
    WAITING_COMMAND_BYTES,
    CancelCommand,
    LeaseHolder,
    MessageCommand,
    QueueDepth,
    RunRow,
    RunStore,
    SqliteRunStore,
    SupervisorRow,
    WorkerLoad,
)
from tests.conftest import StoreFactory


def row(run_id: str, created_at: float = 1.0) -> RunRow:
    return RunRow(
        run_id=run_id,
        workflow="w",
        path=None,
        status="running",
        inputs={"k": [1, "two"]},
        created_at=created_at,
        updated_at=created_at,
    )


def event(run_id: str, seq: int) -> Event:
    return Event(type="step_end", timestamp="t", run_id=run_id, seq=seq, step_id=f"s{seq}")


async def test_a_run_round_trips(store: RunStore) -> None:
    """What is written and flushed reads back equal: row, events in order, step records."""
    store.begin_run(row("r1"))
    for seq in (1, 2, 3):
        store.append_event(event("r1", seq))
    store.put_step("r1", "a", StepRecord(status="running", attempts=1))
    done = StepRecord(status="completed", content="x", result={"n": 1}, attempts=1)
    store.put_step("r1", "a", done)
    await store.flush()
    assert (await store.get_run("r1")) == row("r1")
    assert [e.seq for e in await store.events("r1")] == [1, 2, 3]
    assert [e.seq for e in await store.events("r1", after_seq=2)] == [3]
    assert await store.steps("r1") == {"a": done}


async def test_events_and_records_read_a_page_at_a_time(store: RunStore) -> None:
    """A page of events is the first ``limit`` after a seq, wherever the store's rows
    begin (events flushed together and apart); pages of records, each after the last
    address of the one before, hold every address once, and a short page is the last."""
    store.begin_run(row("r"))
    store.begin_run(row("other"))
    for seq in range(1, 8):
        store.append_event(event("r", seq))
    await store.flush()
    for seq in range(8, 12):  # a batch of its own, then one at a time
        store.append_event(event("r", seq))
    await store.flush()
    for seq in range(12, 15):
        store.append_event(event("r", seq))
        await store.flush()
    store.append_event(event("other", 1))
    records = {f"fan[{i}]": StepRecord(status="completed", attempts=i) for i in range(11)}
    for address, record in records.items():
        store.put_step("r", address, record)
    store.put_step("other", "fan[0]", StepRecord(status="failed"))
    await store.flush()
    every = await store.events("r")
    assert [e.seq for e in every] == list(range(1, 15))
    assert all(e.run_id == "r" for e in every)
    for after in range(15):
        for limit in (1, 3, 5, 20):
            events = await store.events("r", after_seq=after, limit=limit)
            assert events == every[after : after + limit]
    paged: dict[str, StepRecord] = {}
    after_address: str | None = None
    pages = 0
    while True:
        page = await store.steps("r", after=after_address, limit=4)
        pages += 1
        assert not set(page) & set(paged)
        paged.update(page)
        if len(page) < 4:
            break
        after_address = list(page)[-1]
    assert paged == records
    assert pages == 3


async def test_ending_a_run_keeps_its_result(store: RunStore) -> None:
    """end_run sets status and result; list_runs puts the newest first."""
    store.begin_run(row("old", 1.0))
    store.begin_run(row("new", 2.0))
    result = RunResult(run_id="old", workflow="w", status="completed", output={"a": [1]})
    store.end_run("old", "completed", result)
    await store.flush()
    stored = await store.get_run("old")
    assert stored is not None
    assert stored.status == "completed"
    assert stored.result == result
    assert [r.run_id for r in await store.list_runs()] == ["new", "old"]
    assert await store.get_run("missing") is None


async def test_a_fork_keeps_its_lineage_and_its_parent_lists_its_forks(store: RunStore) -> None:
    """A run row's parent and address read back; `forks` is the children, oldest first."""
    store.begin_run(row("parent", 1.0))
    later = msgspec.structs.replace(
        row("later", 3.0), parent_run_id="parent", parent_address="review.2.write"
    )
    store.begin_run(later)
    store.begin_run(msgspec.structs.replace(row("sooner", 2.0), parent_run_id="parent"))
    store.begin_run(msgspec.structs.replace(row("grandchild", 4.0), parent_run_id="later"))
    store.end_run("later", "completed", None)  # ending a run keeps its lineage
    await store.flush()
    stored = await store.get_run("later")
    assert stored is not None
    assert (stored.parent_run_id, stored.parent_address) == ("parent", "review.2.write")
    assert [r.run_id for r in await store.forks("parent")] == ["sooner", "later"]
    assert [r.run_id for r in await store.forks("later")] == ["grandchild"]
    assert await store.forks("grandchild") == []
    parent = await store.get_run("parent")
    assert parent is not None
    assert (parent.parent_run_id, parent.parent_address) == (None, None)


async def test_a_durable_store_keeps_what_was_flushed_across_reopen(
    durable_store_factory: StoreFactory,
) -> None:
    """After flush, a fresh store on the same file or database sees everything."""
    first = durable_store_factory()
    await first.open()
    first.begin_run(row("r1"))
    first.append_event(event("r1", 1))
    await first.flush()
    await first.close()
    second = durable_store_factory()
    await second.open()
    try:
        assert (await second.get_run("r1")) == row("r1")
        assert len(await second.events("r1")) == 1
    finally:
        await second.close()


async def test_a_sqlite_store_is_in_wal_mode(tmp_path: Path) -> None:
    """The SQLite file is in WAL mode (a reader never waits for the writer)."""
    store = SqliteRunStore(tmp_path / "runs.db")
    await store.open()
    await store.close()
    connection = sqlite3.connect(tmp_path / "runs.db")
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    connection.close()


async def test_a_newer_sqlite_store_is_refused(tmp_path: Path) -> None:
    """A store with a newer schema version is refused with a clear StoreError."""
    path = tmp_path / "runs.db"
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA user_version = 99")
    connection.close()
    with pytest.raises(StoreError, match="schema version 99"):
        await SqliteRunStore(path).open()


async def test_a_sqlite_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    """A garbage file in place of the store is a StoreError, not a crash."""
    path = tmp_path / "runs.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=r"runs\.db.*not a database"):
        await SqliteRunStore(path).open()


async def test_waiting_on_a_closed_store_fails_at_once(
    durable_store_factory: StoreFactory,
) -> None:
    """flush() after close() is a StoreError, not a wait that never ends."""
    store = durable_store_factory()
    await store.open()
    await store.close()
    with pytest.raises(StoreError, match="is closed"):
        await store.flush()


async def test_one_batch_keeps_the_order_of_each_table(store: RunStore) -> None:
    """Writes flushed together land as if made one by one: the last record of an address
    stands, a removal applies to what was queued before it and not to what came after."""
    store.begin_run(row("r"))
    store.put_step("r", "loop.1", StepRecord(status="running", attempts=1))
    store.append_event(event("r", 1))
    store.put_step("r", "loop.1.a", StepRecord(status="completed", attempts=1))
    store.put_step("r", "loop.1", StepRecord(status="failed", attempts=1))
    store.append_event(event("r", 2))
    store.forget_steps("r", "loop.1")
    store.put_step("r", "loop.2", StepRecord(status="running", attempts=1))
    again = StepRecord(status="running", attempts=2)
    store.put_step("r", "loop.1", again)
    last = StepRecord(status="completed", attempts=1)
    store.put_step("r", "loop.2", last)
    store.end_run("r", "completed", None)
    await store.flush()
    assert await store.steps("r") == {"loop.1": again, "loop.2": last}
    assert [e.seq for e in await store.events("r")] == [1, 2]
    stored = await store.get_run("r")
    assert stored is not None
    assert stored.status == "completed"


async def test_flushes_of_one_batch_all_return(store: RunStore) -> None:
    """Many steps flushing at once are all woken, each after its own writes are durable."""

    async def step(n: int) -> None:
        store.append_event(event("r", n))
        await store.flush()

    store.begin_run(row("r"))
    async with anyio.create_task_group() as group:
        for n in range(1, 51):
            group.start_soon(step, n)
    assert [e.seq for e in await store.events("r")] == list(range(1, 51))


async def test_sqlite_files_copied_while_open_hold_what_was_flushed(tmp_path: Path) -> None:
    """The database and its WAL as a crash leaves them hold exactly what was flushed."""
    path = tmp_path / "runs.db"
    store = SqliteRunStore(path)
    await store.open()
    try:
        wal = tmp_path / "runs.db-wal"
        store.begin_run(row("r"))
        for seq in (1, 2, 3):
            store.append_event(event("r", seq))
        await store.flush()
        crashed = tmp_path / "crashed"
        crashed.mkdir()
        shutil.copy(path, crashed / "runs.db")
        shutil.copy(wal, crashed / "runs.db-wal")
    finally:
        await store.close()
    assert not wal.exists()  # SQLite checkpoints and removes it when the store closes
    for where in (crashed / "runs.db", path):
        reopened = SqliteRunStore(where)
        await reopened.open()
        try:
            assert [e.seq for e in await reopened.events("r")] == [1, 2, 3]
            assert await reopened.check() == []
        finally:
            await reopened.close()


# -- leases: expiry, renewal, fencing --------------------------------------------------
# A holder of this very process is alive, so only expiry (or a release) frees its lease.
# ttl=0 makes a lease that has expired by the time anyone looks: no sleeping.


async def test_each_new_holder_of_a_lease_gets_a_higher_fence(store: RunStore) -> None:
    """The same holder again keeps its fence; a release keeps the row's fence for the next."""
    a, b = LeaseHolder.for_this_process(), LeaseHolder.for_this_process()
    first = await store.acquire_lease("r", a)
    assert first.fence == 1
    assert (await store.acquire_lease("r", a)).fence == 1
    with pytest.raises(LeaseHeld):
        await store.acquire_lease("r", b)
    store.release_lease("r", a)
    await store.flush()
    assert (await store.acquire_lease("r", b)).fence == 2


async def test_an_expired_lease_is_anyones_and_its_holder_cannot_renew_it(
    store: RunStore,
) -> None:
    """A lease not renewed in time is taken (fence + 1); its former holder's renewal fails."""
    a, b = LeaseHolder.for_this_process(), LeaseHolder.for_this_process()
    stale = await store.acquire_lease("r", a, ttl=0.0)
    taken = await store.acquire_lease("r", b, ttl=30.0)
    assert taken.fence == stale.fence + 1
    with pytest.raises(LeaseLost, match="no longer holds the lease of run 'r'"):
        await store.renew_lease(stale)
    await store.renew_lease(taken)
    with pytest.raises(LeaseHeld):
        await store.acquire_lease("r", a)


async def test_a_renewed_lease_is_not_taken(store: RunStore) -> None:
    """Renewal pushes the expiry out: a lease renewed with a long ttl is held."""
    a, b = LeaseHolder.for_this_process(), LeaseHolder.for_this_process()
    lease = await store.acquire_lease("r", a, ttl=0.0)
    lease.ttl = 30.0
    await store.renew_lease(lease)
    with pytest.raises(LeaseHeld):
        await store.acquire_lease("r", b)


async def test_orphaned_runs_are_running_runs_nobody_holds(store: RunStore) -> None:
    """Running runs with no lease, a released one or an expired one; not held or ended ones."""
    holder = LeaseHolder.for_this_process()
    for n, run_id in enumerate(("free", "done", "held", "expired", "released")):
        store.begin_run(row(run_id, created_at=float(n)))
    store.end_run("done", "completed", None)
    await store.acquire_lease("held", holder, ttl=30.0)
    await store.acquire_lease("expired", holder, ttl=0.0)
    await store.acquire_lease("released", holder, ttl=30.0)
    store.release_lease("released", holder)
    await store.flush()
    orphans = await store.orphaned_runs()
    assert [r.run_id for r in orphans] == ["free", "expired", "released"]
    assert [r.run_id for r in await store.orphaned_runs(limit=1)] == ["free"]


async def test_a_stale_writers_batch_is_refused_whole_and_others_commit(
    durable_store_factory: StoreFactory,
) -> None:
    """Two processes' stores on one database: once B took the run over, A's writes of it
    are refused with LeaseLost and none of them is recorded; A's other runs still commit."""
    async with durable_store_factory.opened(2) as (a_store, b_store):
        a, b = LeaseHolder.for_this_process(), LeaseHolder.for_this_process()
        await a_store.acquire_lease("r", a, ttl=0.0)
        a_store.begin_run(row("r"))
        a_store.put_step("r", "one", StepRecord(status="completed", attempts=1))
        await a_store.flush("r")  # A still holds it: nobody took it yet

        await b_store.acquire_lease("r", b, ttl=30.0)
        a_store.put_step("r", "two", StepRecord(status="completed", attempts=1))
        a_store.append_event(event("r", 7))
        a_store.begin_run(row("other"))  # another run of A's, in the same batch
        with pytest.raises(LeaseLost):
            await a_store.flush("r")
        await a_store.flush()  # unscoped: the store itself is fine
        a_store.put_step("r", "three", StepRecord(status="completed", attempts=1))
        a_store.end_run("r", "failed", None)
        with pytest.raises(LeaseLost):  # and it stays refused
            await a_store.flush("r")

        assert set(await b_store.steps("r")) == {"one"}
        assert await b_store.events("r") == []
        stored = await b_store.get_run("r")
        assert stored is not None
        assert stored.status == "running"
        assert await b_store.get_run("other") is not None
        b_store.put_step("r", "two", StepRecord(status="completed", attempts=2))
        await b_store.flush("r")
        assert set(await b_store.steps("r")) == {"one", "two"}


async def test_a_lease_taken_by_two_at_once_goes_to_one(
    durable_store_factory: StoreFactory,
) -> None:
    """Claimants racing for an expired lease from separate stores: exactly one wins."""
    async with durable_store_factory.opened(4) as stores:
        await stores[0].acquire_lease("r", LeaseHolder.for_this_process(), ttl=0.0)
        won: list[int] = []

        async def claim(each: RunStore) -> None:
            with contextlib.suppress(LeaseHeld):
                won.append((await each.acquire_lease("r", LeaseHolder.for_this_process())).fence)

        async with anyio.create_task_group() as group:
            for each in stores[1:]:
                group.start_soon(claim, each)
        assert won == [2]


def queued(run_id: str, created_at: float, priority: int | None = None) -> RunRow:
    return msgspec.structs.replace(row(run_id, created_at), status="queued", priority=priority)


async def test_queued_runs_are_taken_by_priority_then_age_each_once(store: RunStore) -> None:
    """Highest priority first (None as 0), then the oldest; a taken run is not offered
    again while its lease holds, nor is a run of another status; an expired lease of a
    run still queued makes it free again, under a higher fence."""
    for each in (
        queued("old", 1.0),
        queued("urgent", 3.0, 5),
        queued("new", 2.0),
        queued("late", 0.5, -1),
        row("running", 0.1),
    ):
        store.begin_run(each)
    await store.flush()
    holders = [LeaseHolder.for_this_process() for _ in range(5)]
    taken = [await store.take_queued(holder, ttl=30.0) for holder in holders[:4]]
    assert [t[0].run_id for t in taken if t is not None] == ["urgent", "old", "new", "late"]
    assert [t[0].priority for t in taken if t is not None] == [5, None, None, -1]
    assert await store.take_queued(holders[4]) is None
    first = taken[0]
    assert first is not None
    with pytest.raises(LeaseHeld):
        await store.acquire_lease("urgent", holders[4])
    store.begin_run(queued("dropped", 4.0))
    await store.flush()
    stale = await store.take_queued(holders[4], ttl=0.0)  # its taker died before starting it
    assert stale is not None
    again = await store.take_queued(LeaseHolder.for_this_process(), ttl=30.0)
    assert again is not None
    assert again[0].run_id == "dropped"
    assert again[1].fence == stale[1].fence + 1


async def test_the_queue_depth_counts_queued_runs_by_priority_with_the_oldest_age(
    store: RunStore,
) -> None:
    """Only runs of status ``queued`` count, taken or not (a taken one has not started);
    None counts as priority 0; the age is the oldest's wait, on this machine's clock."""
    assert await store.queue_depth() == QueueDepth()
    now = time.time()
    for each in (
        queued("old", now - 30.0),
        queued("urgent", now - 5.0, 5),
        queued("zero", now - 10.0, 0),
        queued("late", now - 20.0, -1),
        row("running", now - 100.0),
        msgspec.structs.replace(queued("ended", now - 200.0), status="completed"),
    ):
        store.begin_run(each)
    await store.flush()
    assert await store.take_queued(LeaseHolder.for_this_process(), ttl=30.0) is not None
    depth = await store.queue_depth()
    assert depth.runs == 4
    assert list(depth.by_priority.items()) == [(5, 1), (0, 2), (-1, 1)]
    assert depth.oldest_at == pytest.approx(now - 30.0)
    assert 30.0 <= depth.oldest_age < 30.0 + 60.0
    store.end_run("old", "cancelled", None)
    await store.flush()
    after = await store.queue_depth()
    assert (after.runs, after.by_priority) == (3, {5: 1, 0: 1, -1: 1})
    assert after.oldest_at == pytest.approx(now - 20.0)


async def test_a_queued_run_raced_for_by_many_goes_to_one(
    durable_store_factory: StoreFactory,
) -> None:
    """Takers on separate stores (as separate processes) racing for few queued runs:
    each run goes to exactly one."""
    async with durable_store_factory.opened(6) as stores:
        for n in range(3):
            stores[0].begin_run(queued(f"q{n}", float(n)))
        await stores[0].flush()
        won: list[str] = []

        async def take(each: RunStore) -> None:
            while (taken := await each.take_queued(LeaseHolder.for_this_process())) is not None:
                won.append(taken[0].run_id)

        async with anyio.create_task_group() as group:
            for each in stores[1:]:
                group.start_soon(take, each)
        assert sorted(won) == ["q0", "q1", "q2"]


async def test_commands_are_taken_once_by_run_in_the_order_sent(store: RunStore) -> None:
    """A command waits for its run's owner; taking removes it; other runs' stay."""
    store.begin_run(row("a"))
    store.begin_run(row("b"))
    await store.flush()
    await store.send_command("a", MessageCommand("writer", "first"))
    await store.send_command("b", CancelCommand("not yours"))
    await store.send_command("a", CancelCommand("enough"))
    assert await store.take_commands([]) == []
    assert await store.take_commands(["a", "missing"]) == [
        ("a", MessageCommand("writer", "first")),
        ("a", CancelCommand("enough")),
    ]
    assert await store.take_commands(["a"]) == []
    await store.delete_runs(["b"])
    assert await store.take_commands(["b"]) == []


async def test_messages_waiting_for_a_run_are_bounded_and_a_refused_one_leaves_no_trace(
    store: RunStore,
) -> None:
    """Past WAITING_COMMAND_BYTES a message is refused and not kept; a cancel still is."""
    text = "m" * (WAITING_COMMAND_BYTES // 4 - 1024)  # four fit, with their JSON
    for n in range(4):
        await store.send_command("a", MessageCommand(f"t{n}", text))
    with pytest.raises(MessageRefused, match=r"run 'a' refuses the message of \d+ bytes"):
        await store.send_command("a", MessageCommand("t4", text))
    await store.send_command("b", MessageCommand("t0", text))  # another run's bound is its own
    await store.send_command("a", CancelCommand("enough"))
    taken = await store.take_commands(["a"])
    assert [getattr(c, "target", None) for _, c in taken] == ["t0", "t1", "t2", "t3", None]
    await store.send_command("a", MessageCommand("t5", text))  # taken: room again
    assert [c for _, c in await store.take_commands(["a"])] == [MessageCommand("t5", text)]


async def test_sqlite_keeps_the_bound_exactly_when_processes_post_at_once(
    tmp_path: Path,
) -> None:
    """Two stores on one file post 32 messages at once: exactly the four that fit are kept."""
    stores = [SqliteRunStore(tmp_path / "runs.db") for _ in range(2)]
    for each in stores:
        await each.open()
    text = "m" * (WAITING_COMMAND_BYTES // 4 - 1024)
    kept: list[str] = []

    async def post(store: RunStore, target: str) -> None:
        with contextlib.suppress(MessageRefused):
            await store.send_command("a", MessageCommand(target, text))
            kept.append(target)

    try:
        async with anyio.create_task_group() as group:
            for n in range(32):
                group.start_soon(post, stores[n % 2], f"t{n}")
        taken = await stores[0].take_commands(["a"])
    finally:
        for each in stores:
            await each.close()
    assert len(kept) == 4
    assert sorted(getattr(c, "target", "") for _, c in taken) == sorted(kept)


async def test_a_command_sent_through_one_store_is_taken_through_another(
    durable_store_factory: StoreFactory,
) -> None:
    """Two processes' stores on one file or database: what one sends, the other takes."""
    async with durable_store_factory.opened(2) as (sender, owner):
        await sender.send_command("r", MessageCommand("critic", "look again", kind="request"))
        assert await owner.take_commands(["r"]) == [
            ("r", MessageCommand("critic", "look again", kind="request"))
        ]
        assert await sender.take_commands(["r"]) == []


async def test_answered_runs_are_waiting_runs_whose_newest_event_is_an_answer(
    store: RunStore,
) -> None:
    """Waiting and answered: listed; waiting unanswered, answered then resumed: not."""
    for n, run_id in enumerate(("answered", "unanswered", "resumed", "running")):
        store.begin_run(row(run_id, created_at=float(n)))
        store.append_event(Event(type="workflow_end", timestamp="t", run_id=run_id, seq=1))
        if run_id != "running":
            store.end_run(run_id, "waiting", None)
    for run_id in ("answered", "resumed", "running"):
        store.append_event(Event(type="signal_received", timestamp="t", run_id=run_id, seq=2))
    store.append_event(Event(type="workflow_start", timestamp="t", run_id="resumed", seq=3))
    await store.flush()
    assert [r.run_id for r in await store.answered_runs()] == ["answered"]


# -- the calls inside a step: what a resume continues from ------------------------------


def call(address: str, seq: int, body: str = '{"reply": "ok"}', *, attempt: int = 1) -> CallRecord:
    kind: CallKind = "model" if seq % 2 else "tool"
    return CallRecord(
        address=address, attempt=attempt, seq=seq, kind=kind, digest=f"{seq:064x}", body=body
    )


async def sql(factory: StoreFactory, statement: str) -> list[tuple[Any, ...]]:
    """``statement`` run on the factory's database through a connection of its own, its
    tables named without PostgreSQL's ``cadenza_`` prefix (``{calls}``, ``{blobs}``)."""
    if factory.kind == "postgres":
        import asyncpg

        connection = await asyncpg.connect(factory.spec)
        try:
            names = {table: f"cadenza_{table}" for table in ("calls", "blobs")}
            return [tuple(found) for found in await connection.fetch(statement.format(**names))]
        finally:
            await connection.close()
    assert factory.spec is not None
    with contextlib.closing(sqlite3.connect(factory.spec)) as connection, connection:
        return connection.execute(statement.format(calls="calls", blobs="blobs")).fetchall()


async def test_calls_read_back_in_order_and_a_call_recorded_again_replaces_it(
    store: RunStore,
) -> None:
    """Calls come back by address, attempt and seq, whatever order they were recorded in;
    the same address, attempt and seq again replaces the call; an address picks its own."""
    recorded = [call("b", 2), call("a", 1, attempt=2), call("b", 1), call("a", 1), call("a", 2)]
    for each in recorded:
        store.put_call("r", each)
    store.put_call("other", call("a", 1))
    again = call("b", 2, '{"reply": "the second time"}')
    store.put_call("r", again)
    await store.flush()
    assert await store.calls("r") == [
        call("a", 1),
        call("a", 2),
        call("a", 1, attempt=2),
        call("b", 1),
        again,
    ]
    assert await store.calls("r", "b") == [call("b", 1), again]
    assert await store.calls("r", "c") == []
    assert await store.calls("missing") == []


async def test_forgetting_steps_forgets_their_calls_and_only_theirs(store: RunStore) -> None:
    """``loop.1`` holds ``loop.1``, ``loop.1.a`` and ``loop.1[0]``, not ``loop.10.a``."""
    addresses = ["loop.1", "loop.1.a", "loop.1[0]", "loop.10.a", "loop.1a", "loop.2.a", "loop"]
    for address in addresses:
        store.put_call("r", call(address, 1))
    store.put_call("other", call("loop.1.a", 1))
    store.forget_steps("r", "loop.1")
    await store.flush()
    assert [c.address for c in await store.calls("r")] == [
        "loop",
        "loop.10.a",
        "loop.1a",
        "loop.2.a",
    ]
    assert await store.calls("other") == [call("loop.1.a", 1)]


async def test_deleting_a_run_deletes_its_calls(store: RunStore) -> None:
    """delete_runs takes the calls with the run; another run's stay."""
    for run_id in ("gone", "kept"):
        store.begin_run(row(run_id))
        store.put_call(run_id, call("a", 1))
        store.put_call(run_id, call("a", 2, f'"{"x" * CALL_BODY_LIMIT}"'))
    await store.flush()
    await store.delete_runs(["gone"])
    assert await store.calls("gone") == []
    assert [c.seq for c in await store.calls("kept")] == [1, 2]


async def test_a_large_body_is_kept_once_per_run_however_many_calls_answered_it(
    store_factory: StoreFactory,
) -> None:
    """Five calls answering the same 3 MiB: each reads it back, the database holds it once
    (per run); forgetting or deleting the last call that names it removes it."""
    large = '"' + "x" * (3 << 20) + '"'
    other = '"' + "y" * (CALL_BODY_LIMIT - 2) + '"'  # exactly the limit: kept in its row
    assert len(other) == CALL_BODY_LIMIT
    async with store_factory.opened(1) as (store,):
        for seq in range(1, 6):
            store.put_call("r", call("loop.1.a", seq, large))
        store.put_call("r", call("loop.2.a", 1, large))
        store.put_call("r", call("loop.2.a", 2, other))
        store.put_call("s", call("a", 1, large))
        await store.flush()
        calls = await store.calls("r")
        assert [c.body for c in calls] == [large] * 6 + [other]
        assert await store.calls("s") == [call("a", 1, large)]
        assert await store.check() == []
        if store_factory.kind != "memory":  # memory shares the text it was given
            kept = await sql(store_factory, "SELECT run_id, length(body) FROM {blobs}")
            assert sorted(kept) == [("r", len(large)), ("s", len(large))]
            inline = await sql(store_factory, "SELECT sum(length(body)) FROM {calls}")
            assert inline == [(len(other),)]
        store.forget_steps("r", "loop.1")
        await store.flush()
        assert [c.body for c in await store.calls("r")] == [large, other]
        store.forget_steps("r", "loop.2")
        await store.delete_runs(["s"])
        assert await store.calls("r") == await store.calls("s") == []
        if store_factory.kind != "memory":
            assert await sql(store_factory, "SELECT count(*) FROM {blobs}") == [(0,)]


async def test_a_large_body_survives_being_forgotten_and_recorded_again_in_one_batch(
    store: RunStore,
) -> None:
    """Writes flushed together land as if made one by one: a body that was forgotten and
    then answered again is still there for the call that names it."""
    large = '"' + "z" * (CALL_BODY_LIMIT + 1) + '"'
    store.put_call("r", call("loop.1.a", 1, large))
    store.forget_steps("r", "loop.1")
    store.put_call("r", call("loop.2.a", 1, large))
    store.forget_steps("r", "loop.3")
    await store.flush()
    assert await store.calls("r") == [call("loop.2.a", 1, large)]
    assert await store.check() == []


async def test_a_stale_writers_calls_are_refused(durable_store_factory: StoreFactory) -> None:
    """Once B took the run over, A's calls of it are refused with LeaseLost and none is
    recorded, large or small; B's are."""
    large = '"' + "x" * (CALL_BODY_LIMIT + 1) + '"'
    async with durable_store_factory.opened(2) as (a_store, b_store):
        a, b = LeaseHolder.for_this_process(), LeaseHolder.for_this_process()
        await a_store.acquire_lease("r", a, ttl=0.0)
        a_store.put_call("r", call("one", 1))
        await a_store.flush("r")

        await b_store.acquire_lease("r", b, ttl=30.0)
        a_store.put_call("r", call("one", 2, large))
        a_store.put_call("r", call("one", 1, '{"reply": "changed"}'))
        a_store.forget_steps("r", "one")
        with pytest.raises(LeaseLost):
            await a_store.flush("r")
        assert await b_store.calls("r") == [call("one", 1)]
        assert await sql(durable_store_factory, "SELECT count(*) FROM {blobs}") == [(0,)]
        b_store.put_call("r", call("one", 2, large))
        await b_store.flush("r")
        assert await a_store.calls("r") == [call("one", 1), call("one", 2, large)]


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (
            "UPDATE {calls} SET body = replace(body, 'ok', 'no') "
            "WHERE run_id = 'r' AND address = 'a'",
            "run 'r', calls 'a' attempt 1 seq 1: the record does not match its checksum",
        ),
        (
            "UPDATE {calls} SET kind = 'tool' WHERE run_id = 'r' AND address = 'a'",
            "run 'r', calls 'a' attempt 1 seq 1: the record does not match its checksum",
        ),
        (
            "UPDATE {calls} SET blob = 'made up' WHERE run_id = 'r' AND address = 'a'",
            "run 'r', calls 'a' attempt 1 seq 1: the record contradicts the columns",
        ),
        (
            "UPDATE {blobs} SET body = replace(body, 'xx', 'xy')",
            "run 'r', blobs '{blob}': the record does not match its checksum",
        ),
        (
            "DELETE FROM {blobs}",
            "run 'r', calls 'b' attempt 1 seq 2: its body (blob '{blob}') is missing",
        ),
    ],
)
async def test_a_damaged_call_is_reported_by_check_and_refused_when_read(
    durable_store_factory: StoreFactory, damage: str, said: str
) -> None:
    """A call or a blob altered, inconsistent or gone: check() names it, calls() refuses."""
    large = '"' + "x" * (CALL_BODY_LIMIT + 1) + '"'
    async with durable_store_factory.opened(1) as (store,):
        store.put_call("r", call("a", 1))
        store.put_call("r", call("b", 2, large))
        store.put_call("s", call("a", 1))  # another run's calls are not this damage
        await store.flush()
        assert await store.check() == []
        [(blob,)] = await sql(durable_store_factory, "SELECT digest FROM {blobs}")
        await sql(durable_store_factory, damage.replace("{blob}", blob))
        said = said.replace("{blob}", blob)
        problems = await store.check()
        assert [problem for problem in problems if said in problem] == problems
        assert len(problems) == 1
        with pytest.raises(CorruptRecord, match=re.escape(said)):
            await store.calls("r")
        assert await store.calls("s") == [call("a", 1)]


async def test_the_roll_of_supervisors_keeps_the_live_and_forgets_the_dead(
    store_factory: StoreFactory,
) -> None:
    """A beat makes a supervisor live for its ttl (replacing its row); one whose ttl
    passed without a beat drops out of the roll, and a forgotten one at once; another
    store object on the same store sees the same roll."""
    async with store_factory.opened(2) as (one, other):
        alive = SupervisorRow("alive", "host-a", 11, "tcp://10.0.0.1:5555", 50, 3, 7, 2)
        dying = SupervisorRow("dying", "host-b", 12)
        await one.beat_supervisor(alive, ttl=60.0)
        await one.beat_supervisor(dying, ttl=60.0)
        await one.beat_supervisor(SupervisorRow("leaving", "host-c", 13), ttl=60.0)
        listed = await one.live_supervisors()
        assert [row.supervisor_id for row in listed] == ["alive", "dying", "leaving"]
        if store_factory.kind != "memory":  # a memory store is one process's own
            assert await other.live_supervisors() == listed
        first = listed[0]
        assert (first.host, first.pid, first.workers, first.capacity) == (
            "host-a",
            11,
            "tcp://10.0.0.1:5555",
            50,
        )
        assert (first.runs, first.waiting, first.running) == (3, 7, 2)
        assert first.expires_at - first.seen_at == pytest.approx(60.0, abs=1.0)
        await one.beat_supervisor(dying, ttl=0.0)  # its last beat, and its ttl is over
        busier = msgspec.structs.replace(alive, runs=4, waiting=0)
        await one.beat_supervisor(busier, ttl=60.0)  # the same supervisor: its row replaced
        await one.forget_supervisor("leaving")
        [kept] = await one.live_supervisors()
        assert kept.supervisor_id == "alive"
        assert (kept.runs, kept.waiting) == (4, 0)
        assert kept.pool == ()


async def test_a_supervisors_workers_and_their_load_ride_on_its_row(
    store_factory: StoreFactory,
) -> None:
    """The workers a supervisor beats with read back in order, from another store object
    too; the next beat replaces them (a worker gone, another come)."""
    async with store_factory.opened(2) as (one, other):
        pool = (WorkerLoad("w1", 8, 3), WorkerLoad("w-2 é", 1, 0))
        await one.beat_supervisor(SupervisorRow("s", "h", 1, "tcp://h:1", pool=pool), ttl=60)
        readers = [one] if store_factory.kind == "memory" else [one, other]
        for reader in readers:
            [seen] = await reader.live_supervisors()
            assert seen.pool == pool
        later = (WorkerLoad("w3", 2, 2),)
        await one.beat_supervisor(SupervisorRow("s", "h", 1, "tcp://h:1", pool=later), ttl=60)
        [seen] = await readers[-1].live_supervisors()
        assert seen.pool == later
