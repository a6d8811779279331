"""The SQLite store's writer: one thread, group commit, a failure that sticks.

Writes are queued as (SQL, parameters) and never wait. The writer thread takes
everything queued so far, writes it in one transaction and commits once, then
wakes every `GroupWriter.flush` whose barrier was in that batch: steps that
finish together share one fsync, and each still waits for its own durability.
Runs of one statement in a batch go to ``executemany``: one call instead of one
per row holds the GIL, so a burst of events does not starve the event loop.

After a failed commit every later `flush` raises `StoreError`: a run that can no
longer be recorded must not go on as if it were.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from cadenza.errors import StoreError

from ._failpoints import failpoint
from ._sqlite_schema import connect

__all__ = ["GroupWriter"]

_Write = tuple[str, tuple[Any, ...]]
_Waker = Callable[[], None]
_STOP = object()


class GroupWriter:
    """The writer thread of one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._queue: queue.SimpleQueue[_Write | _Waker | object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    def start(self) -> None:
        """Starts the thread (it opens its own connection)."""
        self._thread = threading.Thread(target=self._loop, name="cadenza-store", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Commits what is queued and ends the thread."""
        if self._thread is not None:
            self._queue.put(_STOP)
            await anyio.to_thread.run_sync(self._thread.join)
            self._thread = None

    def put(self, sql: str, parameters: tuple[Any, ...]) -> None:
        """Queues one statement."""
        self._queue.put((sql, parameters))

    async def flush(self) -> None:
        """Waits until everything queued before this call is committed.

        Raises:
            StoreError: The writer failed; the run cannot be recorded any further;
                or the store is closed (nobody would ever commit what waits).
        """
        self._raise_failure()
        if self._thread is None:
            raise StoreError(f"the run store {str(self.path)!r} is closed")
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def wake() -> None:
            loop.call_soon_threadsafe(_resolve, done)

        self._queue.put(wake)
        await done
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise StoreError(f"the run store failed: {self._failure}") from self._failure

    def _loop(self) -> None:
        connection = connect(self.path)
        try:
            while True:
                batch = [self._queue.get()]
                # Group commit: whatever piled up while we were committing goes in one go.
                while True:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                if self._commit(connection, batch):
                    return
        finally:
            connection.close()

    def _commit(self, connection: sqlite3.Connection, batch: list[Any]) -> bool:
        wakers: list[_Waker] = []
        stop = False
        writes = 0
        try:
            connection.execute("BEGIN")
            sql, rows = "", list[tuple[Any, ...]]()
            for item in [*batch, None]:
                if item is None or item is _STOP or callable(item) or item[0] != sql:
                    if rows:
                        connection.executemany(sql, rows)
                        writes += len(rows)
                    sql, rows = "", []
                if item is _STOP:
                    stop = True
                elif callable(item):
                    wakers.append(item)
                elif item is not None:
                    sql = item[0]
                    rows.append(item[1])
            if writes:
                failpoint("store.before_commit")
            connection.execute("COMMIT")
            if writes:
                failpoint("store.after_commit")
        except sqlite3.Error as error:
            self._failure = error
            if connection.in_transaction:
                connection.execute("ROLLBACK")
        for wake in wakers:
            wake()
        return stop


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
