"""The dispatcher's books: jobs, connected workers, and what it reports about them.

Plain records, no sockets. A `Job` is one step attempt handed to the
dispatcher; it keeps its delivery fence (``attempt``), which grows each time
the job goes out again after its worker was lost. A `WorkerRecord` is one
connected worker session: its announced capacity (its credits) and the jobs it
holds. `WorkerEvent`, `WorkerInfo` and `DispatcherStatistics` are what users
see of all this.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import msgspec

from cadenza.actors.steps import DispatchSink
from cadenza.protocols import Result, WorkOrder

__all__ = ["DispatcherStatistics", "Job", "WorkerEvent", "WorkerInfo", "WorkerRecord"]


@dataclass(eq=False, slots=True)
class Job:
    """One step attempt in the dispatcher's hands, from `execute` to its accepted result.

    Attributes:
        id: Unique within the dispatcher; the worker echoes it.
        attempt: The delivery fence: 1 on the first dispatch, +1 per re-dispatch.
            A result whose fence is not the current one is stale and refused.
        order: What to run.
        sink: Where the step hears about dispatches, events and messages.
        future: Resolved with the one accepted `Result`.
        payload: The encoded first `Dispatch` (re-dispatches encode their own).
        worker: The session holding the job, or None while it is queued.
        cancelled: The step gave up on it; the worker's answer only frees the credit.
    """

    id: int
    attempt: int
    order: WorkOrder
    sink: DispatchSink
    future: asyncio.Future[Result]
    payload: bytes | None = None
    worker: WorkerRecord | None = None
    cancelled: bool = False


@dataclass(eq=False, slots=True)
class WorkerRecord:
    """One connected worker session (a new connection is a new session).

    Attributes:
        identity: The ZeroMQ routing id of the session.
        name: The worker's name, as it introduced itself.
        capacity: Credits: the most jobs it may hold at once (0: draining).
        last_seen: When anything last arrived from it (the dispatcher's clock).
        jobs: The jobs it holds, by id.
    """

    identity: bytes
    name: str
    capacity: int
    last_seen: float
    jobs: dict[int, Job] = field(default_factory=dict)

    def info(self) -> WorkerInfo:
        """A snapshot for users."""
        return WorkerInfo(name=self.name, capacity=self.capacity, in_flight=len(self.jobs))


class WorkerInfo(msgspec.Struct, frozen=True):
    """A connected worker as `Dispatcher.workers` shows it."""

    name: str
    capacity: int
    in_flight: int


class WorkerEvent(msgspec.Struct, frozen=True, omit_defaults=True):
    """Something that happened to the dispatcher's workers (see `Dispatcher.subscribe`).

    Types: ``worker_connected``, ``worker_lost`` (data ``{inFlight, reason}``),
    ``worker_left``, ``ready`` (data ``{capacity}``), ``result_rejected`` (data
    ``{job, attempt}``), ``frame_rejected`` (data ``{reason}``), ``peer_refused``
    (data ``{code}``: ``no-curve``, ``bad-handshake``, ``unknown-key`` with
    ``key``, or ``handshake``), ``waiting`` (a step waits: no worker is connected).
    """

    type: str
    worker: str | None = None
    message: str | None = None
    data: dict[str, Any] | None = None


class DispatcherStatistics(msgspec.Struct, frozen=True):
    """Counters since the dispatcher started, and what it holds now.

    Attributes:
        workers: Connected worker sessions.
        in_flight: Jobs out on workers.
        queued: Jobs waiting for a worker's credit.
        dispatched: `Dispatch` messages sent (re-dispatches included).
        redispatched: Jobs sent out again because their worker was lost.
        accepted: Results accepted: one per finished job.
        rejected_results: Stale results refused by their fence (or from a stranger).
        rejected_frames: Frames that did not decode, or came in the wrong shape.
        refused_peers: Connections refused by CURVE or its allow-list.
        lost_workers: Sessions declared lost (silent, unreachable) or that left.
    """

    workers: int
    in_flight: int
    queued: int
    dispatched: int
    redispatched: int
    accepted: int
    rejected_results: int
    rejected_frames: int
    refused_peers: int
    lost_workers: int
