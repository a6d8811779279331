"""The SQLite store's schema, its upgrades, and the checks that keep bad state out.

Schema version 2 (``PRAGMA user_version``) adds to version 1 a CRC-32 beside
every event and step record, a ``documents`` table (what a resume replays) and
a ``leases`` table (which process drives a run). Version 3 gives each lease a
fencing token and an expiry (``_lease.py``) and indexes runs by status (what
takeover looks for). Version 4 adds the ``commands`` table: what other
processes ask of a run's owner (cancel, post a message). Version 5 adds the
``calls`` table (each model and tool call an agent step completed: what resumes
inside the step) and the ``blobs`` table (a call's body over ``CALL_BODY_LIMIT``
bytes, kept once per run by its SHA-256, however many calls answered it), and
gives each run its lineage: the run it was forked from and the address it was
forked at (both NULL for a run that is not a fork; ``Runtime.fork``). Version 6
gives queued runs their priority. Version 7 adds the ``supervisors`` table: the
fleet's roll of live supervisors (``SupervisorRow``), each row expiring unless
its supervisor renews it. Version 8 gives each supervisor's row its ``pool``: the
workers connected to it and their load (JSON, NULL for none), for ``cadenza
fleet``. Version 9 stores events in packs, as PostgreSQL's migration 9 does
(``_records.pack_events``): a row holds a commit's consecutive events of one run,
``seq`` to ``last_seq``, its body their JSON array (a row of before, ``last_seq``
NULL, holds one event). An older store is upgraded in place when it is
opened; a store of a newer version is refused.

Every stored body is msgspec JSON, checked when it is read back (``_records``).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import msgspec

from cadenza.errors import StoreError
from cadenza.store._lease import Lease, LeaseHolder, check_takeover, lease_lost
from cadenza.store._records import RUN_COLUMNS, RecordChecker, checked, crc

__all__ = [
    "SCHEMA_VERSION",
    "SUPERVISOR_COLUMNS",
    "beat_supervisor",
    "checked",
    "connect",
    "crc",
    "forget_supervisor",
    "integrity_problems",
    "migrate",
    "renew_lease",
    "take_lease",
    "take_queued",
]

SCHEMA_VERSION = 9

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id     TEXT PRIMARY KEY,
    workflow   TEXT NOT NULL,
    path       TEXT,
    status     TEXT NOT NULL,
    inputs     TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    result     TEXT,
    parent_run_id  TEXT,
    parent_address TEXT,
    priority   INTEGER
);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs (created_at);
CREATE TABLE IF NOT EXISTS events (
    run_id  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    type    TEXT NOT NULL,
    step_id TEXT,
    body    TEXT NOT NULL,
    crc     INTEGER,
    last_seq INTEGER,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS steps (
    run_id  TEXT NOT NULL,
    address TEXT NOT NULL,
    status  TEXT NOT NULL,
    record  TEXT NOT NULL,
    crc     INTEGER,
    PRIMARY KEY (run_id, address)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS documents (
    run_id TEXT PRIMARY KEY,
    body   TEXT NOT NULL,
    crc    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS leases (
    run_id     TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    taken_at   REAL NOT NULL,
    fence      INTEGER NOT NULL DEFAULT 0,
    expires_at REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status);
CREATE TABLE IF NOT EXISTS commands (
    id         INTEGER PRIMARY KEY,
    run_id     TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS commands_by_run ON commands (run_id);
CREATE INDEX IF NOT EXISTS runs_by_parent ON runs (parent_run_id);
CREATE INDEX IF NOT EXISTS runs_queued ON runs (created_at) WHERE status = 'queued';
CREATE TABLE IF NOT EXISTS supervisors (
    supervisor_id TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    workers    TEXT,
    capacity   INTEGER,
    runs       INTEGER NOT NULL,
    waiting    INTEGER NOT NULL,
    running    INTEGER NOT NULL,
    seen_at    REAL NOT NULL,
    expires_at REAL NOT NULL,
    pool       TEXT
);
"""

SUPERVISOR_COLUMNS = (
    "supervisor_id, host, pid, workers, capacity, runs, waiting, running, seen_at, expires_at, pool"
)
"""The columns of a `SupervisorRow`, in its fields' order."""

# Version 5: the calls of agent steps. A call's body is in its row, or, over
# CALL_BODY_LIMIT bytes, in `blobs` (named by the body's SHA-256 in `blob`): a
# rowid table, as SQLite advises for rows that large. The index finds the calls
# that name a blob, which is how a blob no call names any more is found.
_CALLS_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    run_id  TEXT NOT NULL,
    address TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    digest  TEXT NOT NULL,
    body    TEXT,
    blob    TEXT,
    crc     INTEGER NOT NULL,
    PRIMARY KEY (run_id, address, attempt, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS calls_by_blob ON calls (run_id, blob) WHERE blob IS NOT NULL;
CREATE TABLE IF NOT EXISTS blobs (
    run_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    body   TEXT NOT NULL,
    crc    INTEGER NOT NULL,
    PRIMARY KEY (run_id, digest)
);
"""

_decode_holder = msgspec.json.Decoder(LeaseHolder).decode
_encode = msgspec.json.Encoder().encode


_BUSY = 5.0  # seconds a connection waits for other processes' locks (busy_timeout)
_BUSY_RETRY = 0.01

PAGE_SIZE = 1024
"""Bytes per page of a store created by this version (an older file keeps its own).

A step's commit appends its events to one B-tree and its record to another;
each page it touches, and each page a split rebalances, goes to the WAL whole
and is fsync'd before the step's dependents start. With 4 KiB pages a chain
step wrote 4.4 pages (17.7 KiB) per commit, with 1 KiB pages 8.5 KiB: 10-25%
less time per durable step on this machine's disk (benchmarks/durable.py)."""


def connect(path: Path) -> sqlite3.Connection:
    """A connection in WAL mode with ``synchronous=FULL`` and a 5 s busy timeout.

    A new file gets `PAGE_SIZE` pages; an existing file keeps the size it has
    (SQLite ignores the setting once the file has a page, and in WAL mode).

    Raises:
        StoreError: The file cannot be opened.
    """
    try:
        connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        connection.execute(f"PRAGMA page_size={PAGE_SIZE}")  # before WAL creates the file
        _into_wal(connection)
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("PRAGMA busy_timeout=5000")
    except sqlite3.Error as error:
        raise StoreError(f"cannot open the run store {str(path)!r}: {error}") from error
    return connection


def _into_wal(connection: sqlite3.Connection) -> None:
    """Puts the file in WAL mode, waiting up to `_BUSY` seconds for processes that open it too.

    While another process turns a new file to WAL, the switch here can fail at once
    with "database is locked": SQLite does not call the busy handler there (seen
    about once in 240 opens of six processes starting together on one new file).
    """
    deadline = time.monotonic() + _BUSY
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
            time.sleep(_BUSY_RETRY)  # connect runs off the event loop: a thread may wait


def migrate(connection: sqlite3.Connection, path: Path) -> None:
    """Creates the schema, or upgrades an older store, in one transaction.

    Raises:
        StoreError: The store was written by a newer Cadenza.
        sqlite3.DatabaseError: The file is not a usable database.
    """
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the run store {str(path)!r} has schema version {version}, newer than "
            f"this Cadenza understands ({SCHEMA_VERSION}); upgrade Cadenza to read it"
        )
    if version == SCHEMA_VERSION:
        return
    connection.execute("BEGIN IMMEDIATE")
    try:
        _add_columns(connection, version)
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                connection.execute(statement)
        if version < 5:  # the calls of agent steps, and the large bodies they share
            for statement in _CALLS_SCHEMA.split(";"):
                if statement.strip():
                    connection.execute(statement)
        # Packs of events (version 9); the rows of before hold one event each.
        if "last_seq" not in {row[1] for row in connection.execute("PRAGMA table_info(events)")}:
            connection.execute("ALTER TABLE events ADD COLUMN last_seq INTEGER")
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


def _add_columns(connection: sqlite3.Connection, version: int) -> None:
    """The columns that versions after ``version`` added to tables it already had."""
    if version == 1:  # records written before checksums existed stay unchecked (NULL)
        connection.execute("ALTER TABLE events ADD COLUMN crc INTEGER")
        connection.execute("ALTER TABLE steps ADD COLUMN crc INTEGER")
    if version == 2:  # a lease of before expiry counts as expired: its holder renews none
        connection.execute("ALTER TABLE leases ADD COLUMN fence INTEGER NOT NULL DEFAULT 0")
        connection.execute("ALTER TABLE leases ADD COLUMN expires_at REAL NOT NULL DEFAULT 0")
    if 0 < version < 5:  # lineage (forks); the runs of before were forked from nothing
        connection.execute("ALTER TABLE runs ADD COLUMN parent_run_id TEXT")
        connection.execute("ALTER TABLE runs ADD COLUMN parent_address TEXT")
    if 0 < version < 6:  # queued runs' priority (NULL: the runs of before had none)
        connection.execute("ALTER TABLE runs ADD COLUMN priority INTEGER")
    if version == 7:  # the workers of each supervisor (the rows of before: none known)
        connection.execute("ALTER TABLE supervisors ADD COLUMN pool TEXT")


def integrity_problems(connection: sqlite3.Connection, *, limit: int = 100) -> list[str]:
    """``PRAGMA integrity_check``, then every event, record, document, call and blob read
    back and checked."""
    checker = RecordChecker()
    checker.problems.extend(
        str(row[0])
        for row in connection.execute("PRAGMA integrity_check").fetchall()
        if row[0] != "ok"
    )
    rows = connection.execute(
        "SELECT run_id, seq, type, body, crc, last_seq FROM events ORDER BY run_id, seq"
    )
    for run_id, seq, kind, body, stored, last in rows:
        checker.event(run_id, seq, kind, body, stored, last)
    steps = connection.execute("SELECT run_id, address, status, record, crc FROM steps")
    for run_id, address, status, body, stored in steps:
        checker.step(run_id, address, status, body, stored)
    for run_id, body, stored in connection.execute("SELECT run_id, body, crc FROM documents"):
        checker.document(run_id, body, stored)
    calls = connection.execute(
        "SELECT run_id, address, attempt, seq, kind, digest, body, blob, crc FROM calls"
    )
    for run_id, *row in calls:
        checker.call(run_id, row)
    for run_id, name, body, stored in connection.execute(
        "SELECT run_id, digest, body, crc FROM blobs"
    ):
        checker.blob(run_id, name, body, stored)
    return checker.report(limit=limit)


def take_lease(path: Path, run_id: str, holder: LeaseHolder, now: float, ttl: float) -> Lease:
    """Gives ``holder`` the run's lease in one ``BEGIN IMMEDIATE`` transaction (atomic).

    Raises:
        LeaseHeld: A live process holds it, unexpired.
        StoreError: The store cannot be written.
    """
    connection = connect(path)
    try:
        connection.execute("BEGIN IMMEDIATE")
        try:
            row = connection.execute(
                "SELECT holder, fence, expires_at FROM leases WHERE run_id = ?", (run_id,)
            ).fetchone()
            fence = 1
            if row is not None:
                expired = row[2] <= now
                current: Any = None
                if not expired:
                    current = checked(row[0], None, _decode_holder, f"run {run_id!r}, lease")
                check_takeover(run_id, current, holder, expired=expired)
                # The same holder again keeps its fence: its queued writes stay valid.
                same = current is not None and current.token == holder.token
                fence = row[1] if same else row[1] + 1
            connection.execute(
                "INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?)",
                (run_id, _encode(holder), now, fence, now + ttl),
            )
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
    except sqlite3.Error as error:
        raise StoreError(f"cannot take the lease of run {run_id!r}: {error}") from error
    finally:
        connection.close()
    return Lease(run_id, holder, fence, ttl)


def take_queued(
    path: Path, holder: LeaseHolder, now: float, ttl: float
) -> tuple[tuple[Any, ...], Lease] | None:
    """Gives ``holder`` the lease of the queued run to start next, in one ``BEGIN IMMEDIATE``
    transaction: the highest priority, then the oldest, among those nobody holds.

    One transaction writes the file at a time, so two processes of this machine
    never take one run. A taker that dies before it starts the run leaves it
    queued, its lease expiring: the run is taken again after that.

    Returns:
        The run's ``runs`` row (`RUN_COLUMNS`) and the lease; None when no run waits.

    Raises:
        StoreError: The store cannot be written.
    """
    columns = ", ".join(f"runs.{name}" for name in RUN_COLUMNS.split(", "))
    connection = connect(path)
    try:
        connection.execute("BEGIN IMMEDIATE")
        try:
            row = connection.execute(
                f"SELECT {columns}, leases.fence FROM runs "
                "LEFT JOIN leases ON leases.run_id = runs.run_id WHERE runs.status = 'queued' "
                "AND (leases.run_id IS NULL OR leases.expires_at <= ?) "
                "ORDER BY coalesce(runs.priority, 0) DESC, runs.created_at LIMIT 1",
                (now,),
            ).fetchone()
            lease = None
            if row is not None:
                run_id, fence = row[0], (row[-1] or 0) + 1
                connection.execute(
                    "INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?)",
                    (run_id, _encode(holder), now, fence, now + ttl),
                )
                lease = Lease(run_id, holder, fence, ttl)
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
    except sqlite3.Error as error:
        raise StoreError(f"cannot take a queued run: {error}") from error
    finally:
        connection.close()
    return None if row is None or lease is None else (row[:-1], lease)


def beat_supervisor(path: Path, row: tuple[Any, ...], now: float) -> None:
    """Replaces the supervisor's row by ``row`` (`SUPERVISOR_COLUMNS`) and deletes the
    rows expired at ``now``, in one transaction.

    Raises:
        StoreError: The store cannot be written.
    """
    connection = connect(path)
    try:
        with connection:  # a transaction: BEGIN ... COMMIT, or ROLLBACK on error
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("DELETE FROM supervisors WHERE expires_at <= ?", (now,))
            connection.execute(
                f"INSERT OR REPLACE INTO supervisors ({SUPERVISOR_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
    except sqlite3.Error as error:
        raise StoreError(f"cannot record the supervisor {row[0]!r}: {error}") from error
    finally:
        connection.close()


def forget_supervisor(path: Path, supervisor_id: str) -> None:
    """Deletes the supervisor's row.

    Raises:
        StoreError: The store cannot be written.
    """
    connection = connect(path)
    try:
        connection.execute("DELETE FROM supervisors WHERE supervisor_id = ?", (supervisor_id,))
    except sqlite3.Error as error:
        raise StoreError(f"cannot forget the supervisor {supervisor_id!r}: {error}") from error
    finally:
        connection.close()


def renew_lease(path: Path, lease: Lease, now: float) -> None:
    """Extends ``lease`` to ``now`` plus its ttl if the row still has its fence.

    Raises:
        LeaseLost: The fence changed: another holder took the lease.
        StoreError: The store cannot be written.
    """
    connection = connect(path)
    try:
        renewed = connection.execute(
            "UPDATE leases SET expires_at = ? WHERE run_id = ? AND fence = ?",
            (now + lease.ttl, lease.run_id, lease.fence),
        ).rowcount
    except sqlite3.Error as error:
        raise StoreError(f"cannot renew the lease of run {lease.run_id!r}: {error}") from error
    finally:
        connection.close()
    if not renewed:
        raise lease_lost(lease, "another process took the run over (its lease had expired)")
