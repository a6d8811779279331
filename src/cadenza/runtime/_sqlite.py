"""The SQLite run store: WAL, ``synchronous=FULL``, one writer thread, group commit.

Writes never block the event loop: they are queued to a dedicated writer thread
that takes everything queued so far, writes it in one transaction and commits
once. `SqliteRunStore.flush` resolves when its batch is committed, so steps that
finish together share one fsync (group commit) while each still waits for its
own durability. Reads use a second connection in a worker thread.

Stored data is JSON (msgspec), never pickle. The schema is versioned in
``PRAGMA user_version``; a store written by a newer Cadenza is refused.

How far ahead of the disk the queue may run is bounded by the run itself: every
step boundary awaits `flush`, so at most a few events per running step are queued.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec

from cadenza.errors import StoreError
from cadenza.protocols import Event, RunResult, RunStatus, StepRecord

from ._store import RunRow

__all__ = ["SCHEMA_VERSION", "SqliteRunStore"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id     TEXT PRIMARY KEY,
    workflow   TEXT NOT NULL,
    path       TEXT,
    status     TEXT NOT NULL,
    inputs     TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    result     TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs (created_at);
CREATE TABLE IF NOT EXISTS events (
    run_id  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    type    TEXT NOT NULL,
    step_id TEXT,
    body    TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS steps (
    run_id  TEXT NOT NULL,
    address TEXT NOT NULL,
    status  TEXT NOT NULL,
    record  TEXT NOT NULL,
    PRIMARY KEY (run_id, address)
) WITHOUT ROWID;
"""

_encode = msgspec.json.Encoder().encode
_decode_event = msgspec.json.Decoder(Event).decode
_decode_step = msgspec.json.Decoder(StepRecord).decode
_decode_result = msgspec.json.Decoder(RunResult).decode
_decode_inputs = msgspec.json.Decoder(dict[str, Any]).decode

# A queued write: SQL and its parameters, or a flush barrier (None, waker).
_Write = tuple[str, tuple[Any, ...]]
_Waker = Callable[[], None]
_STOP = object()


def _connect(path: Path) -> sqlite3.Connection:
    try:
        connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("PRAGMA busy_timeout=5000")
    except sqlite3.Error as error:
        raise StoreError(f"cannot open the run store {str(path)!r}: {error}") from error
    return connection


class SqliteRunStore:
    """A durable run store in one SQLite file (default ``.cadenza/runs.db``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._queue: queue.SimpleQueue[_Write | _Waker | object] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._reader: sqlite3.Connection | None = None
        self._failure: BaseException | None = None

    async def open(self) -> None:
        """Creates the file and schema if needed and starts the writer thread.

        Raises:
            StoreError: The file cannot be opened or was written by a newer Cadenza.
        """
        await anyio.to_thread.run_sync(self._open_sync)
        self._writer = threading.Thread(target=self._write_loop, name="cadenza-store", daemon=True)
        self._writer.start()

    def _open_sync(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = _connect(self.path)
        try:
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"the run store {str(self.path)!r} has schema version {version}, newer than "
                    f"this Cadenza understands ({SCHEMA_VERSION}); upgrade Cadenza to read it"
                )
            connection.executescript(_SCHEMA)
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.DatabaseError as error:
            raise StoreError(f"the run store {str(self.path)!r} is not usable: {error}") from error
        finally:
            connection.close()
        self._reader = _connect(self.path)

    async def close(self) -> None:
        """Commits what is queued, stops the writer thread and closes the files."""
        if self._writer is not None:
            self._queue.put(_STOP)
            await anyio.to_thread.run_sync(self._writer.join)
            self._writer = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # -- writes: queued, ordered, committed in batches by the writer thread --------------

    def begin_run(self, row: RunRow) -> None:
        """Queues a new run row."""
        self._queue.put(
            (
                "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
                (
                    row.run_id,
                    row.workflow,
                    row.path,
                    row.status,
                    _encode(row.inputs),
                    row.created_at,
                    row.updated_at,
                ),
            )
        )

    def append_event(self, event: Event) -> None:
        """Queues an event."""
        self._queue.put(
            (
                "INSERT OR REPLACE INTO events VALUES (?, ?, ?, ?, ?)",
                (event.run_id, event.seq, event.type, event.step_id, _encode(event)),
            )
        )

    def put_step(self, run_id: str, address: str, record: StepRecord) -> None:
        """Queues the latest record of an address."""
        self._queue.put(
            (
                "INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?)",
                (run_id, address, record.status, _encode(record)),
            )
        )

    def end_run(self, run_id: str, status: RunStatus, result: RunResult | None) -> None:
        """Queues the run's new status and result."""
        self._queue.put(
            (
                "UPDATE runs SET status = ?, updated_at = ?, result = ? WHERE run_id = ?",
                (status, time.time(), None if result is None else _encode(result), run_id),
            )
        )

    async def flush(self) -> None:
        """Waits until everything queued before this call is committed.

        Raises:
            StoreError: The writer failed; the run cannot be recorded any further.
        """
        if self._failure is not None:
            raise StoreError(f"the run store failed: {self._failure}") from self._failure
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def wake() -> None:
            loop.call_soon_threadsafe(_resolve, done)

        self._queue.put(wake)
        await done
        if self._failure is not None:
            raise StoreError(f"the run store failed: {self._failure}") from self._failure

    def _write_loop(self) -> None:
        connection = _connect(self.path)
        try:
            while True:
                first = self._queue.get()
                batch = [first]
                # Group commit: whatever piled up while we were committing goes in one go.
                while True:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                stop = self._commit(connection, batch)
                if stop:
                    return
        finally:
            connection.close()

    def _commit(self, connection: sqlite3.Connection, batch: list[Any]) -> bool:
        wakers: list[_Waker] = []
        stop = False
        try:
            connection.execute("BEGIN")
            for item in batch:
                if item is _STOP:
                    stop = True
                elif callable(item):
                    wakers.append(item)
                else:
                    connection.execute(*item)
            connection.execute("COMMIT")
        except sqlite3.Error as error:
            self._failure = error
            if connection.in_transaction:
                connection.execute("ROLLBACK")
        for wake in wakers:
            wake()
        return stop

    # -- reads: a separate connection, off the event loop --------------------------------

    async def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        reader = self._reader
        if reader is None:
            raise StoreError("the run store is not open")

        def query() -> list[tuple[Any, ...]]:
            return reader.execute(sql, params).fetchall()

        return await anyio.to_thread.run_sync(query)

    async def get_run(self, run_id: str) -> RunRow | None:
        """The run row, or None."""
        rows = await self._read("SELECT * FROM runs WHERE run_id = ?", (run_id,))
        return _row(rows[0]) if rows else None

    async def list_runs(self, *, limit: int = 100) -> list[RunRow]:
        """Most recent first."""
        rows = await self._read("SELECT * FROM runs ORDER BY created_at DESC LIMIT ?", (limit,))
        return [_row(r) for r in rows]

    async def events(self, run_id: str, *, after_seq: int = 0) -> list[Event]:
        """The run's events after ``after_seq``, in order."""
        rows = await self._read(
            "SELECT body FROM events WHERE run_id = ? AND seq > ? ORDER BY seq", (run_id, after_seq)
        )
        return [_decode_event(body) for (body,) in rows]

    async def steps(self, run_id: str) -> dict[str, StepRecord]:
        """The latest record of every address of the run."""
        rows = await self._read("SELECT address, record FROM steps WHERE run_id = ?", (run_id,))
        return {address: _decode_step(record) for address, record in rows}


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _row(row: tuple[Any, ...]) -> RunRow:
    run_id, workflow, path, status, inputs, created_at, updated_at, result = row
    return RunRow(
        run_id=run_id,
        workflow=workflow,
        path=path,
        status=status,
        inputs=_decode_inputs(inputs),
        created_at=created_at,
        updated_at=updated_at,
        result=None if result is None else _decode_result(result),
    )
