"""The PostgreSQL store's writer: one task, group commit; a failed batch fails only its runs.

Writes are queued as (`Statement`, parameters) and never wait. The writer task,
on the event loop the store was opened on, takes everything queued so far,
writes it in one transaction and commits once, then resolves every
`PostgresWriter.flush` whose barrier was in that batch: steps that finish
together share one commit, and each still waits for its own durability. The
driver is asynchronous, so nothing here blocks the event loop.

A batch is written table by table, in queue order within each table. Tables
have no triggers or foreign keys, so statements on different tables commute
inside the transaction. A row of an upsert (`Statement.key`) that a later row
of the same batch replaces is not written. The common batch (a step's events
and records: upserts, one run per table) goes as one statement, each table's
rows as a ``VALUES`` list (a few) or as arrays (``unnest``, many) in a
data-modifying ``WITH``, committed on its
own: one round trip to the server per batch, so a step boundary costs about
one committed INSERT. Any other batch is a transaction with one
``executemany`` per run of one statement.

Writes of a run whose lease this store holds carry that `Lease`. The common
batch still goes as one statement: its first part locks the fenced runs' lease
rows ``FOR KEY SHARE`` where they still carry their fences (a taker's ``FOR UPDATE``
waits for our commit, and we for its) and fails, writing nothing, unless it
found them all. Only then, or for a batch that is not one statement, is the
batch written in a transaction that first reads the fences the same way and
leaves out the writes of each run whose fence changed; that run's lease is
marked lost (`LeaseLost` at its next flush), and the other runs' writes commit.

A failed commit (the server restarted, a connection killer ended the session,
the network broke) fails its batch, not the store. Each run with writes in it
has its lease marked failed (`cadenza.store.lease_failed`): that run cannot
know what of it is stored, so it stops and gives its lease back, and its
flushes raise `StoreFailed`; a flush of no run in that batch raises
`StoreError`. The connection is dropped, and the next batch opens a new one:
the other runs, and the failed ones once they are taken up again, go on as
soon as the server answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from cadenza._failpoints import failpoint
from cadenza._logging import get_logger
from cadenza._redact import redact
from cadenza.errors import StoreError
from cadenza.store._batch import queue_run
from cadenza.store._lease import Lease, lease_failed, lease_lost

__all__ = ["PostgresWriter", "Statement"]


class Statement(NamedTuple):
    """One SQL statement the writer runs, and what it needs to know to batch it.

    Attributes:
        sql: The statement, with ``$n`` parameters.
        table: The one table it writes.
        key: For an upsert: how many leading parameters are the primary key (a
            later row with the same key replaces the row); else 0.
        bulk: For an upsert: the same for many rows at once, a template whose
            ``{n}`` is the n-th parameter as an array (``unnest({0}::text[], ...)``).
        values: For an upsert: the same for a few rows, a template whose
            ``{rows}`` is ``($1, $2), ($3, $4)...``.
        pack: Makes the rows written of a batch's rows queued with it (the events'
            packs, ``_records.pack_events``); None: each queued row is written.
    """

    sql: str
    table: str
    key: int = 0
    bulk: str | None = None
    values: str | None = None
    pack: Callable[[list[tuple[Any, ...]]], list[tuple[Any, ...]]] | None = None


_Write = tuple[Statement, tuple[Any, ...], Lease | None]
_Barrier = tuple["asyncio.Future[str | None]", Lease | None]
"""A flush waiting for its batch: resolved with why the batch failed (None: committed)."""
_FEW = 4  # rows of one table that go as a VALUES list rather than as arrays
_FENCE_FAILED = "22012"  # division_by_zero: how a fenced statement says a fence changed
_CLOSE_TIMEOUT = 5.0  # seconds a goodbye to the server may take before the socket is cut

_log = get_logger("cadenza.store")


class PostgresWriter:
    """The writer task of one PostgreSQL store.

    Args:
        where: The store as errors name it (its URL without the password).
        connect: Opens a new connection, set up like the first one: the writer
            calls it for the batch after a failed one.
    """

    def __init__(self, where: str, connect: Callable[[], Awaitable[Any]]) -> None:
        self.where = where
        self._connect = connect
        self._connection: Any = None
        self._queue: list[_Write] = []
        self._barriers: list[_Barrier] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._failure: BaseException | None = None

    def start(self, connection: Any) -> None:
        """Starts the task on the running event loop; it owns ``connection`` (and the
        connections that replace it)."""
        self._stopping = False
        self._connection = connection
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="cadenza-store")

    async def stop(self) -> None:
        """Commits what is queued, ends the task and closes its connection."""
        task, self._task = self._task, None
        if task is not None:
            self._stopping = True
            self._wake.set()
            await task
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                await connection.close(timeout=_CLOSE_TIMEOUT)
            except Exception:  # gone already, or no answer: nothing is owed to it
                connection.terminate()

    def put(
        self, statement: Statement, parameters: tuple[Any, ...], lease: Lease | None = None
    ) -> None:
        """Queues one statement, fenced by ``lease`` when its run's lease is held;
        the task writes it with whatever else is queued."""
        if lease is not None and lease.stopped:
            return  # refused already, or failed: the run no longer goes on here
        self._queue.append((statement, parameters, lease))
        self._wake.set()

    async def flush(self, lease: Lease | None = None) -> None:
        """Returns once the task has committed everything queued before this call.

        ``lease`` is the run the caller drives, as for `Writer.flush`.

        Raises:
            StoreError: What was queued before could not be committed (asked
                without a ``lease``), the task failed, or the store is closed:
                nothing would commit what waits.
        """
        self._raise_failure()
        if self._task is None:
            raise StoreError(f"the run store {self.where} is closed")
        done: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._barriers.append((done, lease))
        self._wake.set()
        failed = await done
        self._raise_failure()
        if failed is not None:
            raise StoreError(failed)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise StoreError(f"the run store failed: {self._failure}") from self._failure

    async def _loop(self) -> None:
        barriers: list[_Barrier] = []
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                # Group commit: whatever piled up while we were committing goes in one go.
                batch, self._queue = self._queue, []
                barriers, self._barriers = self._barriers, []
                failed = await self._commit(batch) if batch else None
                _resolve(barriers, failed)
                if self._stopping and not self._queue and not self._barriers:
                    return
        except BaseException as error:  # cancelled with the loop, or a bug: nobody may hang
            if self._failure is None:
                self._failure = error
            _resolve(barriers + self._barriers, None)  # they raise the failure
            raise
        finally:
            self._task = None

    async def _commit(self, batch: list[_Write]) -> str | None:
        """Writes and commits ``batch``; why it failed, or None once it is committed."""
        leases = list({id(lease): lease for _, _, lease in batch if lease is not None}.values())
        try:
            connection = await self._connected()
            plan = _plan(batch)
            fenced = None if any(lease.stopped for lease in leases) else leases
            single = None if fenced is None else _single_statement(plan, fenced)
            if single is not None:
                failpoint("store.before_commit")  # nothing is sent yet: nothing commits
                try:
                    await connection.execute(single[0], *single[1])
                except Exception as error:
                    if getattr(error, "sqlstate", None) != _FENCE_FAILED:
                        raise
                    # A fence changed: nothing of the batch was written. Find whose,
                    # and commit the others' writes.
                    await self._commit_fenced(connection, batch, leases)
            else:
                await self._commit_fenced(connection, batch, leases)
            failpoint("store.after_commit")
        except Exception as error:  # the driver's, the server's, the network's
            return self._failed(leases, error)
        return None

    async def _connected(self) -> Any:
        """The writer's connection: a new one after a failed batch (or a closed one)."""
        if self._connection is None or self._connection.is_closed():
            self._drop_connection()
            self._connection = await self._connect()
        return self._connection

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.terminate()  # no goodbye: it may be half-way through a broken batch

    def _failed(self, leases: list[Lease], error: Exception) -> str:
        """Fails the batch: its runs' leases, and the connection it was written on."""
        self._drop_connection()
        reason = redact(str(error)) or type(error).__name__
        why = f"the run store {self.where} could not commit its writes: {reason}"
        _log.info("a write batch failed", store=self.where, error=reason, runs=len(leases))
        _log.debug("the failed batch's traceback", exc_info=error)
        for lease in leases:
            if lease.lost is None:  # a lost one is another process's run: nothing to stop
                lease_failed(lease, why)
        return why

    async def _commit_fenced(
        self, connection: Any, batch: list[_Write], leases: list[Lease]
    ) -> None:
        """The batch in a transaction, less the writes of runs whose lease was lost."""
        async with connection.transaction():
            refused = await _refused(connection, leases)
            failpoint("store.in_transaction")  # (a process paused here: tests/durability)
            kept = [w for w in batch if w[2] is None or id(w[2]) not in refused]
            await _write(connection, _plan(kept))
            failpoint("store.before_commit")


async def _refused(connection: Any, leases: list[Lease]) -> set[int]:
    """The ids of the leases whose fence changed, marked lost; their rows stay locked."""
    lost = {id(lease) for lease in leases if lease.stopped}
    asked = [lease for lease in leases if not lease.stopped]
    if not asked:
        return lost
    rows = await connection.fetch(
        "SELECT run_id, fence FROM cadenza_leases WHERE run_id = ANY($1::text[]) FOR KEY SHARE",
        [lease.run_id for lease in asked],
    )
    fences = {row[0]: row[1] for row in rows}
    for lease in asked:
        now = fences.get(lease.run_id)
        if now != lease.fence:
            lease_lost(lease, f"another process took the run over (fence {lease.fence}, now {now})")
            lost.add(id(lease))
    return lost


async def _write(connection: Any, plan: list[tuple[Statement, list[tuple[Any, ...]]]]) -> None:
    """Writes the plan inside the caller's transaction: one statement when it can."""
    if not plan:
        return
    single = _single_statement(plan)
    if single is not None:
        await connection.execute(single[0], *single[1])
        return
    for statement, rows in plan:
        if len(rows) == 1:
            await connection.execute(statement.sql, *rows[0])
        else:
            await connection.executemany(statement.sql, rows)


def _plan(batch: list[_Write]) -> list[tuple[Statement, list[tuple[Any, ...]]]]:
    """The batch as runs of one statement: table by table, in queue order within each."""
    tables: dict[str, list[tuple[Any, list[tuple[Any, ...]]]]] = {}
    for statement, parameters, _ in batch:
        queue_run(tables, statement, parameters)
    return [
        (statement, _latest(statement, rows))
        for runs in tables.values()
        for statement, rows in runs
    ]


def _single_statement(
    plan: list[tuple[Statement, list[tuple[Any, ...]]]], leases: list[Lease] | None = None
) -> tuple[str, list[Any]] | None:
    """The plan as one statement (SQL, parameters) when every run is a bulk upsert of
    its own table; else None.

    With ``leases``, the statement first locks their lease rows ``FOR KEY SHARE``
    where they still have their fences, and divides by zero (`_FENCE_FAILED`:
    nothing is written) unless it found them all. A locked row is re-read at
    its newest version, so a fence changed since the statement began counts.
    """
    if not plan or len({statement.table for statement, _ in plan}) != len(plan):
        return None
    parts: list[str] = []
    parameters: list[Any] = []
    result = "SELECT 1"
    if leases:
        parts.append(_fence(leases, parameters))
        result = "SELECT ok FROM fence"
    for statement, rows in plan:
        if statement.bulk is None or statement.values is None:
            return None
        sql = _upsert(statement.values, statement.bulk, rows, parameters)
        parts.append(f"w{len(parts)} AS ({sql})")
    return f"WITH {', '.join(parts)} {result}", parameters


def _fence(leases: list[Lease], parameters: list[Any]) -> str:
    """`_single_statement`'s ``fence`` part, its parameters added to ``parameters``."""
    if len(leases) == 1:  # the common batch: one run's step; an index lookup plans fastest
        parameters += [leases[0].run_id, leases[0].fence]
        held = "run_id = $1 AND fence = $2"
    else:
        parameters += [[lease.run_id for lease in leases], [lease.fence for lease in leases]]
        held = "(run_id, fence) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))"
    return (
        f"fence AS (SELECT 1 / (count(*) = {len(leases)})::int AS ok FROM ("
        f"SELECT 1 FROM cadenza_leases WHERE {held} FOR KEY SHARE OF cadenza_leases"
        ") AS held)"
    )


def _upsert(values: str, bulk: str, rows: list[tuple[Any, ...]], parameters: list[Any]) -> str:
    """A bulk upsert of ``rows`` (a statement's ``values`` or ``bulk`` form), its parameters
    added to ``parameters``."""
    if len(rows) <= _FEW:
        # A VALUES list plans faster than unnest; its text depends on the row
        # count, so only small counts (a handful of prepared statements) use it.
        listed = []
        for row in rows:
            first = len(parameters) + 1
            listed.append("(" + ", ".join(f"${first + i}" for i in range(len(row))) + ")")
            parameters.extend(row)
        return values.format(rows=", ".join(listed))
    columns = [list(column) for column in zip(*rows, strict=True)]
    numbers = [f"${len(parameters) + i + 1}" for i in range(len(columns))]
    parameters.extend(columns)
    return bulk.format(*numbers)


def _latest(statement: Statement, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The rows of a run of one statement that are not replaced later in the run (or
    the rows its ``pack`` makes of them)."""
    if statement.pack is not None:
        return statement.pack(rows)
    if not statement.key or len(rows) == 1:
        return rows
    key = statement.key
    latest = {row[:key]: row for row in rows}  # rows of different keys commute
    return rows if len(latest) == len(rows) else list(latest.values())


def _resolve(barriers: list[_Barrier], failed: str | None) -> None:
    """Wakes the flushes of a batch: with why it ``failed``, except those of a run whose
    writes in it were not the ones that failed (its lease was not marked)."""
    for future, lease in barriers:
        if not future.done():  # a flush cancelled while it waited
            fine = lease is not None and lease.failed is None
            future.set_result(None if fine else failed)
