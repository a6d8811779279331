"""A worker of the whole fleet: it serves every live supervisor the store's roll names.

`FleetWorker.run` reads the roll (`RunStore.live_supervisors`) every ``poll``
seconds. For each endpoint on it that it does not serve yet it starts a
`Worker` (one connection each, CURVE as with ``--connect``); a supervisor
that left the roll (it shut down, or died and its row expired) has its
worker stopped: what it held is gone with it, and the supervisor that takes
its runs over sends their steps to its own workers.

**The split.** All the workers of one `FleetWorker` share its concurrency:
one semaphore bounds the steps they run at once, and each announces its
share as credits (`split_credits`): every supervisor gets one credit (while
there are enough for all), the rest go in proportion to what each has to do,
its steps waiting for a worker plus those on workers, as its last beat told
the roll; with nothing to do anywhere, evenly. Shares are announced again
(`Worker.offer`) at every look, so credits follow the load within about a
second. A step sent just before a share shrank waits here for a slot.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from typing import Final

import anyio
import anyio.abc

from cadenza._logging import get_logger
from cadenza._redact import redact
from cadenza.protocols import MAX_CAPACITY
from cadenza.store import RunStore, SupervisorRow, make_store

from ._worker import Worker

__all__ = ["POLL", "FleetWorker", "split_credits"]

POLL: Final = 1.0
"""Seconds between two looks at the roll."""

_log = get_logger("cadenza.remote")


def split_credits(total: int, demands: Mapping[str, int]) -> dict[str, int]:
    """Shares ``total`` credits among supervisors by what each has to do (``demands``).

    Every supervisor gets one credit first when there are enough for all (else
    the busiest get one each); the rest go in proportion to demand, the largest
    remainders rounding up, or evenly when no one has anything to do. The
    shares add up to ``total``; ties go by the order of ``demands``.
    """
    names = list(demands)
    if not names:
        return {}
    if total < len(names):
        busiest = sorted(names, key=lambda name: -demands[name])[:total]
        return {name: int(name in busiest) for name in names}
    rest = total - len(names)
    weights = {name: max(0, demands[name]) for name in names}
    whole = sum(weights.values())
    if whole == 0:
        weights, whole = dict.fromkeys(names, 1), len(names)
    exact = {name: rest * weights[name] / whole for name in names}
    shares = {name: 1 + int(exact[name]) for name in names}
    left = total - sum(shares.values())
    by_remainder = sorted(names, key=lambda name: -(exact[name] - int(exact[name])))
    for name in by_remainder[:left]:
        shares[name] += 1
    return shares


class FleetWorker:
    """Runs steps for every live supervisor of a store; ``await fleet.run()`` until it
    drains or stops.

    Args:
        store: The fleet's store: a `RunStore`, a ``postgresql://`` URL or a SQLite path.
        concurrency: Steps run at once, across every supervisor.
        name: How events and results name this worker (default ``host-pid``).
        curve_keys: A key directory (``cadenza keys generate``) to speak CURVE with.
        poll: Seconds between two looks at the roll.

    Raises:
        KeysError: The key directory is incomplete.
        StoreError: ``store`` names no store this Cadenza can open.
    """

    def __init__(
        self,
        store: RunStore | str | os.PathLike[str],
        *,
        concurrency: int = 4,
        name: str | None = None,
        curve_keys: str | os.PathLike[str] | None = None,
        poll: float = POLL,
    ) -> None:
        if not 1 <= concurrency <= MAX_CAPACITY:
            raise ValueError(f"concurrency must be from 1 to {MAX_CAPACITY}, got {concurrency}")
        self._store = make_store(store)
        self.concurrency = concurrency
        self._curve_keys = curve_keys
        self._poll = poll
        # Built and dropped: a bad name or key directory fails now, not at the first supervisor.
        self.name = Worker("tcp://127.0.0.1:1", name=name, curve_keys=curve_keys).name
        self._slots = asyncio.Semaphore(concurrency)
        self._serving: dict[str, Worker] = {}
        self._refused: set[str] = set()  # endpoints speaking another protocol version
        self._leaving: str | None = None  # "drain" or "stop"
        self._woken = anyio.Event()
        self._failing = False

    @property
    def serving(self) -> list[str]:
        """The endpoints of the supervisors this worker serves now."""
        return list(self._serving)

    def drain(self) -> None:
        """Take no more steps, finish those in flight, then leave (a second call: `stop`)."""
        self._leave("stop" if self._leaving else "drain")

    def stop(self) -> None:
        """Cancel the steps in flight and leave now; the supervisors re-dispatch them."""
        self._leave("stop")

    def _leave(self, how: str) -> None:
        self._leaving = how
        for worker in self._serving.values():
            if how == "stop":
                worker.stop()
            else:
                worker.drain()
        self._woken.set()

    async def run(self) -> int:
        """Serves the roll's supervisors until drained or stopped; 0.

        Raises:
            StoreError: The store cannot be opened.
        """
        await self._store.open()
        try:
            async with anyio.create_task_group() as group:
                while self._leaving is None:
                    await self._look(group)
                    with anyio.move_on_after(self._poll):
                        await self._woken.wait()
                    self._woken = anyio.Event()
        finally:
            await self._store.close()
        _log.info("worker_left", worker=self.name)
        return 0

    async def _look(self, group: anyio.abc.TaskGroup) -> None:
        """Follows the roll: serve the new, stop serving the gone, share the credits."""
        try:
            rows = await self._store.live_supervisors()
        except Exception as error:  # keep serving those known; the next look tries again
            if not self._failing:
                _log.warning("roll_unreadable", worker=self.name, error=redact(str(error)))
            self._failing = True
            return
        self._failing = False
        demands = _demands(row for row in rows if row.workers not in self._refused)
        for endpoint in [known for known in self._serving if known not in demands]:
            _log.info("supervisor_gone", worker=self.name, endpoint=endpoint)
            self._serving.pop(endpoint).stop()
        for endpoint, share in split_credits(self.concurrency, demands).items():
            worker = self._serving.get(endpoint)
            if worker is None:
                worker = Worker(
                    endpoint,
                    concurrency=max(1, share),
                    name=self.name,
                    curve_keys=self._curve_keys,
                    slots=self._slots,
                )
                self._serving[endpoint] = worker
                _log.info("supervisor_found", worker=self.name, endpoint=endpoint, credits=share)
                group.start_soon(self._serve, endpoint, worker, name=f"worker of {endpoint}")
            worker.offer(share)

    async def _serve(self, endpoint: str, worker: Worker) -> None:
        if await worker.run() == 2:  # another protocol version: not to be tried again
            self._refused.add(endpoint)
        if self._serving.get(endpoint) is worker:
            del self._serving[endpoint]


def _demands(rows: Iterable[SupervisorRow]) -> dict[str, int]:
    """What each endpoint on the roll has to do: steps waiting plus steps on workers."""
    demands: dict[str, int] = {}
    for row in rows:
        if row.workers:
            demands[row.workers] = demands.get(row.workers, 0) + row.waiting + row.running
    return demands
