"""The PostgreSQL run store: the SQLite store's guarantees, on a server several processes share.

Selected by URL (``postgresql://user@host/db``; `make_store`). Writes never
wait: they are queued to a writer task (``_writer``) that writes
everything queued so far in one transaction and commits once;
`PostgresRunStore.flush` resolves when its batch is committed (the server's
``synchronous_commit`` decides what committed means: on, its default, is
"flushed to the server's disk"). Reads and leases use a small connection pool.
The driver is asyncpg, loaded when the store opens: it is the ``postgres``
extra (``pip install 'cadenza[postgres]'``).

Stored data is JSON (msgspec), never pickle, each body with a CRC-32 checked
when it is read back; the schema is versioned (``_schema``): a
database written by a newer Cadenza is refused, an older one upgraded.

A URL's password never appears in an error or a log: the store is named by
its URL with the password masked, and the password is registered as a secret
(`cadenza._redact.register_secret`). Better still, leave it out of the URL
and give it in ``PGPASSWORD`` or ``~/.pgpass``, which the driver reads.

Connections come and go: a server restart, a failover, an idle-connection
killer or a network blip ends them. The pool replaces a dead connection when
it is next asked for one, and the writer opens a new one for the batch after
a failed one; what failed in between is a `StoreError` naming the store (the
driver's own errors never leave this module), and a failed batch stops the
runs whose writes were in it (``_writer``). Every session is named
``cadenza`` (``application_name``) unless the URL or ``PGAPPNAME`` names it:
what ``pg_stat_activity`` shows, and what an operator selects on.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import time
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec

from cadenza._redact import redact, register_secret
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
    crc,
    pack_events,
    packed_body,
    paged_events,
    read_calls,
    read_document,
    read_run,
    read_steps,
    run_columns,
)
from cadenza.store._urls import redacted_url, url_password

from ._schema import (
    NOW,
    SUPERVISOR_COLUMNS,
    beat_supervisor,
    integrity_problems,
    migrate,
    renew_lease,
    take_lease,
    take_queued,
)
from ._writer import PostgresWriter, Statement

__all__ = ["PostgresRunStore"]

_encode = msgspec.json.Encoder().encode


def _upsert(table: str, columns: dict[str, str], key: int, pack: Any = None) -> Statement:
    """An insert-or-replace of one row, and of many at once (`Statement.bulk`)."""
    names = list(columns)
    conflict = f" ON CONFLICT ({', '.join(names[:key])}) DO UPDATE SET " + ", ".join(
        f"{name} = excluded.{name}" for name in names[key:]
    )
    into = f"INSERT INTO cadenza_{table} ({', '.join(names)})"
    values = ", ".join(f"${n}" for n in range(1, len(names) + 1))
    arrays = ", ".join(f"{{{n}}}::{kind}[]" for n, kind in enumerate(columns.values()))
    return Statement(
        f"{into} VALUES ({values}){conflict}",
        table,
        key,
        f"{into} SELECT * FROM unnest({arrays}){conflict}",
        f"{into} VALUES {{rows}}{conflict}",
        pack,
    )


_TEXT, _INT, _FLOAT = "text", "bigint", "double precision"
_BEGIN_RUN = _upsert(
    "runs",
    {
        "run_id": _TEXT,
        "workflow": _TEXT,
        "path": _TEXT,
        "status": _TEXT,
        "inputs": _TEXT,
        "created_at": _FLOAT,
        "updated_at": _FLOAT,
        "result": _TEXT,
        "parent_run_id": _TEXT,
        "parent_address": _TEXT,
        "priority": _INT,
    },
    1,
)


def _pack(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """A batch's queued events as the rows that store them (`pack_events`), bodies as text."""
    return [(*row[:4], row[4].decode(), row[5]) for row in pack_events(rows)]


# Queued (run_id, seq, type, packed body); written as packs (schema version 9).
_APPEND_EVENT = _upsert(
    "events",
    {
        "run_id": _TEXT,
        "seq": _INT,
        "last_seq": _INT,
        "type": _TEXT,
        "body": _TEXT,
        "crc": _INT,
    },
    2,
    _pack,
)
_PUT_STEP = _upsert(
    "steps",
    {"run_id": _TEXT, "address": _TEXT, "status": _TEXT, "record": _TEXT, "crc": _INT},
    2,
)
_END_RUN = Statement(
    "UPDATE cadenza_runs SET status = $1, updated_at = $2, result = $3 WHERE run_id = $4", "runs"
)
_SAVE_DOCUMENT = _upsert("documents", {"run_id": _TEXT, "body": "bytea", "crc": _INT}, 1)
# The row stays, with its fence: the next holder's fence must be higher still.
_RELEASE_LEASE = Statement(
    "UPDATE cadenza_leases SET expires_at = 0 WHERE run_id = $1 AND fence = $2", "leases"
)
_FORGET_STEPS = Statement(
    "DELETE FROM cadenza_steps WHERE run_id = $1 "
    "AND (address = $2 OR starts_with(address, $3) OR starts_with(address, $4))",
    "steps",
)
_PUT_CALL = _upsert(
    "calls",
    {
        "run_id": _TEXT,
        "address": _TEXT,
        "attempt": _INT,
        "seq": _INT,
        "kind": _TEXT,
        "digest": _TEXT,
        "body": _TEXT,
        "blob": _TEXT,
        "crc": _INT,
    },
    4,
)
# Under "calls" (see QueuedWrites): a blob is written, and collected, in its
# place among the writes of the calls that name it.
_PUT_BLOB = Statement(
    "INSERT INTO cadenza_blobs (run_id, digest, body, crc) VALUES ($1, $2, $3, $4) "
    "ON CONFLICT (run_id, digest) DO NOTHING",
    "calls",
    2,
)
_FORGET_CALLS = Statement(
    "DELETE FROM cadenza_calls WHERE run_id = $1 "
    "AND (address = $2 OR starts_with(address, $3) OR starts_with(address, $4))",
    "calls",
)
_COLLECT_BLOBS = Statement(
    "DELETE FROM cadenza_blobs b WHERE run_id = $1 AND NOT EXISTS "
    "(SELECT 1 FROM cadenza_calls c WHERE c.run_id = $1 AND c.blob = b.digest)",
    "calls",
)
# A call's row, or a blob it names (address NULL): one statement, one snapshot.
_CALLS = (
    "WITH chosen AS (SELECT * FROM cadenza_calls WHERE run_id = $1{}) "
    "SELECT address, attempt, seq, kind, digest, body, blob, crc FROM chosen UNION ALL "
    "SELECT NULL, NULL, NULL, NULL, digest, body, NULL, crc FROM cadenza_blobs "
    "WHERE run_id = $1 AND digest IN (SELECT blob FROM chosen)"
)
_DELETE_RUN = [
    Statement(f"DELETE FROM cadenza_{table} WHERE run_id = $1", table)
    for table in ("events", "steps", "documents", "leases", "commands", "calls", "blobs", "runs")
]

# Reads, leases and maintenance share this many connections; the writer has its own.
POOL_SIZE = 4

CONNECT_TIMEOUT = 10.0
"""Seconds a new connection may take (the driver's default is 60): a writer
reconnecting to a server that does not answer holds every flush meanwhile."""

APPLICATION_NAME = "cadenza"
"""The sessions' ``application_name`` unless the URL or ``PGAPPNAME`` gives one."""

IDLE_IN_TRANSACTION = DEFAULT_LEASE_TTL / 3
"""Seconds the server lets one of our sessions sit idle inside a transaction
before it ends the session. Ours never wait between the statements of a
transaction, so only a paused process (SIGSTOP, a frozen VM) hits this: its
row locks then go with its session instead of stalling whoever takes its runs
over (and the paused process, continued, finds its write failed, and then its
lease lost: `Runtime` asks)."""


async def _session(connection: Any) -> None:
    """Sets up each connection the store opens (a plain SET: a session pooler keeps it)."""
    milliseconds = int(IDLE_IN_TRANSACTION * 1000)
    await connection.execute(f"SET idle_in_transaction_session_timeout = {milliseconds}")


async def _released(connection: Any) -> None:
    """What the pool does to a connection given back, beyond rolling back an open
    transaction (the driver always does that): nothing.

    The driver's default runs ``RESET ALL`` and more, one more round trip per
    read, and would undo `_session`'s setting. Our reads and lease transactions
    leave nothing behind on a session (no cursor, LISTEN or session lock).
    """


def _server_settings(url: str) -> dict[str, str]:
    """What the store's sessions tell the server: its ``application_name``, unless the
    URL's own (which the driver sends) or ``PGAPPNAME`` (which it does not read) names it."""
    with contextlib.suppress(ValueError):
        if "application_name" in urllib.parse.parse_qs(urllib.parse.urlsplit(url).query):
            return {}
    return {"application_name": os.environ.get("PGAPPNAME") or APPLICATION_NAME}


def _driver() -> Any:
    try:
        import asyncpg
    except ImportError:
        raise StoreError(
            "a PostgreSQL run store needs the postgres extra: pip install 'cadenza[postgres]'"
        ) from None
    return asyncpg


class PostgresRunStore(QueuedWrites):
    """A durable run store in a PostgreSQL database.

    Args:
        url: ``postgresql://user[:password]@host[:port]/database[?sslmode=...]``;
            libpq's ``PG*`` variables and ``~/.pgpass`` fill in what it leaves out.
    """

    save_document_statement = _SAVE_DOCUMENT
    release_lease_statement = _RELEASE_LEASE
    put_call_statement = _PUT_CALL
    put_blob_statement = _PUT_BLOB
    _writer: PostgresWriter

    def __init__(self, url: str) -> None:
        self.url = url
        password = url_password(url)
        if password:
            register_secret(password)
        self.where = repr(redacted_url(url))
        """The store as messages name it: its URL, the password masked."""
        self._writer = PostgresWriter(self.where, self._connect)
        self._pool: Any = None
        self._leases = HeldLeases()
        self._unreachable: tuple[type[BaseException], ...] = ()  # the driver's failures

    async def _connect(self) -> Any:
        """A new connection for the writer, set up like the pool's."""
        connection = await _driver().connect(
            self.url, timeout=CONNECT_TIMEOUT, server_settings=_server_settings(self.url)
        )
        try:
            await _session(connection)
        except BaseException:
            connection.terminate()
            raise
        return connection

    async def open(self) -> None:
        """Connects, creates or upgrades the schema, and starts the writer task.

        Raises:
            StoreError: The driver is missing, the server cannot be reached or
                refuses us, or the database was written by a newer Cadenza.
        """
        asyncpg = _driver()
        self._unreachable = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)
        writer: Any = None
        try:
            self._pool = await asyncpg.create_pool(
                self.url,
                min_size=1,
                max_size=POOL_SIZE,
                init=_session,
                reset=_released,
                timeout=CONNECT_TIMEOUT,
                server_settings=_server_settings(self.url),
            )
            writer = await self._connect()
            await migrate(writer, self.where)
        except StoreError:
            await self._abandon(writer)
            raise
        except (*self._unreachable, ValueError) as error:
            await self._abandon(writer)
            raise StoreError(f"cannot open the run store {self.where}: {_reason(error)}") from None
        self._writer.start(writer)

    async def _abandon(self, writer: Any) -> None:
        if writer is not None:
            await writer.close()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def close(self) -> None:
        """Commits what is queued, stops the writer and closes the connections."""
        await self._writer.stop()
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await pool.close()
            except self._unreachable:  # the server is gone: leave without its goodbye
                pool.terminate()

    # -- writes: queued, ordered, committed in batches by the writer task ----------------

    def begin_run(self, row: RunRow) -> None:
        """Queues a new run row."""
        inputs = _encode(row.inputs).decode()
        lease = self._leases.get(row.run_id)
        self._writer.put(_BEGIN_RUN, run_columns(row, inputs), lease)

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
            (run_id, address, record.status, body.decode(), crc(body)),
            self._leases.get(run_id),
        )

    def end_run(self, run_id: str, status: RunStatus, result: RunResult | None) -> None:
        """Queues the run's new status and result."""
        encoded = None if result is None else _encode(result).decode()
        lease = self._leases.get(run_id)
        self._writer.put(_END_RUN, (status, time.time(), encoded, run_id), lease)

    # -- reads: the pool, never the writer's connection -----------------------------------

    @contextlib.asynccontextmanager
    async def _reaching(self) -> AsyncIterator[Any]:
        """The pool, for one operation; a failure to reach the server is a `StoreError`.

        The pool gives a dead connection back closed and opens a new one when it
        is next asked, so the operation after the failed one goes to the server anew.
        """
        if self._pool is None:
            raise StoreError(f"the run store {self.where} is not open")
        try:
            yield self._pool
        except self._unreachable as error:
            raise StoreError(f"the run store {self.where} failed: {_reason(error)}") from error

    async def get_run(self, run_id: str) -> RunRow | None:
        """The run row, or None."""
        async with self._reaching() as pool:
            found = await pool.fetchrow(
                f"SELECT {RUN_COLUMNS} FROM cadenza_runs WHERE run_id = $1", run_id
            )
        return None if found is None else read_run(found)

    async def list_runs(self, *, limit: int = 100) -> list[RunRow]:
        """Most recent first."""
        async with self._reaching() as pool:
            rows = await pool.fetch(
                f"SELECT {RUN_COLUMNS} FROM cadenza_runs ORDER BY created_at DESC LIMIT $1",
                limit,
            )
        return [read_run(r) for r in rows]

    async def forks(self, run_id: str) -> list[RunRow]:
        """The runs forked from ``run_id``, oldest first."""
        async with self._reaching() as pool:
            rows = await pool.fetch(
                f"SELECT {RUN_COLUMNS} FROM cadenza_runs WHERE parent_run_id = $1 "
                "ORDER BY created_at",
                run_id,
            )
        return [read_run(r) for r in rows]

    async def events(
        self, run_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """The run's events after ``after_seq``, in order; the first ``limit`` of them only,
        when given."""
        return await paged_events(
            run_id, after_seq, limit, functools.partial(self._event_rows, run_id)
        )

    async def _event_rows(
        self, run_id: str, low: int, after: int, until: int | None, rows: int | None
    ) -> list[Any]:
        """`EventRows` of the run."""
        async with self._reaching() as pool:
            return list(
                await pool.fetch(
                    "SELECT seq, last_seq, body, crc FROM cadenza_events "
                    "WHERE run_id = $1 AND seq > $2 AND coalesce(last_seq, seq) > $3 "
                    "AND ($4::bigint IS NULL OR seq <= $4) ORDER BY seq LIMIT $5",
                    run_id,
                    low,
                    after,
                    until,
                    rows,
                )
            )

    async def steps(
        self, run_id: str, *, after: str | None = None, limit: int | None = None
    ) -> dict[str, StepRecord]:
        """The latest record of every address of the run; with ``limit``, of the first
        ``limit`` addresses after ``after`` in the store's order (a page)."""
        async with self._reaching() as pool:
            # Two statements, not `($2 IS NULL OR address > $2)`: a prepared statement's
            # generic plan need not use the index's range for the OR (see the SQLite store).
            if after is None:
                rows = await pool.fetch(
                    "SELECT address, status, record, crc FROM cadenza_steps WHERE run_id = $1 "
                    "ORDER BY address LIMIT $2",
                    run_id,
                    limit,
                )
            else:
                rows = await pool.fetch(
                    "SELECT address, status, record, crc FROM cadenza_steps WHERE run_id = $1 "
                    "AND address > $2 ORDER BY address LIMIT $3",
                    run_id,
                    after,
                    limit,
                )
        return read_steps(run_id, rows)

    async def calls(self, run_id: str, address: str | None = None) -> list[CallRecord]:
        """The run's calls (of ``address`` only, when given), by address, attempt and seq."""
        async with self._reaching() as pool:
            if address is None:
                rows = await pool.fetch(_CALLS.format(""), run_id)
            else:
                rows = await pool.fetch(_CALLS.format(" AND address = $2"), run_id, address)
        return read_calls(run_id, rows)

    # -- resuming, retention and maintenance ---------------------------------------------

    async def document(self, run_id: str) -> bytes | None:
        """The run's document, checked against its CRC, or None."""
        async with self._reaching() as pool:
            found = await pool.fetchrow(
                "SELECT body, crc FROM cadenza_documents WHERE run_id = $1", run_id
            )
        return read_document(run_id, found)

    async def acquire_lease(
        self, run_id: str, holder: LeaseHolder, *, ttl: float = DEFAULT_LEASE_TTL
    ) -> Lease:
        """Takes the run's lease at once, in its own transaction (row-locked, atomic).

        Raises:
            LeaseHeld: Another live process holds it, unexpired.
        """
        async with self._reaching() as pool, pool.acquire() as connection:
            lease = await take_lease(connection, run_id, holder, ttl)
        return self._leases.hold(lease)

    async def renew_lease(self, lease: Lease) -> None:
        """Extends ``lease`` by its ttl from now, on the server's clock.

        Raises:
            LeaseLost: Another holder took it.
            StoreError: The server could not be reached.
        """
        if lease.lost is not None:
            raise lease_lost(lease, lease.lost)
        async with self._reaching() as pool, pool.acquire() as connection:
            await renew_lease(connection, lease)

    async def take_queued(
        self, holder: LeaseHolder, *, ttl: float = DEFAULT_LEASE_TTL
    ) -> tuple[RunRow, Lease] | None:
        """Takes the lease of the queued run to start next (``FOR UPDATE SKIP LOCKED``).

        Raises:
            StoreError: The server could not be reached.
        """
        async with self._reaching() as pool, pool.acquire() as connection:
            lease = await take_queued(connection, holder, ttl)
            if lease is None:
                return None
            found = await connection.fetchrow(
                f"SELECT {RUN_COLUMNS} FROM cadenza_runs WHERE run_id = $1", lease.run_id
            )
        return read_run(found), self._leases.hold(lease)

    async def orphaned_runs(self, *, limit: int = 100) -> list[RunRow]:
        """Running runs whose lease is free or expired (on the server's clock), oldest first."""
        columns = ", ".join(f"r.{name}" for name in RUN_COLUMNS.split(", "))
        async with self._reaching() as pool:
            rows = await pool.fetch(
                f"SELECT {columns} FROM cadenza_runs r LEFT JOIN cadenza_leases l USING (run_id) "
                f"WHERE r.status = 'running' AND (l.run_id IS NULL OR l.expires_at <= {NOW}) "
                "ORDER BY r.created_at LIMIT $1",
                limit,
            )
        return [read_run(r) for r in rows]

    async def answered_runs(self, *, limit: int = 100) -> list[RunRow]:
        """Waiting runs whose newest event is an answer, oldest first."""
        async with self._reaching() as pool:
            rows = await pool.fetch(
                f"SELECT {RUN_COLUMNS} FROM cadenza_runs r WHERE status = 'waiting' AND "
                "(SELECT type FROM cadenza_events e WHERE e.run_id = r.run_id "
                "ORDER BY seq DESC LIMIT 1) = $1 ORDER BY created_at LIMIT $2",
                ANSWERED,
                limit,
            )
        return [read_run(r) for r in rows]

    async def send_command(self, run_id: str, command: Command) -> None:
        """Records ``command`` for the run's owner, committed when it returns.

        The bound is read in the insert's statement; posts committed at the same
        moment by other connections may each pass it (by at most one each).

        Raises:
            MessageRefused: A message past the run's bound (`WAITING_COMMANDS`).
        """
        body = encode_command(command)
        async with self._reaching() as pool:
            status = await pool.execute(
                "INSERT INTO cadenza_commands (run_id, body, created_at) SELECT $1, $2, $3 "
                "FROM (SELECT count(*) AS waiting, coalesce(sum(octet_length(body)), 0) AS size "
                "FROM cadenza_commands WHERE run_id = $1) AS w "
                "WHERE waiting < $4 AND size + octet_length($2) <= $5",
                run_id,
                body.decode(),
                time.time(),
                *command_bounds(command),
            )
        if status != "INSERT 0 1":
            raise refuse_command(run_id, body)

    async def take_commands(self, run_ids: Sequence[str]) -> list[tuple[str, Command]]:
        """Removes the commands for these runs and returns them, oldest first."""
        if not run_ids:
            return []
        async with self._reaching() as pool:
            # Commands are rare: a look that finds none costs one plain round trip, not
            # the encoding of every driven run's id (measured: 0.13 against 0.28 ms).
            if not await pool.fetchval("SELECT EXISTS (SELECT 1 FROM cadenza_commands)"):
                return []
            rows = await pool.fetch(
                "DELETE FROM cadenza_commands WHERE run_id = ANY($1::text[]) "
                "RETURNING id, run_id, body",
                list(run_ids),
            )
        return read_commands(sorted(rows, key=lambda row: row[0]))

    def forget_steps(self, run_id: str, prefix: str) -> None:
        """Queues the removal of the records and calls at ``prefix`` and below it, and of
        the blobs no call names any more."""
        lease = self._leases.get(run_id)
        under = (run_id, prefix, prefix + ".", prefix + "[")
        self._writer.put(_FORGET_STEPS, under, lease)
        self._writer.put(_FORGET_CALLS, under, lease)
        self._writer.put(_COLLECT_BLOBS, (run_id,), lease)

    async def delete_runs(self, run_ids: Sequence[str]) -> None:
        """Removes the runs with their events, records, documents, calls and leases."""
        for run_id, statement in itertools.product(run_ids, _DELETE_RUN):
            self._writer.put(statement, (run_id,))
        await self.flush()

    async def check(self) -> list[str]:
        """Every stored event, record, document, call and blob read back and checked, in one
        snapshot."""
        await self.flush()
        async with self._reaching() as pool, pool.acquire() as connection:
            return await integrity_problems(connection)

    async def beat_supervisor(self, row: SupervisorRow, *, ttl: float) -> None:
        """Records ``row`` live for ``ttl`` seconds on the server's clock, committed.

        Raises:
            StoreError: The server could not be reached.
        """
        async with self._reaching() as pool, pool.acquire() as connection:
            values = (*msgspec.structs.astuple(row)[:-1], encode_pool(row.pool))
            await beat_supervisor(connection, values, ttl)

    async def live_supervisors(self) -> list[SupervisorRow]:
        """The supervisors whose row has not expired (on the server's clock), by id.

        Raises:
            StoreError: The server could not be reached.
        """
        async with self._reaching() as pool:
            rows = await pool.fetch(
                f"SELECT {SUPERVISOR_COLUMNS} FROM cadenza_supervisors "
                f"WHERE expires_at > {NOW} ORDER BY supervisor_id"
            )
        return [read_supervisor(row) for row in rows]

    async def forget_supervisor(self, supervisor_id: str) -> None:
        """Deletes the supervisor's row, committed.

        Raises:
            StoreError: The server could not be reached.
        """
        async with self._reaching() as pool:
            await pool.execute(
                "DELETE FROM cadenza_supervisors WHERE supervisor_id = $1", supervisor_id
            )

    async def queue_depth(self) -> QueueDepth:
        """The queued runs by priority, and how long the oldest has waited (the server's
        clock against the submitters')."""
        async with self._reaching() as pool:
            groups = await pool.fetch(
                f"SELECT coalesce(priority, 0), count(*), min(created_at), {NOW} "
                "FROM cadenza_runs WHERE status = 'queued' GROUP BY 1"
            )
            now = await pool.fetchval(f"SELECT {NOW}") if not groups else groups[0][3]
        return QueueDepth.of([group[:3] for group in groups], now)


def _reason(error: BaseException) -> str:
    """The driver's words for ``error`` (the password, a registered secret, redacted)."""
    return redact(str(error)) or type(error).__name__
