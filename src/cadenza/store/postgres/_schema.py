"""The PostgreSQL store's schema, its versioned migrations, its integrity check and leases.

The schema's version is the highest row of ``cadenza_schema_version``; each
migration in `MIGRATIONS` moves it up by one, in the transaction that applies
it, under an advisory lock so that processes opening a new database at once do
not race. A database whose version is newer than `SCHEMA_VERSION` is refused.
Every table is prefixed ``cadenza_`` so that the store can share a database.

Bodies are msgspec JSON text with a CRC-32 beside them (``_records``), exactly
as in the SQLite store, so ``runs check`` finds the same damage in both.
"""

from __future__ import annotations

from typing import Any

import msgspec

from cadenza.errors import LeaseHeld, StoreError
from cadenza.store._lease import Lease, LeaseHolder, check_takeover, lease_lost
from cadenza.store._records import RecordChecker, checked

__all__ = [
    "LOCK_TIMEOUT_MS",
    "MIGRATIONS",
    "NOW",
    "SCHEMA_VERSION",
    "SUPERVISOR_COLUMNS",
    "beat_supervisor",
    "integrity_problems",
    "migrate",
    "renew_lease",
    "take_lease",
    "take_queued",
]

LOCK_TIMEOUT_MS = 2000
"""How long taking a lease waits for its row's lock before giving up on the run (ms)."""
_LOCK_NOT_AVAILABLE = "55P03"

NOW = "extract(epoch FROM clock_timestamp())"
"""The server's clock, in epoch seconds: every lease expiry is on it, so the
clocks of the supervisors' hosts need not agree."""

MIGRATIONS: tuple[str, ...] = (
    # 1: runs, their events, the latest record of each address, documents and leases.
    """
    CREATE TABLE cadenza_runs (
        run_id     text PRIMARY KEY,
        workflow   text NOT NULL,
        path       text,
        status     text NOT NULL,
        inputs     text NOT NULL,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        result     text
    );
    CREATE INDEX cadenza_runs_by_time ON cadenza_runs (created_at);
    CREATE TABLE cadenza_events (
        run_id  text NOT NULL,
        seq     bigint NOT NULL,
        type    text NOT NULL,
        step_id text,
        body    text NOT NULL,
        crc     bigint NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE cadenza_steps (
        run_id  text NOT NULL,
        address text NOT NULL,
        status  text NOT NULL,
        record  text NOT NULL,
        crc     bigint NOT NULL,
        PRIMARY KEY (run_id, address)
    );
    CREATE TABLE cadenza_documents (
        run_id text PRIMARY KEY,
        body   bytea NOT NULL,
        crc    bigint NOT NULL
    );
    CREATE TABLE cadenza_leases (
        run_id   text PRIMARY KEY,
        holder   text NOT NULL,
        taken_at double precision NOT NULL
    );
    """,
    # 2: leases expire and carry a fencing token; takeover looks runs up by status.
    # A lease of before expiry counts as expired: its holder renews none.
    """
    ALTER TABLE cadenza_leases
        ADD COLUMN fence bigint NOT NULL DEFAULT 0,
        ADD COLUMN expires_at double precision NOT NULL DEFAULT 0;
    CREATE INDEX cadenza_runs_by_status ON cadenza_runs (status);
    """,
    # 3: commands for a run's owner from other processes (cancel, post a message).
    """
    CREATE TABLE cadenza_commands (
        id         bigserial PRIMARY KEY,
        run_id     text NOT NULL,
        body       text NOT NULL,
        created_at double precision NOT NULL
    );
    CREATE INDEX cadenza_commands_by_run ON cadenza_commands (run_id);
    """,
    # 4: the calls of agent steps (what resumes inside a step); a body over
    # CALL_BODY_LIMIT bytes is in cadenza_blobs once per run, named by its SHA-256
    # (the call's blob). Addresses sort bytewise ("C"), as in SQLite and in memory.
    """
    CREATE TABLE cadenza_calls (
        run_id  text NOT NULL,
        address text COLLATE "C" NOT NULL,
        attempt bigint NOT NULL,
        seq     bigint NOT NULL,
        kind    text NOT NULL,
        digest  text NOT NULL,
        body    text,
        blob    text,
        crc     bigint NOT NULL,
        PRIMARY KEY (run_id, address, attempt, seq)
    );
    CREATE INDEX cadenza_calls_by_blob ON cadenza_calls (run_id, blob) WHERE blob IS NOT NULL;
    CREATE TABLE cadenza_blobs (
        run_id text NOT NULL,
        digest text NOT NULL,
        body   text NOT NULL,
        crc    bigint NOT NULL,
        PRIMARY KEY (run_id, digest)
    );
    """,
    # 5: lineage: the run a run was forked from, and where (`Runtime.fork`); NULL for
    # the runs of before, and for every run that is not a fork.
    """
    ALTER TABLE cadenza_runs
        ADD COLUMN parent_run_id text,
        ADD COLUMN parent_address text;
    CREATE INDEX cadenza_runs_by_parent ON cadenza_runs (parent_run_id);
    """,
    # 6: queued runs (`Runtime.submit`) and their priority; supervisors pick the
    # highest priority (NULL counts as 0), then the oldest, among the queued only.
    """
    ALTER TABLE cadenza_runs ADD COLUMN priority bigint;
    CREATE INDEX cadenza_runs_queued ON cadenza_runs ((coalesce(priority, 0)) DESC, created_at)
        WHERE status = 'queued';
    """,
    # 7: the fleet's roll of live supervisors (`SupervisorRow`): where their workers
    # connect, their capacity and load; a row its supervisor stops renewing expires.
    """
    CREATE TABLE cadenza_supervisors (
        supervisor_id text PRIMARY KEY,
        host       text NOT NULL,
        pid        bigint NOT NULL,
        workers    text,
        capacity   bigint,
        runs       bigint NOT NULL,
        waiting    bigint NOT NULL,
        running    bigint NOT NULL,
        seen_at    double precision NOT NULL,
        expires_at double precision NOT NULL
    );
    """,
    # 8: each supervisor's workers and their load (`WorkerLoad`, JSON; NULL for none),
    # for ``cadenza fleet``; the rows of before know of none.
    """
    ALTER TABLE cadenza_supervisors ADD COLUMN pool text;
    """,
    # 9: events are stored in packs (`_records.pack_events`): a row holds a batch's
    # consecutive events of one run, seq to last_seq, its body their JSON array. A row
    # of before (last_seq NULL) holds one event, as it did.
    """
    ALTER TABLE cadenza_events ADD COLUMN last_seq bigint;
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this Cadenza writes (and the newest it reads)."""

# Any constant: serialises the migrations of every process opening the database.
_MIGRATION_LOCK = 0x63_61_64_65_6E_7A_61  # "cadenza"

_decode_holder = msgspec.json.Decoder(LeaseHolder).decode
_encode = msgspec.json.Encoder().encode


async def migrate(connection: Any, where: str) -> None:
    """Brings the schema up to `SCHEMA_VERSION`, one migration per version, atomically.

    Raises:
        StoreError: The database was written by a newer Cadenza.
    """
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        exists = await connection.fetchval("SELECT to_regclass('cadenza_schema_version')")
        if exists is None:
            await connection.execute(
                "CREATE TABLE cadenza_schema_version ("
                "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
        version = await connection.fetchval(
            "SELECT coalesce(max(version), 0) FROM cadenza_schema_version"
        )
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the run store {where} has schema version {version}, newer than this "
                f"Cadenza understands ({SCHEMA_VERSION}); upgrade Cadenza to read it"
            )
        for number in range(version + 1, SCHEMA_VERSION + 1):
            await connection.execute(MIGRATIONS[number - 1])
            await connection.execute(
                "INSERT INTO cadenza_schema_version (version) VALUES ($1)", number
            )


async def integrity_problems(connection: Any, *, limit: int = 100) -> list[str]:
    """Every event, record, document, call and blob read back and checked, in one snapshot."""
    checker = RecordChecker()
    async with connection.transaction(isolation="repeatable_read", readonly=True):
        async for run_id, seq, kind, body, stored, last in connection.cursor(
            "SELECT run_id, seq, type, body, crc, last_seq FROM cadenza_events ORDER BY run_id, seq"
        ):
            checker.event(run_id, seq, kind, body, stored, last)
        async for run_id, address, status, body, stored in connection.cursor(
            "SELECT run_id, address, status, record, crc FROM cadenza_steps"
        ):
            checker.step(run_id, address, status, body, stored)
        async for run_id, body, stored in connection.cursor(
            "SELECT run_id, body, crc FROM cadenza_documents"
        ):
            checker.document(run_id, body, stored)
        async for run_id, *row in connection.cursor(
            "SELECT run_id, address, attempt, seq, kind, digest, body, blob, crc FROM cadenza_calls"
        ):
            checker.call(run_id, row)
        async for run_id, name, body, stored in connection.cursor(
            "SELECT run_id, digest, body, crc FROM cadenza_blobs"
        ):
            checker.blob(run_id, name, body, stored)
    return checker.report(limit=limit)


async def take_lease(connection: Any, run_id: str, holder: LeaseHolder, ttl: float) -> Lease:
    """Gives ``holder`` the run's lease in one transaction, atomically.

    The row is inserted if there is none; if there is one, it is locked
    (``FOR UPDATE``) until the transaction ends, so two claimants of one run
    are decided one after the other, never both, and a writer checking the
    fence (``FOR KEY SHARE``) waits for the decision.

    Raises:
        LeaseHeld: A live process holds it, unexpired.
    """
    body = _encode(holder).decode()
    while True:
        async with connection.transaction():
            # A row locked by a transaction that does not end (its process is paused)
            # must not stall the taker: it gives up on this run and tries again later.
            await connection.execute(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")
            inserted = await connection.fetchval(
                f"INSERT INTO cadenza_leases VALUES ($1, $2, {NOW}, 1, {NOW} + $3) "
                "ON CONFLICT (run_id) DO NOTHING RETURNING true",
                run_id,
                body,
                ttl,
            )
            if inserted:
                return Lease(run_id, holder, 1, ttl)
            try:
                row = await connection.fetchrow(
                    f"SELECT holder, fence, expires_at <= {NOW} AS expired FROM cadenza_leases "
                    "WHERE run_id = $1 FOR UPDATE",
                    run_id,
                )
            except Exception as error:
                if getattr(error, "sqlstate", None) != _LOCK_NOT_AVAILABLE:
                    raise
                raise LeaseHeld(
                    f"run {run_id!r}'s lease is locked by another process's unfinished "
                    "transaction (a paused process?); try again once the server ends it"
                ) from None
            if row is None:
                continue  # deleted between the two statements: try to insert again
            current: Any = None
            if not row["expired"]:
                current = checked(row["holder"], None, _decode_holder, f"run {run_id!r}, lease")
            check_takeover(run_id, current, holder, expired=row["expired"])
            # The same holder again keeps its fence: its queued writes stay valid.
            same = current is not None and current.token == holder.token
            fence = row["fence"] if same else row["fence"] + 1
            await connection.execute(
                f"UPDATE cadenza_leases SET holder = $2, taken_at = {NOW}, fence = $3, "
                f"expires_at = {NOW} + $4 WHERE run_id = $1",
                run_id,
                body,
                fence,
                ttl,
            )
            return Lease(run_id, holder, fence, ttl)


# One statement picks the run and takes its lease. SKIP LOCKED: a run another
# supervisor is picking at this moment is passed over, not waited for. A run
# picked from a snapshot older than a rival's commit finds the rival's lease
# row unexpired: the conflict's WHERE refuses it, and the statement says so
# (``picked`` without a ``fence``), for the taker to look again.
_TAKE_QUEUED = f"""
WITH chosen AS (
    SELECT r.run_id FROM cadenza_runs r LEFT JOIN cadenza_leases l USING (run_id)
    WHERE r.status = 'queued' AND (l.run_id IS NULL OR l.expires_at <= {NOW})
    ORDER BY coalesce(r.priority, 0) DESC, r.created_at
    LIMIT 1 FOR UPDATE OF r SKIP LOCKED
), taken AS (
    INSERT INTO cadenza_leases (run_id, holder, taken_at, fence, expires_at)
    SELECT run_id, $1, {NOW}, 1, {NOW} + $2 FROM chosen
    ON CONFLICT (run_id) DO UPDATE SET holder = excluded.holder, taken_at = excluded.taken_at,
        fence = cadenza_leases.fence + 1, expires_at = excluded.expires_at
        WHERE cadenza_leases.expires_at <= {NOW}
    RETURNING run_id, fence
)
SELECT c.run_id, t.fence FROM chosen c LEFT JOIN taken t USING (run_id)
"""

_RACES = 100
"""Picks lost to rivals one take tries before it leaves the queue for the next look."""


async def take_queued(connection: Any, holder: LeaseHolder, ttl: float) -> Lease | None:
    """Gives ``holder`` the lease of the queued run to start next, one statement a try.

    The highest priority first, then the oldest, among the queued runs nobody
    holds; a run that another supervisor is taking is skipped, and a pick that
    a rival took first is tried again (each such loss is a run the rival took).

    Returns:
        The lease, or None when no queued run is free.
    """
    body = _encode(holder).decode()
    for _ in range(_RACES):
        taken = await connection.fetchrow(_TAKE_QUEUED, body, ttl)
        if taken is None:
            return None
        if taken["fence"] is not None:
            return Lease(taken["run_id"], holder, taken["fence"], ttl)
    return None


SUPERVISOR_COLUMNS = (
    "supervisor_id, host, pid, workers, capacity, runs, waiting, running, seen_at, expires_at, pool"
)
"""The columns of a `SupervisorRow`, in its fields' order."""

_BEAT = f"""
INSERT INTO cadenza_supervisors ({SUPERVISOR_COLUMNS})
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, {NOW}, {NOW} + $9, $10)
ON CONFLICT (supervisor_id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
    workers = excluded.workers, capacity = excluded.capacity, runs = excluded.runs,
    waiting = excluded.waiting, running = excluded.running, seen_at = excluded.seen_at,
    expires_at = excluded.expires_at, pool = excluded.pool
"""


async def beat_supervisor(connection: Any, row: tuple[Any, ...], ttl: float) -> None:
    """Replaces the supervisor's row by ``row`` (its first eight columns and its pool, the
    stamps left to the server), live for ``ttl`` seconds on the server's clock, and
    deletes the expired rows, in one transaction."""
    async with connection.transaction():
        await connection.execute(f"DELETE FROM cadenza_supervisors WHERE expires_at <= {NOW}")
        await connection.execute(_BEAT, *row[:8], ttl, row[10])


async def renew_lease(connection: Any, lease: Lease) -> None:
    """Extends ``lease`` by its ttl from now (the server's clock) if the row has its fence.

    Raises:
        LeaseLost: The fence changed: another holder took the lease.
    """
    status = await connection.execute(
        f"UPDATE cadenza_leases SET expires_at = {NOW} + $3 WHERE run_id = $1 AND fence = $2",
        lease.run_id,
        lease.fence,
        lease.ttl,
    )
    if status == "UPDATE 0":
        raise lease_lost(lease, "another process took the run over (its lease had expired)")
