"""The SQLite run store: WAL, ``synchronous=FULL``, one writer thread, group commit.

Writes never block the event loop: they are queued to a dedicated writer thread
(``_writer``) that takes everything queued so far, writes it in one
transaction and commits once. `SqliteRunStore.flush` resolves when its batch is
committed, so steps that finish together share one fsync (group commit) while
each still waits for its own durability. Reads use a second connection in a
worker thread.

Stored data is JSON (msgspec), never pickle, each body with a CRC-32 that is
checked when it is read back. The schema is versioned in ``PRAGMA
user_version`` (see ``_schema``); a store written by a newer Cadenza is
refused, an older one upgraded.

How far ahead of the disk the queue may run is bounded by the run itself: every
step boundary awaits `flush`, so at most a few events per running step are queued.
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec

from cadenza.errors import StoreError
from cadenza.protocols import CallRecord, Event, RunResult, RunStatus, StepRecord
from cadenza.store._base import (
    ANSWERED,
    Command,
    QueueDepth,
    RunRow,
    SupervisorRow,
    command_bounds,
    encode_command,
    encode_pool,
    read_commands,
    read_supervisor,
    refuse_command,
)
from cadenza.store._lease import DEFAULT_LEASE_TTL, HeldLeases, Lease, LeaseHolder, lease_lost
from cadenza.store._queued import QueuedWrites
from cadenza.store._records import (
    RUN_COLUMNS,
    pack_events,
    packed_body,
    paged_events,
    read_calls,
    read_document,
    read_run,
    read_steps,
    run_columns,
)

from ._schema import (
    SCHEMA_VERSION,
    SUPERVISOR_COLUMNS,
    beat_supervisor,
    connect,
    crc,
    forget_supervisor,
    integrity_problems,
    migrate,
    renew_lease,
    take_lease,
    take_queued,
)
from ._writer import GroupWriter, Statement

__all__ = ["SCHEMA_VERSION", "SqliteRunStore"]

_encode = msgspec.json.Encoder().encode


def _blob(body: bytes) -> bytearray:
    """``body`` as the parameter that binds it.

    sqlite3 binds a bytearray as the same BLOB as bytes, but looks up an adapter
    for every bytes parameter first: about 2 µs each, on the writer thread that
    a step waits for, where the copy costs the loop 0.15 µs.
    """
    return bytearray(body)


_BEGIN_RUN = Statement(
    f"INSERT OR REPLACE INTO runs ({RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "runs",
    1,
)


def _pack(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """A batch's queued events as the rows that store them (`pack_events`)."""
    return [(*row[:4], _blob(row[4]), row[5]) for row in pack_events(rows)]


# Queued (run_id, seq, type, packed body); written as packs (schema version 9).
_APPEND_EVENT = Statement(
    "INSERT OR REPLACE INTO events (run_id, seq, last_seq, type, body, crc) "
    "VALUES (?, ?, ?, ?, ?, ?)",
    "events",
    2,
    _pack,
)
_PUT_STEP = Statement(
    "INSERT OR REPLACE INTO steps (run_id, address, status, record, crc) VALUES (?, ?, ?, ?, ?)",
    "steps",
    2,
)
_END_RUN = Statement(
    "UPDATE runs SET status = ?, updated_at = ?, result = ? WHERE run_id = ?", "runs"
)
_SAVE_DOCUMENT = Statement("INSERT OR REPLACE INTO documents VALUES (?, ?, ?)", "documents", 1)
# The row stays, with its fence: the next holder's fence must be higher still.
_RELEASE_LEASE = Statement(
    "UPDATE leases SET expires_at = 0 WHERE run_id = ? AND fence = ?", "leases"
)
_FORGET_STEPS = Statement(
    "DELETE FROM steps WHERE run_id = ? AND (address = ? OR substr(address, 1, ?) IN (?, ?))",
    "steps",
)
_PUT_CALL = Statement(
    "INSERT OR REPLACE INTO calls (run_id, address, attempt, seq, kind, digest, body, blob, crc) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "calls",
    4,
)
# Under "calls" (see QueuedWrites): a blob is written, and collected, in its
# place among the writes of the calls that name it.
_PUT_BLOB = Statement(
    "INSERT OR IGNORE INTO blobs (run_id, digest, body, crc) VALUES (?, ?, ?, ?)", "calls", 2
)
_FORGET_CALLS = Statement(
    "DELETE FROM calls WHERE run_id = ? AND (address = ? OR substr(address, 1, ?) IN (?, ?))",
    "calls",
)
_COLLECT_BLOBS = Statement(
    "DELETE FROM blobs WHERE run_id = ?1 AND NOT EXISTS "
    "(SELECT 1 FROM calls WHERE calls.run_id = ?1 AND calls.blob = blobs.digest)",
    "calls",
)
# A call's row, or a blob it names (address NULL): one statement, one moment.
_CALLS = (
    "WITH chosen AS (SELECT * FROM calls WHERE run_id = ?1{}) "
    "SELECT address, attempt, seq, kind, digest, body, blob, crc FROM chosen UNION ALL "
    "SELECT NULL, NULL, NULL, NULL, digest, body, NULL, crc FROM blobs "
    "WHERE run_id = ?1 AND digest IN (SELECT blob FROM chosen)"
)
_DELETE_RUN = [
    Statement(f"DELETE FROM {table} WHERE run_id = ?", table)
    for table in ("events", "steps", "documents", "leases", "commands", "calls", "blobs", "runs")
]
# The bound and the insert in one statement, in the writer's transaction: exact
# however many processes post at once. length() of a BLOB reads no content.
_SEND_COMMAND = Statement(
    "INSERT INTO commands (run_id, body, created_at) SELECT ?1, ?2, ?3 "
    "FROM (SELECT count(*) AS waiting, total(length(body)) AS size "
    "FROM commands WHERE run_id = ?1) WHERE waiting < ?4 AND size + length(?2) <= ?5",
    "commands",
)
_TAKE_COMMANDS = Statement(
    "DELETE FROM commands WHERE id IN (SELECT value FROM json_each(?))", "commands"
)


class SqliteRunStore(QueuedWrites):
    """A durable run store in one SQLite file (default ``.cadenza/runs.db``)."""

    save_document_statement = _SAVE_DOCUMENT
    release_lease_statement = _RELEASE_LEASE
    put_call_statement = _PUT_CALL
    put_blob_statement = _PUT_BLOB
    _writer: GroupWriter

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._writer = GroupWriter(self.path)
        self._reader: sqlite3.Connection | None = None
        self._leases = HeldLeases()

    async def open(self) -> None:
        """Creates the file and schema if needed and starts the writer thread.

        Raises:
            StoreError: The file cannot be opened or was written by a newer Cadenza.
        """
        await anyio.to_thread.run_sync(self._open_sync)
        self._writer.start()

    def _open_sync(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = connect(self.path)
        try:
            migrate(connection, self.path)
        except sqlite3.DatabaseError as error:
            raise StoreError(f"the run store {str(self.path)!r} is not usable: {error}") from error
        finally:
            connection.close()
        self._reader = connect(self.path)

    async def close(self) -> None:
        """Commits what is queued, stops the writer thread and closes the files."""
        await self._writer.stop()
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # -- writes: queued, ordered, committed in batches by the writer thread --------------

    def begin_run(self, row: RunRow) -> None:
        """Queues a new run row."""
        self._writer.put(
            _BEGIN_RUN, run_columns(row, _encode(row.inputs)), self._leases.get(row.run_id)
        )

    def append_event(self, event: Event) -> None:
        """Queues an event (the writer packs a batch's events of one run in one row)."""
        self._writer.put(
            _APPEND_EVENT,
            (event.run_id, event.seq, event.type, packed_body(event)),
            self._leases.get(event.run_id),
        )

    def put_step(self, run_id: str, address: str, record: StepRecord) -> None:
        """Queues the latest record of an address."""
        body = _encode(record)
        self._writer.put(
            _PUT_STEP,
            (run_id, address, record.status, _blob(body), crc(body)),
            self._leases.get(run_id),
        )

    def end_run(self, run_id: str, status: RunStatus, result: RunResult | None) -> None:
        """Queues the run's new status and result."""
        self._writer.put(
            _END_RUN,
            (status, time.time(), None if result is None else _encode(result), run_id),
            self._leases.get(run_id),
        )

    # -- reads: a separate connection, off the event loop --------------------------------

    async def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        reader = self._reader
        if reader is None:
            raise StoreError("the run store is not open")

        def query() -> list[tuple[Any, ...]]:
            return reader.execute(sql, params).fetchall()

        try:
            return await anyio.to_thread.run_sync(query)
        except sqlite3.Error as error:  # locked past the busy timeout, an I/O error
            raise StoreError(f"the run store {str(self.path)!r} failed: {error}") from error

    async def get_run(self, run_id: str) -> RunRow | None:
        """The run row, or None."""
        rows = await self._read(f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
        return read_run(rows[0]) if rows else None

    async def list_runs(self, *, limit: int = 100) -> list[RunRow]:
        """Most recent first."""
        rows = await self._read(
            f"SELECT {RUN_COLUMNS} FROM runs ORDER BY created_at DESC LIMIT ?", (limit,)
        )
        return [read_run(r) for r in rows]

    async def forks(self, run_id: str) -> list[RunRow]:
        """The runs forked from ``run_id``, oldest first."""
        rows = await self._read(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE parent_run_id = ? ORDER BY created_at",
            (run_id,),
        )
        return [read_run(r) for r in rows]

    async def events(
        self, run_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """The run's events after ``after_seq``, in order (the first ``limit``, if given)."""
        return await paged_events(
            run_id, after_seq, limit, functools.partial(self._event_rows, run_id)
        )

    async def _event_rows(
        self, run_id: str, low: int, after: int, until: int | None, rows: int | None
    ) -> list[tuple[Any, ...]]:
        """`EventRows` of the run: two statements, not an ``? IS NULL OR`` that SQLite
        would not bound the index's range with."""
        if until is None:
            return await self._read(
                "SELECT seq, last_seq, body, crc FROM events WHERE run_id = ? AND seq > ? "
                "AND coalesce(last_seq, seq) > ? ORDER BY seq LIMIT ?",
                (run_id, low, after, -1 if rows is None else rows),
            )
        return await self._read(
            "SELECT seq, last_seq, body, crc FROM events WHERE run_id = ? AND seq > ? "
            "AND seq <= ? AND coalesce(last_seq, seq) > ? ORDER BY seq LIMIT ?",
            (run_id, low, until, after, -1 if rows is None else rows),
        )

    async def steps(
        self, run_id: str, *, after: str | None = None, limit: int | None = None
    ) -> dict[str, StepRecord]:
        """The latest record of every address of the run (a page of them, by address, with
        ``limit``)."""
        # Two statements, not `(? IS NULL OR address > ?)`: with the OR, SQLite scans the
        # run's records from its first for every page, and a million-item run's resume
        # read its records in quadratic time (100k: 17 us an item, 1M: 31).
        after_clause = "" if after is None else " AND address > ?2"
        rows = await self._read(
            "SELECT address, status, record, crc FROM steps WHERE run_id = ?1"
            f"{after_clause} ORDER BY address LIMIT ?3",
            (run_id, after, -1 if limit is None else limit),
        )
        return read_steps(run_id, rows)

    async def calls(self, run_id: str, address: str | None = None) -> list[CallRecord]:
        """The run's calls (of ``address`` only, when given), by address, attempt and seq."""
        if address is None:
            rows = await self._read(_CALLS.format(""), (run_id,))
        else:
            rows = await self._read(_CALLS.format(" AND address = ?2"), (run_id, address))
        return read_calls(run_id, rows)

    # -- resuming, retention and maintenance ---------------------------------------------

    async def document(self, run_id: str) -> bytes | None:
        """The run's document, checked against its CRC, or None."""
        rows = await self._read("SELECT body, crc FROM documents WHERE run_id = ?", (run_id,))
        return read_document(run_id, rows[0] if rows else None)

    async def acquire_lease(
        self, run_id: str, holder: LeaseHolder, *, ttl: float = DEFAULT_LEASE_TTL
    ) -> Lease:
        """Takes the run's lease at once, in its own transaction.

        Raises:
            LeaseHeld: Another live process holds it, unexpired.
        """
        lease = await anyio.to_thread.run_sync(
            take_lease, self.path, run_id, holder, time.time(), ttl
        )
        return self._leases.hold(lease)

    async def renew_lease(self, lease: Lease) -> None:
        """Extends ``lease`` by its ttl from now, in its own transaction.

        Raises:
            LeaseLost: Another holder took it.
        """
        if lease.lost is not None:
            raise lease_lost(lease, lease.lost)
        await anyio.to_thread.run_sync(renew_lease, self.path, lease, time.time())

    async def take_queued(
        self, holder: LeaseHolder, *, ttl: float = DEFAULT_LEASE_TTL
    ) -> tuple[RunRow, Lease] | None:
        """Takes the lease of the queued run to start next, in its own transaction.

        Raises:
            StoreError: The store cannot be written.
        """
        taken = await anyio.to_thread.run_sync(take_queued, self.path, holder, time.time(), ttl)
        if taken is None:
            return None
        row, lease = taken
        return read_run(row), self._leases.hold(lease)

    async def orphaned_runs(self, *, limit: int = 100) -> list[RunRow]:
        """Running runs whose lease is free or expired, oldest first."""
        columns = ", ".join(f"runs.{name}" for name in RUN_COLUMNS.split(", "))
        rows = await self._read(
            f"SELECT {columns} FROM runs LEFT JOIN leases ON leases.run_id = runs.run_id "
            "WHERE runs.status = 'running' AND (leases.run_id IS NULL OR leases.expires_at <= ?) "
            "ORDER BY runs.created_at LIMIT ?",
            (time.time(), limit),
        )
        return [read_run(r) for r in rows]

    async def answered_runs(self, *, limit: int = 100) -> list[RunRow]:
        """Waiting runs whose newest event is an answer, oldest first."""
        rows = await self._read(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE status = 'waiting' AND (SELECT type FROM events "
            "WHERE events.run_id = runs.run_id ORDER BY seq DESC LIMIT 1) = ? "
            "ORDER BY created_at LIMIT ?",
            (ANSWERED, limit),
        )
        return [read_run(r) for r in rows]

    async def send_command(self, run_id: str, command: Command) -> None:
        """Records ``command`` for the run's owner and waits for its commit.

        Raises:
            MessageRefused: A message past the run's bound (`WAITING_COMMANDS`).
        """
        body = encode_command(command)
        bounds = command_bounds(command)
        changed = self._writer.put_counted(_SEND_COMMAND, (run_id, body, time.time(), *bounds))
        await self._writer.flush()
        if changed != [1]:
            raise refuse_command(run_id, body)

    async def take_commands(self, run_ids: Sequence[str]) -> list[tuple[str, Command]]:
        """Removes the commands for these runs and returns them, oldest first."""
        if not run_ids:
            return []
        rows = await self._read(
            "SELECT id, run_id, body FROM commands "
            "WHERE run_id IN (SELECT value FROM json_each(?)) ORDER BY id",
            (_encode(list(run_ids)),),
        )
        if not rows:
            return []
        self._writer.put(_TAKE_COMMANDS, (_encode([row[0] for row in rows]),))
        await self._writer.flush()
        return read_commands(rows)

    def forget_steps(self, run_id: str, prefix: str) -> None:
        """Queues the removal of the records and calls at ``prefix`` and below it, and of
        the blobs no call names any more."""
        lease = self._leases.get(run_id)
        under = (run_id, prefix, len(prefix) + 1, prefix + ".", prefix + "[")
        self._writer.put(_FORGET_STEPS, under, lease)
        self._writer.put(_FORGET_CALLS, under, lease)
        self._writer.put(_COLLECT_BLOBS, (run_id,), lease)

    async def delete_runs(self, run_ids: Sequence[str]) -> None:
        """Removes the runs with their events, records, documents, calls and leases."""
        for run_id, statement in itertools.product(run_ids, _DELETE_RUN):
            self._writer.put(statement, (run_id,))
        await self.flush()

    async def check(self) -> list[str]:
        """``PRAGMA integrity_check`` plus every stored body read back and checked."""
        reader = self._reader
        if reader is None:
            raise StoreError("the run store is not open")
        await self.flush()
        return await anyio.to_thread.run_sync(integrity_problems, reader)

    async def beat_supervisor(self, row: SupervisorRow, *, ttl: float) -> None:
        """Records ``row`` live for ``ttl`` seconds, in its own transaction.

        Raises:
            StoreError: The store cannot be written.
        """
        now = time.time()
        stamped = msgspec.structs.replace(row, seen_at=now, expires_at=now + ttl)
        values = (*msgspec.structs.astuple(stamped)[:-1], encode_pool(row.pool))
        await anyio.to_thread.run_sync(beat_supervisor, self.path, values, now)

    async def live_supervisors(self) -> list[SupervisorRow]:
        """The supervisors whose row has not expired, by id."""
        rows = await self._read(
            f"SELECT {SUPERVISOR_COLUMNS} FROM supervisors WHERE expires_at > ? "
            "ORDER BY supervisor_id",
            (time.time(),),
        )
        return [read_supervisor(row) for row in rows]

    async def forget_supervisor(self, supervisor_id: str) -> None:
        """Deletes the supervisor's row.

        Raises:
            StoreError: The store cannot be written.
        """
        await anyio.to_thread.run_sync(forget_supervisor, self.path, supervisor_id)

    async def queue_depth(self) -> QueueDepth:
        """The queued runs by priority, and how long the oldest has waited."""
        groups = await self._read(
            "SELECT coalesce(priority, 0), count(*), min(created_at) FROM runs "
            "WHERE status = 'queued' GROUP BY 1",
            (),
        )
        return QueueDepth.of(groups, time.time())
