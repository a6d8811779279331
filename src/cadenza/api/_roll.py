"""A supervisor on the fleet's roll: how ``cadenza worker --store`` finds it, and
``cadenza fleet`` shows it.

A runtime that takes runs from the store (``recover`` or ``capacity``) is a
supervisor of the fleet: every `BEAT` seconds (at most a third of its lease)
it tells the store where its workers connect (if it has remote workers), its
capacity, the runs it drives, the steps it has waiting for a worker and on
workers, and the workers connected to it with their load
(`cadenza.store.SupervisorRow`), live for one lease's time to live. A
supervisor that dies stops telling: its row expires when the leases of its
runs do, so workers stop serving it as another supervisor takes its runs
over. One that shuts down takes its row off the roll at once.

With telemetry on, each beat also gives the same figures, and the queue's
depth, to the OpenTelemetry metrics (`cadenza.telemetry.OpenTelemetry.fleet_metrics`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from collections.abc import Callable
from typing import Final, NamedTuple, Protocol

import anyio
import msgspec

from cadenza._logging import get_logger
from cadenza._redact import redact
from cadenza.store import QueueDepth, RunStore, SupervisorRow, WorkerLoad

__all__ = ["BEAT", "FleetFigures", "Load", "Roll"]

BEAT: Final = 1.0
"""Most seconds between two beats: how fresh the load workers split by is."""

_log = get_logger("cadenza.api")


class FleetFigures(Protocol):
    """Where a supervisor's beats go besides the store: the fleet's metrics."""

    def observe_supervisor(self, row: SupervisorRow) -> None:
        """Takes the supervisor's row as it was just beaten."""

    def observe_queue(self, queue: QueueDepth) -> None:
        """Takes the queue as the store counted it just now."""

    def forget_supervisor(self, supervisor_id: str) -> None:
        """Drops the supervisor: it left the roll."""


class Load(NamedTuple):
    """A supervisor's load now: what each beat tells the roll."""

    runs: int
    """The runs it drives."""
    waiting: int = 0
    """Its steps waiting for a worker's free credit."""
    running: int = 0
    """Its steps on workers."""
    pool: tuple[WorkerLoad, ...] = ()
    """The workers connected to it, with their capacity and its steps on each."""


class Roll:
    """One supervisor's row on the fleet's roll, kept alive until `leave`.

    Args:
        store: The fleet's store.
        workers: Where its workers connect (the dispatcher's advertised endpoint), or
            None when it runs steps itself.
        capacity: The runs it drives at most, or None.
        load: Its load, read at each beat.
        ttl: Seconds a row lives unless beaten again (the supervisor's lease).
        metrics: Where each beat's figures go too (telemetry on), or None.
    """

    def __init__(
        self,
        store: RunStore,
        workers: str | None,
        capacity: int | None,
        load: Callable[[], Load],
        ttl: float,
        metrics: FleetFigures | None = None,
    ) -> None:
        host, pid = socket.gethostname(), os.getpid()
        self.supervisor_id = f"{host}-{pid}-{secrets.token_hex(4)}"
        self._row = SupervisorRow(self.supervisor_id, host, pid, workers, capacity)
        self._store = store
        self._load = load
        self._ttl = ttl
        self._every = min(BEAT, ttl / 3)
        self._failing = False
        self._metrics = metrics

    async def beat_until_cancelled(self) -> None:
        """Beats every so often; a store that fails is said once, and tried again."""
        while True:
            await self.beat()
            await anyio.sleep(self._every)

    async def beat(self) -> None:
        """Tells the store this supervisor lives, with its load now."""
        load = self._load()
        row = msgspec.structs.replace(
            self._row,
            runs=load.runs,
            waiting=load.waiting,
            running=load.running,
            pool=load.pool,
        )
        if self._metrics is not None:
            self._metrics.observe_supervisor(row)
        try:
            await self._store.beat_supervisor(row, ttl=self._ttl)
            if self._metrics is not None:  # the queue as the store counts it now
                self._metrics.observe_queue(await self._store.queue_depth())
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
        if self._metrics is not None:
            self._metrics.forget_supervisor(self.supervisor_id)
        with contextlib.suppress(Exception), anyio.fail_after(5):
            await self._store.forget_supervisor(self.supervisor_id)
