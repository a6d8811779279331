"""The SQLite store's writer thread: how writes reach the file, and how flushes return.

Writes are queued without waking the writer; a flush wakes it, and a write that
no flush follows is committed after a short linger. These tests hold the store
to what a caller sees of that: every flush returns with its writes readable,
across thousands of commits and many flushers at once, and a write nobody
flushes still reaches the file.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path

import anyio

from cadenza.protocols import Event
from cadenza.store import RunRow, SqliteRunStore
from tests._helpers import opened_store


def row(run_id: str) -> RunRow:
    return RunRow(run_id, "w", None, "running", {}, 1.0, 1.0)


def event(run_id: str, seq: int) -> Event:
    return Event(type="step_end", timestamp="t", run_id=run_id, seq=seq, step_id=f"s{seq}")


def committed_events(path: Path, run_id: str) -> int:
    """How many of the run's events another connection (another process) can read."""
    connection = sqlite3.connect(path)
    try:
        found = connection.execute(  # a row is a pack of seq..last_seq (or one event)
            "SELECT coalesce(sum(coalesce(last_seq, seq) - seq + 1), 0) FROM events"
            " WHERE run_id = ?",
            (run_id,),
        )
        return int(found.fetchone()[0])
    finally:
        connection.close()


async def until_committed(path: Path, run_id: str, count: int) -> None:
    """Returns once ``count`` of the run's events are committed (fails after 10 s).

    A reader in another process has nothing to wait on but the file: it looks again.
    """
    with anyio.fail_after(10):
        while committed_events(path, run_id) < count:  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def test_each_of_thousands_of_flushes_returns_after_its_own_write(tmp_path: Path) -> None:
    """A chain of steps, one commit each: every flush wakes its waiter, and never early."""
    async with opened_store(tmp_path / "runs.db") as store:
        store.begin_run(row("r"))
        for seq in range(1, 2001):
            store.append_event(event("r", seq))
            await store.flush("r")
            if seq % 500 == 0:
                assert [e.seq for e in await store.events("r", after_seq=seq - 1)] == [seq]
        assert len(await store.events("r")) == 2000


async def test_rounds_of_many_flushers_all_return(tmp_path: Path) -> None:
    """Fifty steps flushing at once, round after round: each round's flushes all return."""
    async with opened_store(tmp_path / "runs.db") as store:

        async def step(run_id: str, seq: int) -> None:
            store.append_event(event(run_id, seq))
            await store.flush(run_id)

        for n in range(50):
            store.begin_run(row(f"r{n}"))
        for seq in range(1, 41):
            async with anyio.create_task_group() as group:
                for n in range(50):
                    group.start_soon(step, f"r{n}", seq)
        for n in (0, 49):
            assert [e.seq for e in await store.events(f"r{n}")] == list(range(1, 41))


async def test_a_write_nobody_flushes_still_reaches_the_file(tmp_path: Path) -> None:
    """Events of a long step are committed as it goes, for readers in other processes."""
    path = tmp_path / "runs.db"
    async with opened_store(path) as store:
        store.begin_run(row("r"))
        store.append_event(event("r", 1))
        await until_committed(path, "r", 1)
        store.append_event(event("r", 2))  # and again, once the first linger is over
        await until_committed(path, "r", 2)


async def test_closing_commits_what_nobody_flushed(tmp_path: Path) -> None:
    """close() commits the queue: a reopened store has every write made before it."""
    path = tmp_path / "runs.db"
    store = SqliteRunStore(path)
    await store.open()
    store.begin_run(row("r"))
    for seq in range(1, 11):
        store.append_event(event("r", seq))
    await store.close()
    assert committed_events(path, "r") == 10


async def test_a_flush_from_another_event_loop_returns(tmp_path: Path) -> None:
    """A store opened on one loop can be flushed from a loop in another thread."""
    async with opened_store(tmp_path / "runs.db") as store:

        async def elsewhere() -> None:
            for seq in range(1, 51):
                store.append_event(event("r", seq))
                await store.flush("r")

        store.begin_run(row("r"))
        await anyio.to_thread.run_sync(asyncio.run, elsewhere())
        assert [e.seq for e in await store.events("r")] == list(range(1, 51))


async def test_a_store_made_with_bigger_pages_keeps_them_and_works(tmp_path: Path) -> None:
    """A store of an earlier version (4 KiB pages) is read and written as before."""
    path = tmp_path / "runs.db"
    older = sqlite3.connect(path)
    older.execute("PRAGMA page_size=4096")
    older.execute("PRAGMA journal_mode=WAL")
    older.execute("CREATE TABLE before_us (x)")
    older.close()
    async with opened_store(path) as store:
        store.begin_run(row("r"))
        for seq in range(1, 101):
            store.append_event(event("r", seq))
        await store.flush("r")
        assert [e.seq for e in await store.events("r")] == list(range(1, 101))
        assert await store.check() == []
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA page_size").fetchone()[0] == 4096
    check.close()


async def test_a_new_store_holds_big_bodies_across_pages(tmp_path: Path) -> None:
    """Bodies larger than a page (a long model answer) round-trip and pass the check."""
    async with opened_store(tmp_path / "runs.db") as store:
        store.begin_run(row("r"))
        text = "word " * 20_000  # 100 KB
        store.append_event(
            Event(type="step_end", timestamp="t", run_id="r", seq=1, data={"t": text})
        )
        await store.flush("r")
        [stored] = await store.events("r")
        assert stored.data == {"t": text}
        assert await store.check() == []


LONG_WRITE = """
import sys, time
from pathlib import Path
from cadenza.store.sqlite._schema import connect

other = connect(Path(sys.argv[1]))
other.execute("BEGIN IMMEDIATE")
other.execute("CREATE TABLE other (n INTEGER)")
print("writing", flush=True)
sys.stdin.readline()  # the store is asking for the lock now
time.sleep(5.5)  # a long write: longer than SQLite's busy timeout of 5 s
other.execute("COMMIT")
"""


async def test_a_flush_waits_out_another_process_writing_longer_than_5_seconds(
    tmp_path: Path,
) -> None:
    """Another process's long transaction (a migration, a bulk import) delays a flush but
    does not fail it: SQLite's busy handler gave up after 5 s with "database is locked",
    and the run stopped with StoreFailed."""
    path = tmp_path / "runs.db"
    async with opened_store(path) as store:
        store.begin_run(row("r"))
        await store.flush("r")
        async with await anyio.open_process([sys.executable, "-c", LONG_WRITE, str(path)]) as other:
            assert other.stdin is not None
            assert other.stdout is not None
            assert (await other.stdout.receive()).startswith(b"writing")
            store.append_event(event("r", 1))
            flushed = store.flush("r")
            await other.stdin.send(b"go\n")
            await flushed
        assert other.returncode == 0
        assert committed_events(path, "r") == 1
