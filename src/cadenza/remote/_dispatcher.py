"""The supervisor's side of remote workers: a ROUTER that runs work orders on workers.

`Dispatcher` binds a ZeroMQ ROUTER (``ROUTER_MANDATORY``, ``ROUTER_HANDOVER``,
``MAXMSGSIZE``, linger 0) that workers connect to, optionally as a CURVE server
whose ZAP allow-list admits the authorized worker keys only. Frames are
decoded at the edge by the socket's own typed decoder: one that does not
decode, or comes in the wrong shape, is rejected and counted, and never
reaches the `Pool`, which does the dispatching (credits, least-loaded choice,
heartbeats, re-dispatch and fencing; see `_pool.py`).

The socket is served by a `LoopSocket`: a message is handled in the event-loop
iteration its arrival wakes, with no future per message, and every send is a
non-blocking send followed by the re-check of ``ZMQ_EVENTS`` that keeps the
receiver's wake-ups.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable
from typing import Any, Final

import msgspec
import zmq

from cadenza._logging import get_logger
from cadenza.actors.steps import DispatchSink
from cadenza.errors import DispatcherClosed, RemoteError
from cadenza.kernel import Clock, SystemClock, Timer
from cadenza.protocols import (
    PROTOCOL_VERSION,
    Dispatch,
    Result,
    Welcome,
    WorkOrder,
    supervisor_decoder,
)

from ._auth import refuse_unknown_keys, stop_authenticator, watch_handshakes
from ._books import DispatcherStatistics, Job, WorkerEvent, WorkerInfo
from ._keys import advertised_endpoint, check_endpoint, load_server_keys
from ._pool import Pool
from ._socket import LoopSocket

__all__ = ["DEFAULT_MAX_MESSAGE", "Dispatcher"]

DEFAULT_MAX_MESSAGE: Final = 64 * 1024 * 1024
"""The largest frame accepted (a command keeps up to 10 MiB per stream, twice over)."""

_LOG_EVERY: Final = 60.0
"""Seconds between two log lines about the same kind of refused peer."""

_log = get_logger("cadenza.remote")
_MAX_WARNED = 1_000  # peers whose first rejected frame is logged as a warning


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
        advertise: Where workers connect to reach this dispatcher, as the fleet's
            roll of supervisors records it (``cadenza worker --store``). None:
            the bound endpoint, with an address of this host for ``0.0.0.0``.

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
        advertise: str | None = None,
    ) -> None:
        if heartbeat <= 0 or liveness < 1:
            raise ValueError("heartbeat must be positive and liveness at least 1")
        self._keys = load_server_keys(curve_keys) if curve_keys is not None else None
        check_endpoint(endpoint, keys=self._keys is not None, insecure=insecure)
        self._endpoint = endpoint
        self._advertise = advertise
        # What every worker session is told: the heartbeat, liveness and frame limit.
        self._terms = Welcome(PROTOCOL_VERSION, heartbeat, liveness, max_message_size)
        self._clock: Clock = clock or SystemClock()
        self._encode = msgspec.msgpack.Encoder().encode
        self._decode = supervisor_decoder().decode
        self._warned: set[bytes] = set()
        self._ids = itertools.count(1)
        self._sinks: list[Callable[[WorkerEvent], None]] = []
        self._logged: dict[tuple[str, str | None], float] = {}
        self._pool = Pool(send=self._send, emit=self._emit, clock=self._clock, terms=self._terms)
        self._running = False
        self._context: zmq.Context[zmq.Socket[bytes]] | None = None
        self._router: LoopSocket | None = None
        self._monitor: LoopSocket | None = None
        self._timer: Timer | None = None
        self._auth: Any = None

    @property
    def endpoint(self) -> str:
        """The bound endpoint once running (with the port the system picked), else the asked one."""
        return self._endpoint

    @property
    def advertised(self) -> str:
        """Where workers connect: ``advertise`` if given, else `endpoint` (once running,
        with this host's address in place of ``0.0.0.0``)."""
        if self._advertise is not None:
            return self._advertise
        return advertised_endpoint(self._endpoint) if self._running else self._endpoint

    @property
    def workers(self) -> list[WorkerInfo]:
        """The connected workers, in the order they said hello."""
        return [record.info() for record in self._pool.workers.values()]

    def statistics(self) -> DispatcherStatistics:
        """Counters and current sizes, as a frozen record."""
        return self._pool.statistics()

    def subscribe(self, sink: Callable[[WorkerEvent], None]) -> Callable[[], None]:
        """Calls ``sink`` with every later `WorkerEvent`; returns a function that stops it.

        ``sink`` runs on the event loop and must not block.
        """
        self._sinks.append(sink)
        return lambda: self._sinks.remove(sink)

    # -- lifetime ----------------------------------------------------------------------

    async def __aenter__(self) -> Dispatcher:
        self._context = context = zmq.Context()
        socket = context.socket(zmq.ROUTER)
        socket.setsockopt(zmq.ROUTER_MANDATORY, 1)  # an unknown peer is an error, not a drop
        socket.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a session reconnecting takes its id back
        socket.setsockopt(zmq.MAXMSGSIZE, self._terms.max_message)
        socket.setsockopt(zmq.LINGER, 0)
        try:
            if self._keys is not None:
                self._auth = refuse_unknown_keys(context, socket, self._keys, self._refused)
            socket.bind(self._endpoint)
        except zmq.ZMQError as error:
            socket.close(linger=0)
            self._close()
            raise RemoteError(f"cannot bind {self._endpoint!r}: {error}") from None
        self._endpoint = socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._router = LoopSocket(socket, self._on_frames)
        if self._keys is not None:
            self._monitor = watch_handshakes(socket, self._refused)
        self._running = True
        self._timer = self._clock.call_later(self._terms.heartbeat, self._tick)
        _log.debug("dispatcher_bound", endpoint=self._endpoint, curve=self._keys is not None)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._running:
            self._running = False
            self._pool.fail_all(DispatcherClosed("the dispatcher stopped; the step did not end"))
            self._pool.say_goodbye("the supervisor is shutting down")
        self._close_sockets()  # first: without its ZAP handler, the socket would admit anyone
        if self._auth is not None:
            await stop_authenticator(self._auth)
            self._auth = None
        self._close()

    def _close_sockets(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for loop_socket in (self._monitor, self._router):
            if loop_socket is not None:
                loop_socket.close(linger=0)
        self._monitor = self._router = None

    def _close(self) -> None:
        self._close_sockets()
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._context is not None:
            self._context.term()
            self._context = None

    # -- the steps' side ---------------------------------------------------------------

    async def execute(self, order: WorkOrder, sink: DispatchSink) -> Result:
        """Runs ``order`` on a worker; returns its one accepted `Result`.

        Waits while no worker has a free credit (reported through ``sink.queued``
        when none is connected). Cancelling the caller cancels the job on its worker.

        Raises:
            DispatcherClosed: The dispatcher is not running, or stopped meanwhile.
            RemoteError: The order is larger than a frame may be.
        """
        if not self._running:
            raise DispatcherClosed("the dispatcher is not running")
        job_id = next(self._ids)
        payload = self._encode(Dispatch(job_id, 1, order))
        if len(payload) > self._terms.max_message:
            raise RemoteError(f"the step's work order is {len(payload)} bytes, over the limit")
        job = Job(job_id, 1, order, sink, asyncio.get_running_loop().create_future(), payload)
        try:
            self._pool.submit(job)
            return await job.future
        except asyncio.CancelledError:
            self._pool.abandon(job)
            raise

    def confirm(self, job: int, attempt: int, calls: int) -> None:
        """Tells the worker holding ``job`` (fence ``attempt``) that the run's journal holds
        its first ``calls`` calls; a job no longer there, or sent again since, hears nothing."""
        self._pool.confirm(job, attempt, calls)

    # -- the socket's side -------------------------------------------------------------

    def _send(self, identity: bytes, payload: bytes) -> None:
        if self._router is None:
            raise zmq.ZMQError(zmq.ENOTSOCK, "the dispatcher is closed")
        self._router.send((identity, payload))

    def _on_frames(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            self._reject(frames[0], f"{len(frames) - 1} frames, not 1")
            return
        identity, payload = frames
        try:
            message = self._decode(payload)
        except msgspec.DecodeError as error:  # ValidationError included
            self._reject(identity, str(error))
            return
        try:
            self._pool.handle(identity, message)
        except Exception as error:  # a bug here would strand every step: fail them loudly
            _log.exception("dispatcher_crashed")
            self._running = False
            self._pool.fail_all(DispatcherClosed(f"the dispatcher crashed: {error!r}"))

    def _reject(self, identity: bytes, reason: str) -> None:
        self._pool.counts["rejected_frames"] += 1
        record = self._pool.workers.get(identity)
        # The first refusal from a peer is a warning with its reason; a peer that goes
        # on sending garbage is counted, not allowed to flood the log.
        if len(self._warned) < _MAX_WARNED and identity not in self._warned:
            self._warned.add(identity)
            _log.warning("frame_rejected", peer=identity[:64].hex(), reason=reason[:500])
        else:
            _log.debug("frame_rejected", peer=identity[:64].hex(), reason=reason[:500])
        self._emit(
            WorkerEvent("frame_rejected", record.name if record else None, data={"reason": reason})
        )

    def _tick(self) -> None:
        self._timer = self._clock.call_later(self._terms.heartbeat, self._tick)
        if self._running:
            self._pool.tick()

    # -- reporting ---------------------------------------------------------------------

    def _refused(self, code: str, reason: str, key: str | None) -> None:
        self._pool.counts["refused_peers"] += 1
        # A refused peer retries: log each kind (and key) once per minute, count them all.
        now, seen = self._clock.now(), (code, key)
        if now - self._logged.get(seen, -_LOG_EVERY) >= _LOG_EVERY:
            if len(self._logged) >= 1024:  # strangers with ever new keys: forget, not grow
                self._logged.clear()
            self._logged[seen] = now
            _log.warning("peer_refused", code=code, reason=reason, key=key)
        data = {"code": code} if key is None else {"code": code, "key": key}
        self._emit(WorkerEvent("peer_refused", message=reason, data=data))

    def _emit(self, event: WorkerEvent) -> None:
        for sink in self._sinks:
            sink(event)
