"""The dispatcher's engine: credits, least-loaded dispatch, liveness and fences.

`Pool` holds every connected worker session, every job, and the queue of jobs
waiting for a credit. It reacts to decoded messages and to heartbeat ticks,
and sends through a function it is given; it knows no sockets, so every
decision here is plain, synchronous bookkeeping on the event loop.

- **Credits.** A worker's `Hello` (or `Ready`) says how many jobs it may hold;
  a job goes to the least-loaded session with a free credit, or waits in FIFO
  order. Every `Result` of a session's job gives its credit back.
- **Liveness.** Anything heard from a session counts; one silent for
  ``heartbeat * liveness`` seconds, or unreachable, or that leaves, is lost.
- **Fences.** A lost session's live jobs go to the front of the queue with
  ``attempt`` incremented. A result is accepted only from the session holding
  the job under its current attempt; anything else is stale, refused and
  counted. An accepted job leaves the books, so it has exactly one result.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, Final

import msgspec
import zmq

from cadenza._logging import get_logger
from cadenza.kernel import Clock
from cadenza.protocols import (
    PROTOCOL_VERSION,
    CallMade,
    Cancel,
    Disconnect,
    Dispatch,
    Durable,
    Heartbeat,
    Hello,
    Mail,
    Ready,
    Result,
    StepEvent,
    Welcome,
    WireError,
    WorkerMessage,
)

from ._books import DispatcherStatistics, Job, WorkerEvent, WorkerRecord

__all__ = ["Pool"]

_FORMER: Final = 1024
"""Lost sessions whose names are kept, to name the sender of a late result."""

_COUNTS: Final = (
    "dispatched",
    "redispatched",
    "accepted",
    "rejected_results",
    "rejected_frames",
    "refused_peers",
    "lost_workers",
)

_log = get_logger("cadenza.remote")

Send = Callable[[bytes, bytes], None]
"""Sends a payload to a session; raises ``zmq.ZMQError`` when it is unreachable."""


class Pool:
    """Workers, jobs and the queue of one dispatcher (see the module docstring)."""

    def __init__(
        self, *, send: Send, emit: Callable[[WorkerEvent], None], clock: Clock, terms: Welcome
    ) -> None:
        self._send = send
        self._emit = emit
        self._clock = clock
        self._terms = terms
        self._encode = msgspec.msgpack.Encoder().encode
        self._beat = self._encode(Heartbeat())
        self.workers: dict[bytes, WorkerRecord] = {}
        self.jobs: dict[int, Job] = {}
        self.queue: deque[Job] = deque()
        self.counts = dict.fromkeys(_COUNTS, 0)
        self._former: OrderedDict[bytes, str] = OrderedDict()
        self.open = True

    def statistics(self) -> DispatcherStatistics:
        """Counters and current sizes."""
        in_flight = sum(len(record.jobs) for record in self.workers.values())
        return DispatcherStatistics(
            workers=len(self.workers), in_flight=in_flight, queued=len(self.queue), **self.counts
        )

    # -- jobs --------------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Sends a new job to a worker with a free credit, or queues it."""
        self.jobs[job.id] = job
        self.queue.append(job)
        if not self.workers:
            job.sink.queued(job.id)
            self._emit(WorkerEvent("waiting", message="no worker is connected"))
        self._pump()

    def abandon(self, job: Job) -> None:
        """The step stopped waiting: forget a queued job, cancel one on a worker."""
        if job.worker is None:
            self.jobs.pop(job.id, None)
            if job in self.queue:
                self.queue.remove(job)
        elif job.id in self.jobs:
            # The worker's answer to the cancel gives the credit back; until then it is spent.
            job.cancelled = True
            self._tell(job.worker.identity, Cancel(job.id, job.attempt, "cancelled"))

    def confirm(self, job_id: int, attempt: int, calls: int) -> None:
        """Sends `Durable` to the worker that holds ``job_id`` under fence ``attempt``."""
        job = self.jobs.get(job_id)
        if job is not None and job.worker is not None and job.attempt == attempt:
            self._tell(job.worker.identity, Durable(job_id, attempt, calls))

    def fail_all(self, error: BaseException) -> None:
        """Fails every job still waiting for a result; nothing more is dispatched."""
        self.open = False
        for job in self.jobs.values():
            if not job.future.done():
                job.future.set_exception(error)
        self.queue.clear()

    def say_goodbye(self, reason: str) -> None:
        """Tells every session the supervisor is going (best effort)."""
        for record in list(self.workers.values()):
            self._tell(record.identity, Disconnect(reason))

    # -- messages ----------------------------------------------------------------------

    def handle(self, identity: bytes, message: WorkerMessage) -> None:
        """Acts on one decoded message from the session ``identity``."""
        record = self.workers.get(identity)
        if record is not None:
            record.last_seen = self._clock.now()
        if isinstance(message, Result):
            self._on_result(identity, record, message)
            self._pump()
        elif isinstance(message, StepEvent | Mail | CallMade):
            self._on_step(record, message)
        elif isinstance(message, Hello):
            self._on_hello(identity, record, message)
        elif record is None:
            if not isinstance(message, Disconnect):
                self._tell(identity, Disconnect("unknown worker: say hello"))
        else:
            self._on_session(record, message)

    def _on_step(self, record: WorkerRecord | None, message: StepEvent | Mail | CallMade) -> None:
        """An event or a message from a job's step, passed on while the job is current."""
        job = self.jobs.get(message.job)
        if job is None or record is None or job.worker is not record:
            return  # a stale job's chatter: its result is what gets counted
        if job.attempt != message.attempt or job.cancelled:
            return
        if isinstance(message, Mail):
            job.sink.mail(message.text)
        elif isinstance(message, CallMade):
            job.sink.call(message.call)
        else:
            job.sink.event(message)

    def _on_session(self, record: WorkerRecord, message: WorkerMessage) -> None:
        """What a known worker says of itself: its capacity, its leaving, an error."""
        if isinstance(message, Ready):
            record.capacity = max(0, message.capacity)
            self._emit(WorkerEvent("ready", record.name, data={"capacity": record.capacity}))
            self._pump()
        elif isinstance(message, Disconnect):
            self.lose(record, f"left: {message.reason}" if message.reason else "left")
            self._pump()
        elif isinstance(message, WireError):
            _log.warning(
                "worker_error", worker=record.name, code=message.code, error=message.message
            )
        # A Heartbeat: being heard was the point.

    def _on_hello(self, identity: bytes, record: WorkerRecord | None, hello: Hello) -> None:
        if hello.version != PROTOCOL_VERSION:
            _log.warning("worker_version", worker=hello.name, version=hello.version)
            text = f"this supervisor speaks protocol {PROTOCOL_VERSION}, not {hello.version}"
            self._tell(identity, WireError("version", text))
            return
        welcome = self._terms
        if record is not None:
            # The same session again (it was told "unknown" more than once): not news.
            record.capacity = max(0, hello.capacity)
            self._tell(identity, welcome)
            self._pump()
            return
        name = hello.name or identity.hex()
        record = WorkerRecord(identity, name, max(0, hello.capacity), self._clock.now())
        self.workers[identity] = record
        self._tell(identity, welcome)
        _log.debug("worker_connected", worker=name, capacity=record.capacity, pid=hello.pid)
        self._emit(WorkerEvent("worker_connected", name, data={"capacity": record.capacity}))
        self._pump()

    def _on_result(self, identity: bytes, record: WorkerRecord | None, result: Result) -> None:
        job = self.jobs.get(result.job)
        if (
            job is None
            or record is None
            or job.worker is not record
            or job.attempt != result.attempt
        ):
            self.counts["rejected_results"] += 1
            name = record.name if record is not None else self._former.get(identity, identity.hex())
            _log.warning("result_rejected", worker=name, job=result.job, attempt=result.attempt)
            if job is not None and not job.cancelled and not job.future.done():
                job.sink.rejected(name, job.id, result.attempt)
            data = {"job": result.job, "attempt": result.attempt}
            self._emit(WorkerEvent("result_rejected", name, data=data))
            return
        del self.jobs[job.id]
        del record.jobs[job.id]
        if not job.cancelled and not job.future.done():
            self.counts["accepted"] += 1
            job.future.set_result(result)

    # -- dispatching -------------------------------------------------------------------

    def _least_loaded(self) -> WorkerRecord | None:
        best: WorkerRecord | None = None
        best_load = 1.0
        for record in self.workers.values():
            held = len(record.jobs)
            if held < record.capacity:
                load = held / record.capacity
                if best is None or load < best_load:
                    best, best_load = record, load
        return best

    def _transmit(self, worker: WorkerRecord, job: Job) -> bool:
        """Gives ``job`` to ``worker``; False (and the worker lost) when it is unreachable."""
        job.worker = worker
        worker.jobs[job.id] = job
        payload = job.payload if job.attempt == 1 else None
        if payload is None:
            payload = self._encode(Dispatch(job.id, job.attempt, job.order))
        try:
            self._send(worker.identity, payload)
        except zmq.ZMQError as error:  # EHOSTUNREACH: the connection is gone
            self.lose(worker, f"unreachable: {error}")
            return False
        self.counts["dispatched"] += 1
        job.sink.dispatched(worker.name, job.id, job.attempt)
        return True

    def _pump(self) -> None:
        """Sends queued jobs while some worker has a free credit."""
        queue = self.queue
        while queue and self.open:
            worker = self._least_loaded()
            if worker is None:
                return
            self._transmit(worker, queue.popleft())

    def _tell(self, identity: bytes, message: Any) -> None:
        try:
            self._send(identity, self._encode(message))
        except zmq.ZMQError:
            _log.debug("peer_gone", peer=identity.hex())

    # -- liveness ----------------------------------------------------------------------

    def tick(self) -> None:
        """A heartbeat period passed: lose the silent, beat to the others, dispatch."""
        now = self._clock.now()
        limit = self._terms.heartbeat * self._terms.liveness
        for record in list(self.workers.values()):
            if now - record.last_seen > limit:
                self.lose(record, f"silent for {now - record.last_seen:.2f}s")
                continue
            try:
                self._send(record.identity, self._beat)
            except zmq.ZMQError as error:
                self.lose(record, f"unreachable: {error}")
        self._pump()

    def lose(self, record: WorkerRecord, reason: str) -> None:
        """Forgets a session; every live job it held goes out again, fenced anew."""
        if self.workers.get(record.identity) is not record:
            return
        del self.workers[record.identity]
        self._former[record.identity] = record.name
        if len(self._former) > _FORMER:
            self._former.popitem(last=False)
        again: list[Job] = []
        for job in record.jobs.values():
            if job.cancelled or job.future.done():
                self.jobs.pop(job.id, None)
                continue
            job.attempt += 1
            job.worker = None
            again.append(job)
            job.sink.requeued(record.name, job.id, job.attempt, reason)
        record.jobs.clear()
        self.queue.extendleft(reversed(again))  # they have waited longest
        self.counts["redispatched"] += len(again)
        self.counts["lost_workers"] += 1
        left = reason.startswith("left")
        log = _log.debug if left else _log.warning
        log("worker_lost", worker=record.name, in_flight=len(again), reason=reason)
        kind = "worker_left" if left else "worker_lost"
        self._emit(WorkerEvent(kind, record.name, reason, {"inFlight": len(again)}))
