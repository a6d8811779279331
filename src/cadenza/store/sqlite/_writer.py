"""The SQLite store's writer: one thread, group commit, a failed batch fails its runs.

Writes are queued as (`Statement`, parameters) and never wait. The writer
thread sleeps until a `GroupWriter.flush` wakes it, then takes everything queued
so far, writes it in one transaction and commits once, and wakes every flush
whose barrier was in that batch: steps that finish together share one fsync,
and each still waits for its own durability. Writes do not wake the writer: a
step's events and record then go in one commit with its flush, for one thread
switch each way, where waking at the first write committed a step in two
fsyncs whenever the writer got there before the flush. A write that no flush
follows within `LINGER` seconds is committed by itself. The writer wakes the
loop that opened the store through a file that loop watches (`_Doorbell`: one
write, one read per commit), other loops with ``call_soon_threadsafe``.

A batch is written table by table, in queue order within each table, so that
the rows of one statement go to SQLite in as few calls as possible (one
``executemany`` holds the GIL once, not once per row, so a burst of events does
not starve the event loop). Tables have no triggers or foreign keys, so
statements on different tables commute inside the transaction. A row of an
upsert (`Statement.key`) that a later row of the same run replaces (a step's
``running`` record, then its outcome) is not written at all. A batch that holds
only barriers writes nothing: everything queued before them was committed by
an earlier batch.

Writes of a run whose lease this store holds carry that `Lease`. The batch's
transaction begins ``IMMEDIATE`` (the file's write lock, so nobody takes a lease
between the check and the commit) and reads each such run's fence once: the
writes of a run whose fence changed are left out and its lease is marked lost
(`LeaseLost` at its next flush); the other runs' writes commit as usual. That
is one indexed read per run per batch, not one per row.

A write whose effect depends on what the table holds (an ``INSERT ... SELECT
... WHERE`` under a bound, `GroupWriter.put_counted`) is run by itself, after
the batch's other writes, and hands back how many rows it changed: the bound
and the insert are one statement in the batch's transaction, so no other
writer of the file gets between them.

The write lock is asked for by polling, not by SQLite's busy handler. That
handler sleeps up to 100 ms between tries, and a writer of another process
that commits back to back (a replica posting a flood of messages) holds the
lock for all but a few hundred microseconds between its transactions: the
sleeper missed every gap, and the run it was recording failed with "database
is locked" after its 5 s. The writer tries every millisecond or two instead
(`_begin`), for up to `LOCK_WAIT` seconds.

A failed commit (the disk is full, the file locked past `LOCK_WAIT`)
fails its batch, not the store: each run with writes in it has its lease
marked failed (`cadenza.store.lease_failed`), so it stops and gives its lease
back (its flushes raise `StoreFailed`), and a flush of no run in that batch
raises `StoreError`. Nothing of the batch is stored, and the next batch is
tried anew: a run that can no longer be recorded must not go on as if it
were, and the others need not stop with it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import queue
import random
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import anyio

from cadenza._failpoints import failpoint
from cadenza.errors import StoreError
from cadenza.store._batch import queue_run
from cadenza.store._lease import Lease, lease_failed, lease_lost

from ._schema import connect

__all__ = ["GroupWriter", "Statement"]


class Statement(NamedTuple):
    """One SQL statement the writer runs, and what it needs to know to batch it.

    Attributes:
        sql: The statement, with ``?`` parameters.
        table: The one table it writes.
        key: For an ``INSERT OR REPLACE``: how many leading parameters are the
            primary key (a later row with the same key replaces the row); else 0.
        pack: Makes the rows written of a batch's rows queued with it (the events'
            packs, ``_records.pack_events``); None: each queued row is written.
    """

    sql: str
    table: str
    key: int = 0
    pack: Callable[[list[tuple[Any, ...]]], list[tuple[Any, ...]]] | None = None


class _Counted(NamedTuple):
    """A write run by itself, whose changed row count is appended to ``changed``."""

    statement: Statement
    parameters: tuple[Any, ...]
    changed: list[int]


class _Barrier(NamedTuple):
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[str | None]  # resolved with why its batch failed (None: committed)
    lease: Lease | None  # the lease of the run whose flush this is


_Woken = list[tuple["asyncio.Future[str | None]", str | None]]


class _Doorbell:
    """How the writer wakes the event loop that opened the store: one file it watches.

    An eventfd (a pipe where there is none) that the loop watches with
    ``add_reader``. Each commit adds its flushes' futures to a deque and writes
    the file once; the loop reads it once and resolves them all. That is one
    system call a side, where ``call_soon_threadsafe`` made a handle on the
    writer thread and left the loop to read its self-pipe until it was empty.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._rung: collections.deque[_Woken] = collections.deque()
        if hasattr(os, "eventfd"):
            self._read = self._write = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._token = (1).to_bytes(8, sys.byteorder)  # an eventfd adds 8-byte counts
        else:  # pragma: no cover - not Linux
            self._read, self._write = os.pipe()
            os.set_blocking(self._read, False)
            os.set_blocking(self._write, False)
            self._token = b"\0"
        try:
            loop.add_reader(self._read, self._answer)
        except BaseException:  # an event loop that cannot watch files
            self._close_files()
            raise

    def ring(self, futures: _Woken) -> None:
        """Has the loop resolve ``futures`` (on the writer thread)."""
        self._rung.append(futures)
        with contextlib.suppress(BlockingIOError):  # full: the loop has a wake-up coming
            os.write(self._write, self._token)

    def _answer(self) -> None:
        # Read first, then resolve: a ring between the two leaves the file readable
        # again, and the next call finds the deque empty, which is harmless.
        with contextlib.suppress(BlockingIOError):
            os.read(self._read, 4096)
        while self._rung:
            _resolve(self._rung.popleft())

    def close(self) -> None:
        """Resolves what was rung and stops watching (on the loop, after the writer ended)."""
        if not self.loop.is_closed():
            self.loop.remove_reader(self._read)
        self._close_files()
        while self._rung:
            _resolve(self._rung.popleft())

    def _close_files(self) -> None:
        os.close(self._read)
        if self._write != self._read:
            os.close(self._write)


_Write = tuple[Statement, tuple[Any, ...], Lease | None]
_STOP = object()

LINGER = 0.05
"""Seconds a write waits for a flush to commit it before the writer commits it anyway."""

LOCK_WAIT = 60.0
"""Seconds the writer keeps asking for the file's write lock before its batch fails."""

_LOCK_POLL = (0.0005, 0.004)
"""The first and longest pause between two asks for the write lock, in seconds."""


class GroupWriter:
    """The writer thread of one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Writes and barriers, in order. The writer never blocks on this queue:
        # waking it at every write would cost a thread switch per row.
        self._queue: queue.SimpleQueue[_Write | _Barrier | object] = queue.SimpleQueue()
        # What the writer blocks on: one token per flush, stop or linger (below).
        self._wakeups: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._flushes = 0  # flushes asked for: a flush makes a linger timer moot
        self._lingering: asyncio.AbstractEventLoop | None = None  # the loop of the timer
        self._timer: asyncio.TimerHandle | None = None
        self._doorbell: _Doorbell | None = None

    def start(self) -> None:
        """Starts the thread (it opens its own connection), on the loop that will flush."""
        with contextlib.suppress(RuntimeError, NotImplementedError):
            # Flushes from another loop (or this one, if it cannot watch a file)
            # are woken by call_soon_threadsafe instead.
            self._doorbell = _Doorbell(asyncio.get_running_loop())
        self._thread = threading.Thread(target=self._loop, name="cadenza-store", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Commits what is queued and ends the thread."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._wakeups.put(None)
            await anyio.to_thread.run_sync(self._thread.join)
            self._thread = None
        timer, self._timer = self._timer, None
        if timer is not None and self._lingering is asyncio.get_running_loop():
            timer.cancel()  # nothing is left to commit (on another loop it fires harmlessly)
        self._lingering = None
        doorbell, self._doorbell = self._doorbell, None
        if doorbell is not None:
            if doorbell.loop is asyncio.get_running_loop() or doorbell.loop.is_closed():
                doorbell.close()
            else:
                doorbell.loop.call_soon_threadsafe(doorbell.close)

    def put(
        self, statement: Statement, parameters: tuple[Any, ...], lease: Lease | None = None
    ) -> None:
        """Queues one statement, fenced by ``lease`` when its run's lease is held.

        The writer is not woken: the next flush commits the write. A write that
        no flush follows within `LINGER` seconds is committed then, so that other
        processes reading the file see a long step's events as it goes.
        """
        if lease is not None and lease.stopped:
            return  # refused already, or failed: the run no longer goes on here
        self._queue.put((statement, parameters, lease))
        lingering = self._lingering
        if lingering is None or lingering.is_closed():
            self._linger()

    def put_counted(self, statement: Statement, parameters: tuple[Any, ...]) -> list[int]:
        """Queues one statement; after the flush that commits it, the list holds its row count.

        Until then the list is empty; it stays empty if the commit failed (the
        flush raises).
        """
        changed: list[int] = []
        self._queue.put(_Counted(statement, parameters, changed))
        lingering = self._lingering
        if lingering is None or lingering.is_closed():
            self._linger()
        return changed

    async def flush(self, lease: Lease | None = None) -> None:
        """Waits until everything queued before this call is committed.

        ``lease`` is the run the caller drives, as for `Writer.flush`.

        Raises:
            StoreError: What was queued before could not be committed (asked
                without a ``lease``), or the store is closed (nobody would ever
                commit what waits).
        """
        if self._thread is None:
            raise StoreError(f"the run store {str(self.path)!r} is closed")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str | None] = loop.create_future()
        self._flushes += 1
        self._queue.put(_Barrier(loop, done, lease))
        self._wakeups.put(None)
        failed = await done
        if failed is not None:
            raise StoreError(failed)

    def _linger(self) -> None:
        """Has the writer commit what is queued `LINGER` seconds from now, unless a flush does.

        One timer at a time, on the loop that queued the write; without one (a
        write from a thread with no event loop) the writer commits at once.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._wakeups.put(None)
            return
        self._lingering = loop
        self._timer = loop.call_later(LINGER, self._lingered, self._flushes)

    def _lingered(self, flushes: int) -> None:
        self._lingering = self._timer = None
        if self._flushes == flushes:  # no flush since: commit what waits
            self._wakeups.put(None)
        elif not self._queue.empty():  # what came after the flush waits its turn
            self._linger()

    def _loop(self) -> None:
        connection = connect(self.path)
        connection.execute("PRAGMA busy_timeout=0")  # _begin polls for the lock
        cursor = connection.cursor()
        try:
            while True:
                self._wakeups.get()
                # This thread is the only reader of both queues, so what is not
                # empty has an item to get (and no queue.Empty is raised per batch).
                while not self._wakeups.empty():  # flushes this batch commits too
                    self._wakeups.get_nowait()
                # Group commit: whatever piled up while we were committing goes in one go.
                batch = []
                while not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                if self._commit(connection, cursor, batch):
                    return
        finally:
            connection.close()

    def _commit(
        self, connection: sqlite3.Connection, cursor: sqlite3.Cursor, batch: list[Any]
    ) -> bool:
        """Writes and commits ``batch``; whether it asked the writer to stop."""
        barriers: list[_Barrier] = []
        failed: str | None = None
        stop = False
        writes: list[_Write] = []
        counted: list[_Counted] = []
        for item in batch:
            if item is _STOP:
                stop = True
            elif type(item) is _Barrier:
                barriers.append(item)
            elif type(item) is _Counted:
                counted.append(item)
            else:
                writes.append(item)
        if writes or counted:
            failed = self._write(connection, cursor, writes, counted)
        _wake(barriers, self._doorbell, failed)
        return stop

    def _write(
        self,
        connection: sqlite3.Connection,
        cursor: sqlite3.Cursor,
        writes: list[_Write],
        counted: list[_Counted],
    ) -> str | None:
        """Writes and commits in one transaction; why it failed (its leases are marked)."""
        try:
            _begin(cursor)
            tables = _fenced(cursor, writes)
            for runs in tables.values():
                for statement, queued in runs:
                    pack = statement.pack
                    rows = pack(queued) if pack is not None else _latest(statement, queued)
                    if len(rows) == 1:
                        cursor.execute(statement.sql, rows[0])
                    else:
                        cursor.executemany(statement.sql, rows)
            changes = [cursor.execute(c.statement.sql, c.parameters).rowcount for c in counted]
            failpoint("store.before_commit")
            cursor.execute("COMMIT")
            failpoint("store.after_commit")
        except sqlite3.Error as error:
            if connection.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    connection.execute("ROLLBACK")
            failed = f"the run store {str(self.path)!r} could not commit its writes: {error}"
            for lease in {id(w[2]): w[2] for w in writes if w[2] is not None}.values():
                if lease.lost is None:  # a lost one is another process's run
                    lease_failed(lease, failed)
            return failed
        for item, change in zip(counted, changes, strict=True):
            item.changed.append(change)
        return None


def _begin(cursor: sqlite3.Cursor) -> None:
    """``BEGIN IMMEDIATE``, asked again every `_LOCK_POLL` while another connection writes.

    Raises:
        sqlite3.OperationalError: The lock was held for `LOCK_WAIT` seconds, or
            the transaction failed to begin for another reason.
    """
    pause, longest = _LOCK_POLL
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            cursor.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode != sqlite3.SQLITE_BUSY:
                raise
            if time.monotonic() >= deadline:
                raise sqlite3.OperationalError(
                    f"another connection held the file's write lock for {LOCK_WAIT:g} s"
                ) from error
        # Jittered, so that two writers polling each other do not keep colliding.
        time.sleep(pause * (0.5 + random.random()))
        pause = min(pause * 2, longest)


def _fenced(
    cursor: sqlite3.Cursor, writes: list[_Write]
) -> dict[str, list[tuple[Statement, list[tuple[Any, ...]]]]]:
    """The writes whose leases still hold, as runs of one statement per table (queue order).

    Called inside the batch's transaction, so that the fences read are still
    the fences when it commits.
    """
    checked: dict[int, bool] = {}
    tables: dict[str, list[tuple[Statement, list[tuple[Any, ...]]]]] = {}
    for statement, parameters, lease in writes:
        if lease is not None:
            holds = checked.get(id(lease))
            if holds is None:
                holds = checked[id(lease)] = _holds(cursor, lease)
            if not holds:
                continue
        queue_run(tables, statement, parameters)
    return tables


def _holds(cursor: sqlite3.Cursor, lease: Lease) -> bool:
    """Whether the lease row still carries ``lease``'s fence; marks the lease lost if not."""
    if lease.stopped:
        return False
    row = cursor.execute("SELECT fence FROM leases WHERE run_id = ?", (lease.run_id,)).fetchone()
    if row is not None and row[0] == lease.fence:
        return True
    now = "none" if row is None else row[0]
    lease_lost(lease, f"another process took the run over (fence {lease.fence}, now {now})")
    return False


def _latest(statement: Statement, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The rows of a run of one statement that are not replaced later in the run."""
    if not statement.key:
        return rows
    key = statement.key
    latest = {row[:key]: row for row in rows}  # rows of different keys commute
    return rows if len(latest) == len(rows) else list(latest.values())


def _wake(barriers: list[_Barrier], doorbell: _Doorbell | None, failed: str | None) -> None:
    """Resolves the barriers' futures: one hand-off to each event loop, not one per flush.

    After a ``failed`` batch, a flush learns why, except one of a run whose writes
    were not the ones that failed (its lease was not marked).
    """
    if not barriers:
        return
    by_loop: dict[asyncio.AbstractEventLoop, _Woken] = {}
    for loop, future, lease in barriers:
        fine = lease is not None and lease.failed is None
        by_loop.setdefault(loop, []).append((future, None if fine else failed))
    for loop, futures in by_loop.items():
        if doorbell is not None and loop is doorbell.loop:
            doorbell.ring(futures)
            continue
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(_resolve, futures)


def _resolve(futures: _Woken) -> None:
    for future, failed in futures:
        if not future.done():
            future.set_result(failed)
