"""The supervisor's side of remote workers: one ROUTER, credits, heartbeats, fences.

`Dispatcher` binds a ZeroMQ ROUTER that workers connect to. A worker's
`Hello` grants credits (its capacity); `execute` sends a job to the least
loaded worker with a free credit, or queues it, and a `Result` gives the
credit back. So no worker ever holds more jobs than it announced, and a step
waits rather than fails while no worker is connected.

Heartbeats go both ways (the Paranoid Pirate pattern): every ``heartbeat``
seconds each side sends one, and anything heard counts as life. A worker
silent for ``heartbeat * liveness`` seconds, or unreachable, is lost: each job
it held goes out again with its fence (``attempt``) incremented. A result is
accepted only from the session holding the job under its current fence, so a
late result from a lost worker is refused and counted, and each job has
exactly one accepted result.

Receiving polls the async socket, then drains it with non-blocking receives on
a shadow; every send goes through the async socket, whose bookkeeping keeps
the receiver's wake-ups (sending on a shadow while a poll waits can lose them).
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections import OrderedDict, deque
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final

import anyio
import anyio.abc
import msgspec
import structlog
import zmq
import zmq.asyncio

from cadenza.actors._remote import DispatchSink
from cadenza.errors import DispatcherClosed, RemoteError
from cadenza.protocols import (
    PROTOCOL_VERSION,
    Cancel,
    Disconnect,
    Dispatch,
    Heartbeat,
    Hello,
    Mail,
    Ready,
    Result,
    StepEvent,
    WireError,
    Welcome,
    WorkerMessage,
    WorkOrder,
    supervisor_decoder,
)
from cadenza.runtime import Clock, SystemClock

from ._auth import secure_server, watch_handshakes
from ._books import DispatcherStatistics, Job, WorkerEvent, WorkerInfo, WorkerRecord
from ._keys import check_endpoint, load_server_keys

__all__ = ["DEFAULT_MAX_MESSAGE", "Dispatcher"]

DEFAULT_MAX_MESSAGE: Final = 64 * 1024 * 1024
"""The largest frame accepted (a command keeps up to 10 MiB per stream, twice over)."""

_BATCH: Final = 256
"""Frames handled per wake-up before other tasks get a turn."""

_FORMER: Final = 1024
"""Lost sessions whose names are kept, to name the sender of a late result."""

_log = structlog.get_logger("cadenza.remote")


class Dispatcher:
    """Runs work orders on connected workers; use it as ``async with``.

    Args:
        endpoint: Where to bind, e.g. ``tcp://127.0.0.1:5555`` (port ``*`` picks one;
            `endpoint` then tells which).
        curve_keys: A key directory (``cadenza keys generate``): be a CURVE server
            that lets in the keys under ``authorized/`` only.
        insecure: Allow a non-loopback endpoint without keys.
        heartbeat: Seconds between heartbeats, both ways.
        liveness: Heartbeats a worker may miss before it is declared lost.
        max_message_size: The largest frame accepted, in bytes.
        clock: Heartbeats and liveness run on it.

    Raises:
        InsecureEndpoint: A non-loopback endpoint without keys or ``insecure``.
        KeysError: The key directory is incomplete.
    """

    def __init__(
        self,
        endpoint: str = "tcp://127.0.0.1:5555",
        *,
        curve_keys: str | os.PathLike[str] | None = None,
        insecure: bool = False,
        heartbeat: float = 1.0,
        liveness: int = 3,
        max_message_size: int = DEFAULT_MAX_MESSAGE,
        clock: Clock | None = None,
    ) -> None:
        if heartbeat <= 0 or liveness < 1:
            raise ValueError("heartbeat must be positive and liveness at least 1")
        self._keys = load_server_keys(curve_keys) if curve_keys is not None else None
        check_endpoint(endpoint, keys=self._keys is not None, insecure=insecure)
        self._endpoint = endpoint
        self._heartbeat = heartbeat
        self._liveness = liveness
        self._max_message = max_message_size
        self._clock: Clock = clock or SystemClock()
        self._encode = msgspec.msgpack.Encoder().encode
        self._decode = supervisor_decoder().decode
        self._ids = itertools.count(1)
        self._workers: dict[bytes, WorkerRecord] = {}
        self._former: OrderedDict[bytes, str] = OrderedDict()
        self._jobs: dict[int, Job] = {}
        self._queue: deque[Job] = deque()
        self._sinks: list[Callable[[WorkerEvent], None]] = []
        self._counts = dict.fromkeys(
            ("dispatched", "redispatched", "accepted", "rejected_results", "rejected_frames"), 0
        )
        self._counts.update(refused_peers=0, lost_workers=0)
        self._running = False
        self._context: zmq.asyncio.Context | None = None
        self._socket: zmq.asyncio.Socket | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._auth: Any = None

    @property
    def endpoint(self) -> str:
        """The bound endpoint once running (with the port the system picked), else the asked one."""
        return self._endpoint

    @property
    def workers(self) -> list[WorkerInfo]:
        """The connected workers, in the order they said hello."""
        return [record.info() for record in self._workers.values()]

    def statistics(self) -> DispatcherStatistics:
        """Counters and current sizes, as a frozen record."""
        in_flight = sum(len(record.jobs) for record in self._workers.values())
        return DispatcherStatistics(
            workers=len(self._workers), in_flight=in_flight, queued=len(self._queue), **self._counts
        )

    def subscribe(self, sink: Callable[[WorkerEvent], None]) -> Callable[[], None]:
        """Calls ``sink`` with every later `WorkerEvent`; returns a function that stops it."""
        self._sinks.append(sink)
        return lambda: self._sinks.remove(sink)

    # -- lifetime ----------------------------------------------------------------------

    async def __aenter__(self) -> Dispatcher:
        self._context = context = zmq.asyncio.Context()
        socket = context.socket(zmq.ROUTER)
        socket.setsockopt(zmq.ROUTER_MANDATORY, 1)  # an unknown peer is an error, not a drop
        socket.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a session reconnecting takes its id back
        socket.setsockopt(zmq.MAXMSGSIZE, self._max_message)
        socket.setsockopt(zmq.LINGER, 0)
        self._socket = socket
        try:
            if self._keys is not None:
                self._auth = secure_server(context, socket, self._keys, self._refused)
            socket.bind(self._endpoint)
        except (zmq.ZMQError, OSError) as error:
            await self._close()
            raise RemoteError(f"cannot bind {self._endpoint!r}: {error}") from None
        self._endpoint = socket.last_endpoint.decode()
        self._running = True
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._receive_loop, name="cadenza dispatcher receive")
        self._group.start_soon(self._heartbeat_loop, name="cadenza dispatcher heartbeat")
        if self._keys is not None:
            self._group.start_soon(watch_handshakes, socket, self._refused)
        _log.info("dispatcher_bound", endpoint=self._endpoint, curve=self._keys is not None)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._running = False
        self._fail_all(DispatcherClosed("the dispatcher stopped; the step did not finish"))
        for record in list(self._workers.values()):
            self._post(record.identity, Disconnect("the supervisor is shutting down"))
        group, self._group = self._group, None
        if group is not None:
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)
        await self._close()

    async def _close(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._context is not None:
            self._context.term()
            self._context = None

    # -- the steps' side ---------------------------------------------------------------

    async def execute(self, order: WorkOrder, sink: DispatchSink) -> Result:
        """Runs ``order`` on a worker; returns its one accepted `Result`.

        Waits while no worker has a free credit (reported once through
        ``sink.queued`` when none is connected). Cancelling the caller cancels
        the job on its worker.

        Raises:
            DispatcherClosed: The dispatcher is not running, or stopped meanwhile.
            RemoteError: The order is larger than a frame may be.
        """
        if not self._running:
            raise DispatcherClosed("the dispatcher is not running")
        job_id = next(self._ids)
        payload = self._encode(Dispatch(job_id, 1, order))
        if len(payload) > self._max_message:
            raise RemoteError(f"the step's work order is {len(payload)} bytes, over the limit")
        job = Job(job_id, 1, order, sink, asyncio.get_running_loop().create_future(), payload)
        self._jobs[job_id] = job
        try:
            worker = None if self._queue else self._least_loaded()
            if worker is not None:
                await self._send_job(worker, job)
            else:
                self._queue.append(job)
                if not self._workers:
                    sink.queued(job_id)
                    self._emit(WorkerEvent("waiting", message="no worker is connected"))
            return await job.future
        except asyncio.CancelledError:
            self._abandon(job)
            raise

    def _abandon(self, job: Job) -> None:
        """The step stopped waiting: forget a queued job, cancel one on a worker."""
        if job.worker is None:
            self._jobs.pop(job.id, None)
            if job in self._queue:
                self._queue.remove(job)
        elif job.id in self._jobs:
            # The worker's answer to the cancel gives the credit back; until then it is spent.
            job.cancelled = True
            self._post(job.worker.identity, Cancel(job.id, job.attempt, "cancelled"))

    def _fail_all(self, error: BaseException) -> None:
        for job in self._jobs.values():
            if not job.future.done():
                job.future.set_exception(error)
        self._queue.clear()

    # -- sending -----------------------------------------------------------------------

    def _least_loaded(self) -> WorkerRecord | None:
        best: WorkerRecord | None = None
        best_load = 1.0
        for record in self._workers.values():
            held = len(record.jobs)
            if held < record.capacity:
                load = held / record.capacity
                if best is None or load < best_load:
                    best, best_load = record, load
        return best

    async def _send_job(self, worker: WorkerRecord, job: Job) -> None:
        job.worker = worker
        worker.jobs[job.id] = job
        payload = job.payload if job.attempt == 1 else None
        if payload is None:
            payload = self._encode(Dispatch(job.id, job.attempt, job.order))
        assert self._socket is not None
        try:
            await self._socket.send_multipart((worker.identity, payload))
        except zmq.ZMQError as error:  # EHOSTUNREACH: the connection is gone
            self._lose(worker, f"unreachable: {error}")
            return
        self._counts["dispatched"] += 1
        job.sink.dispatched(worker.name, job.id, job.attempt)

    async def _pump(self) -> None:
        """Sends queued jobs while some worker has a free credit."""
        while self._queue and self._running:
            worker = self._least_loaded()
            if worker is None:
                return
            await self._send_job(worker, self._queue.popleft())

    def _post(self, identity: bytes, message: Any) -> None:
        """Sends without waiting (from code that cannot await); failures are logged."""
        if self._socket is None:
            return
        future: Any = self._socket.send_multipart((identity, self._encode(message)))
        future.add_done_callback(_log_failed_send)

    async def _tell(self, identity: bytes, message: Any) -> None:
        assert self._socket is not None
        try:
            await self._socket.send_multipart((identity, self._encode(message)))
        except zmq.ZMQError:
            pass  # the peer is gone; nothing to tell

    # -- receiving ---------------------------------------------------------------------

    async def _receive_loop(self) -> None:
        socket = self._socket
        assert socket is not None
        drain = zmq.Socket.shadow(socket.underlying).recv_multipart
        decode = self._decode
        try:
            while True:
                await socket.poll(flags=zmq.POLLIN)
                for _ in range(_BATCH):
                    try:
                        frames = drain(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if len(frames) != 2:
                        self._reject_frame(frames[0], f"{len(frames) - 1} frames, not 1")
                        continue
                    identity, payload = frames
                    try:
                        message = decode(payload)
                    except msgspec.DecodeError as error:  # ValidationError included
                        self._reject_frame(identity, str(error))
                        continue
                    await self._handle(identity, message)
                else:
                    await asyncio.sleep(0)  # a flood must not starve the steps
        except Exception as error:  # a bug here would strand every step: fail them loudly
            _log.exception("dispatcher_crashed")
            self._running = False
            self._fail_all(DispatcherClosed(f"the dispatcher crashed: {error!r}"))
            raise

    async def _handle(self, identity: bytes, message: WorkerMessage) -> None:
        record = self._workers.get(identity)
        if record is not None:
            record.last_seen = self._clock.now()
        if isinstance(message, Result):
            self._on_result(identity, record, message)
            await self._pump()
        elif isinstance(message, StepEvent | Mail):
            job = self._jobs.get(message.job)
            if job is None or job.worker is not record or job.attempt != message.attempt:
                return  # a stale job's chatter: its result is what gets counted
            if job.cancelled or record is None:
                return
            if isinstance(message, Mail):
                job.sink.mail(message.text)
            else:
                job.sink.event(message)
        elif isinstance(message, Hello):
            await self._on_hello(identity, record, message)
        elif record is None:
            if not isinstance(message, Disconnect):
                await self._tell(identity, Disconnect("unknown worker: say hello"))
        elif isinstance(message, Ready):
            record.capacity = max(0, message.capacity)
            self._emit(WorkerEvent("ready", record.name, data={"capacity": record.capacity}))
            await self._pump()
        elif isinstance(message, Disconnect):
            self._lose(record, f"left: {message.reason}" if message.reason else "left")
            await self._pump()
        elif isinstance(message, WireError):
            _log.warning("worker_error", worker=record.name, code=message.code, error=message.message)
        # Heartbeat: being heard was the point.

    async def _on_hello(self, identity: bytes, record: WorkerRecord | None, hello: Hello) -> None:
        if hello.version != PROTOCOL_VERSION:
            _log.warning("worker_version", worker=hello.name, version=hello.version)
            text = f"this supervisor speaks protocol {PROTOCOL_VERSION}, not {hello.version}"
            await self._tell(identity, WireError("version", text))
            return
        if record is not None:  # a second hello starts a new session; the old one's jobs go out again
            self._lose(record, "said hello again")
        name = hello.name or identity.hex()
        record = WorkerRecord(identity, name, max(0, hello.capacity), self._clock.now())
        self._workers[identity] = record
        await self._tell(
            identity, Welcome(PROTOCOL_VERSION, self._heartbeat, self._liveness, self._max_message)
        )
        _log.info("worker_connected", worker=name, capacity=record.capacity, pid=hello.pid)
        self._emit(WorkerEvent("worker_connected", name, data={"capacity": record.capacity}))
        await self._pump()

    def _on_result(self, identity: bytes, record: WorkerRecord | None, result: Result) -> None:
        job = self._jobs.get(result.job)
        if job is None or record is None or job.worker is not record or job.attempt != result.attempt:
            self._counts["rejected_results"] += 1
            name = record.name if record is not None else self._former.get(identity, identity.hex())
            _log.warning("result_rejected", worker=name, job=result.job, attempt=result.attempt)
            if job is not None and not job.cancelled and not job.future.done():
                job.sink.rejected(name, job.id, result.attempt)
            data = {"job": result.job, "attempt": result.attempt}
            self._emit(WorkerEvent("result_rejected", name, data=data))
            return
        del self._jobs[job.id]
        del record.jobs[job.id]
        if not job.cancelled and not job.future.done():
            self._counts["accepted"] += 1
            job.future.set_result(result)

    def _reject_frame(self, identity: bytes, reason: str) -> None:
        self._counts["rejected_frames"] += 1
        record = self._workers.get(identity)
        _log.debug("frame_rejected", peer=identity.hex(), reason=reason)
        self._emit(
            WorkerEvent("frame_rejected", record.name if record else None, data={"reason": reason})
        )

    # -- liveness ----------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        beat = self._encode(Heartbeat())
        limit = self._heartbeat * self._liveness
        while True:
            await self._clock.sleep(self._heartbeat)
            now = self._clock.now()
            for record in list(self._workers.values()):
                if now - record.last_seen > limit:
                    self._lose(record, f"silent for {now - record.last_seen:.2f}s")
                    continue
                assert self._socket is not None
                try:
                    await self._socket.send_multipart((record.identity, beat))
                except zmq.ZMQError as error:
                    self._lose(record, f"unreachable: {error}")
            await self._pump()

    def _lose(self, record: WorkerRecord, reason: str) -> None:
        """Forgets a session; every live job it held goes out again, fenced anew."""
        if self._workers.get(record.identity) is not record:
            return
        del self._workers[record.identity]
        self._former[record.identity] = record.name
        if len(self._former) > _FORMER:
            self._former.popitem(last=False)
        again: list[Job] = []
        for job in record.jobs.values():
            if job.cancelled or job.future.done():
                self._jobs.pop(job.id, None)
                continue
            job.attempt += 1
            job.worker = None
            again.append(job)
            job.sink.requeued(record.name, job.id, job.attempt, reason)
        record.jobs.clear()
        self._queue.extendleft(reversed(again))  # they have waited longest
        self._counts["redispatched"] += len(again)
        self._counts["lost_workers"] += 1
        level = _log.info if reason.startswith("left") else _log.warning
        level("worker_lost", worker=record.name, in_flight=len(again), reason=reason)
        kind = "worker_left" if reason.startswith("left") else "worker_lost"
        self._emit(WorkerEvent(kind, record.name, reason, {"inFlight": len(again)}))

    # -- reporting ---------------------------------------------------------------------

    def _refused(self, reason: str, key: str | None) -> None:
        self._counts["refused_peers"] += 1
        _log.warning("peer_refused", reason=reason, key=key)
        data = {"reason": reason} if key is None else {"reason": reason, "key": key}
        self._emit(WorkerEvent("peer_refused", data=data))

    def _emit(self, event: WorkerEvent) -> None:
        for sink in self._sinks:
            sink(event)


def _log_failed_send(future: Any) -> None:
    if not future.cancelled() and future.exception() is not None:
        _log.debug("send_failed", error=str(future.exception()))
