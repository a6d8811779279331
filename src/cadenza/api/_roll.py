"""A supervisor on the fleet's roll: how ``cadenza worker --store`` finds it.

A runtime that takes runs from the store (``recover`` or ``capacity``) and has
remote workers is a supervisor of the fleet: every `BEAT` seconds (at most a
third of its lease) it tells the store where its workers connect, its
capacity, the runs it drives and the steps it has waiting for a worker and on
workers (`cadenza.store.SupervisorRow`), live for one lease's time to live.
A supervisor that dies stops telling: its row expires when the leases of its
runs do, so workers stop serving it as another supervisor takes its runs
over. One that shuts down takes its row off the roll at once.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from collections.abc import Callable
from typing import Final

import anyio

from cadenza._logging import get_logger
from cadenza._redact import redact
from cadenza.store import RunStore, SupervisorRow

__all__ = ["BEAT", "Roll"]

BEAT: Final = 1.0
"""Most seconds between two beats: how fresh the load workers split by is."""

_log = get_logger("cadenza.api")

Load = Callable[[], tuple[int, int, int]]
"""The supervisor's load now: runs it drives, steps waiting for a worker, steps on workers."""


class Roll:
    """One supervisor's row on the fleet's roll, kept alive until `leave`.

    Args:
        store: The fleet's store.
        workers: Where its workers connect (the dispatcher's advertised endpoint).
        capacity: The runs it drives at most, or None.
        load: Its load, read at each beat.
        ttl: Seconds a row lives unless beaten again (the supervisor's lease).
    """

    def __init__(
        self, store: RunStore, workers: str, capacity: int | None, load: Load, ttl: float
    ) -> None:
        host, pid = socket.gethostname(), os.getpid()
        self.supervisor_id = f"{host}-{pid}-{secrets.token_hex(4)}"
        self._row = SupervisorRow(self.supervisor_id, host, pid, workers, capacity)
        self._store = store
        self._load = load
        self._ttl = ttl
        self._every = min(BEAT, ttl / 3)
        self._failing = False

    async def beat_until_cancelled(self) -> None:
        """Beats every so often; a store that fails is said once, and tried again."""
        while True:
            await self.beat()
            await anyio.sleep(self._every)

    async def beat(self) -> None:
        """Tells the store this supervisor lives, with its load now."""
        runs, waiting, running = self._load()
        row = SupervisorRow(
            self._row.supervisor_id,
            self._row.host,
            self._row.pid,
            self._row.workers,
            self._row.capacity,
            runs,
            waiting,
            running,
        )
        try:
            await self._store.beat_supervisor(row, ttl=self._ttl)
        except Exception as error:
            # Workers lose sight of this supervisor once its row expires, and come back
            # when the store answers again; its runs go on meanwhile.
            if not self._failing:
                _log.warning("cannot record this supervisor on the roll", error=redact(str(error)))
            self._failing = True
        else:
            if self._failing:
                _log.info("recorded this supervisor on the roll again")
            self._failing = False

    async def leave(self) -> None:
        """Takes the row off the roll (best effort: a store away lets it expire)."""
        with contextlib.suppress(Exception), anyio.fail_after(5):
            await self._store.forget_supervisor(self.supervisor_id)
