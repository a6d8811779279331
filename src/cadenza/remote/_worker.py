"""A worker: connects to a supervisor and runs the steps it is sent.

`Worker.run` connects a DEALER to the supervisor, says `Hello` with its
capacity, and runs each `Dispatch` with the in-process executors
(`run_work_order`), streaming the step's events back and answering with one
`Result`. Heartbeats go both ways; a supervisor silent for its liveness window
means a new connection (a new session), after a backoff that doubles up to a
cap and starts over once a supervisor answers. Results finished between
sessions go out on the next one (the supervisor refuses the stale ones).

A supervisor that refuses the handshake (CURVE keys missing, not authorized,
the wrong server key) only closes the connection; the worker learns why from
its socket's monitor and says so, with the fix, once per cause
(``worker_refused``), and keeps trying: a fleet's supervisor may be given the
keys later, and a supervisor restarted, without touching its workers.

`drain` (SIGTERM) announces capacity 0, finishes what is in flight, says
`Disconnect` and returns; `stop` (a second signal) cancels what is in flight
and leaves at once, and the supervisor sends those steps elsewhere.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import secrets
import socket as sockets
from collections import deque
from typing import Any, Final, Literal

import anyio
import msgspec
import zmq

from cadenza._logging import get_logger
from cadenza.actors.steps import Confirmations, run_work_order
from cadenza.kernel import Clock, SystemClock, Timer
from cadenza.protocols import (
    MAX_CAPACITY,
    PROTOCOL_VERSION,
    WORKER_NAME,
    Cancel,
    Disconnect,
    Dispatch,
    Durable,
    ErrorInfo,
    Heartbeat,
    Hello,
    Ready,
    Result,
    Welcome,
    WireError,
    worker_decoder,
)

from ._auth import Refusal, watch_refusals
from ._dispatcher import DEFAULT_MAX_MESSAGE
from ._keys import load_worker_keys
from ._models import RunModels
from ._socket import LoopSocket

__all__ = ["Worker"]

_UNSENT: Final = 10_000
"""Messages kept while no session is up; beyond that the oldest go."""

_log = get_logger("cadenza.remote")

_Outcome = Literal["reconnect", "leave", "fatal"]


class Worker:
    """Runs steps for a supervisor; ``await worker.run()`` until it drains or stops.

    Args:
        endpoint: The supervisor's address, e.g. ``tcp://10.0.0.5:5555``.
        concurrency: Steps run at once (the credits announced).
        name: How events and results name this worker (default ``host-pid``).
        curve_keys: A key directory (``cadenza keys generate``) to speak CURVE with.
        max_message_size: The largest frame accepted, in bytes.
        backoff: The first and the longest wait between connection attempts, in seconds.
        clock: Heartbeats, backoff and timeouts run on it.
        slots: Bounds the steps run at once (default: ``concurrency`` of this worker's
            own). A `FleetWorker` gives all its workers one, so that together they
            run no more than its concurrency.

    Raises:
        KeysError: The key directory is incomplete.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        concurrency: int = 4,
        name: str | None = None,
        curve_keys: str | os.PathLike[str] | None = None,
        max_message_size: int = DEFAULT_MAX_MESSAGE,
        backoff: tuple[float, float] = (0.1, 5.0),
        clock: Clock | None = None,
        slots: asyncio.Semaphore | None = None,
    ) -> None:
        if not 1 <= concurrency <= MAX_CAPACITY:
            raise ValueError(f"concurrency must be from 1 to {MAX_CAPACITY}, got {concurrency}")
        if name is not None and not WORKER_NAME.fullmatch(name):
            raise ValueError(
                f"worker name {name[:80]!r} is not 1 to 64 letters, digits and ._@:+- "
                "(starting with a letter or digit)"
            )
        self.endpoint = endpoint
        self.concurrency = concurrency
        host = re.sub(r"[^A-Za-z0-9._@:+-]", "-", sockets.gethostname()).lstrip("._@:+-")
        self.name = name or f"{host[:50] or 'worker'}-{os.getpid()}"
        self._keys = load_worker_keys(curve_keys, name=name) if curve_keys is not None else None
        self._max_message = max_message_size
        self._backoff = backoff
        self._clock: Clock = clock or SystemClock()
        self._encode = msgspec.msgpack.Encoder().encode
        self._decode = worker_decoder().decode
        self._heartbeat, self._liveness, self._limit = 1.0, 3, max_message_size
        self._slots = slots or asyncio.Semaphore(concurrency)
        # By (job, attempt): a job sent again after this session was forgotten is a new run.
        self._jobs: dict[tuple[int, int], asyncio.Task[None]] = {}
        self._cancels: dict[tuple[int, int], str] = {}
        self._confirmations: dict[tuple[int, int], Confirmations] = {}
        self._unsent: deque[bytes] = deque(maxlen=_UNSENT)
        self._models = RunModels(self._clock)
        self._channel: LoopSocket | None = None
        self._handshakes: LoopSocket | None = None
        self.refused: str | None = None
        """Why the supervisor refuses this worker's handshakes (``no-curve``,
        ``bad-handshake``, ``unknown-key``...), None once one succeeds."""
        self._doubt: Refusal | None = None  # said only if no sure cause comes
        self._ended: asyncio.Future[_Outcome] | None = None
        self._timer: Timer | None = None
        self._heard = self._due = 0.0
        self._welcomed = False
        self._draining = False
        self._stopping = False
        self.rejected_frames = 0
        """Frames from the supervisor that did not decode."""

    def offer(self, capacity: int) -> None:
        """Announces ``capacity`` credits from now on (0: send no steps for now).

        The supervisor sends no more steps than that; those it sent already finish.
        """
        if not 0 <= capacity <= MAX_CAPACITY:
            raise ValueError(f"capacity must be from 0 to {MAX_CAPACITY}, got {capacity}")
        if capacity == self.concurrency or self._draining:
            return
        self.concurrency = capacity
        if self._channel is not None:  # after this session's Hello: a new one says it anyway
            self._send(self._encode(Ready(capacity)))

    def drain(self) -> None:
        """Take no more steps, finish those in flight, then leave (a second call: `stop`)."""
        if self._draining:
            self.stop()
            return
        self._draining = True
        _log.info("worker_draining", worker=self.name, in_flight=len(self._jobs))
        self._send(self._encode(Ready(0)))
        self._leave_if_idle()

    def stop(self) -> None:
        """Cancel the steps in flight and leave now; the supervisor re-dispatches them."""
        self._stopping = True
        for task in self._jobs.values():
            task.cancel("the worker is stopping")
        self._send(self._encode(Disconnect("stopped")))
        self._end("leave")

    async def run(self) -> int:
        """Serves until drained or stopped: 0, or 2 when the supervisor refused the protocol."""
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        delay = self._backoff[0]
        outcome: _Outcome = "reconnect"
        try:
            while not self._stopping:
                self._open(context)
                outcome = await self._until_ended()
                welcomed = self._welcomed
                # What is still queued (late results, a goodbye) may go for a while yet.
                self._close(linger=2000 if welcomed else 0)
                if outcome != "reconnect":
                    break
                delay = self._backoff[0] if welcomed else delay
                self._say_doubt()
                cause = {} if self.refused is None else {"cause": self.refused}
                _log.warning("worker_reconnecting", worker=self.name, after=delay, **cause)
                timer = self._clock.call_later(delay, self._end, "reconnect")
                outcome = await self._until_ended()  # drain or stop may cut the wait short
                timer.cancel()
                if outcome != "reconnect":
                    break
                delay = min(delay * 2, self._backoff[1])
        finally:
            self._close(linger=0)
            for task in list(self._jobs.values()):
                task.cancel("the worker is leaving")
            await asyncio.gather(*self._jobs.values(), return_exceptions=True)
            await self._models.aclose()
            await anyio.to_thread.run_sync(context.term)  # waits out the lingering sends
        _log.info("worker_left", worker=self.name)
        return 2 if outcome == "fatal" else 0

    # -- sessions ----------------------------------------------------------------------

    def _open(self, context: zmq.Context[zmq.Socket[bytes]]) -> None:
        socket = context.socket(zmq.DEALER)
        # A session's own id: zmq's reconnects keep it; a new session gets a new one.
        socket.setsockopt(zmq.ROUTING_ID, f"{self.name[:200]}/{secrets.token_hex(4)}".encode())
        socket.setsockopt(zmq.MAXMSGSIZE, self._max_message)
        socket.setsockopt(zmq.LINGER, 0)
        # zmq's own reconnects (a dropped connection, a refused handshake) back off too.
        socket.setsockopt(zmq.RECONNECT_IVL, int(self._backoff[0] * 1000))
        socket.setsockopt(zmq.RECONNECT_IVL_MAX, int(self._backoff[1] * 1000))
        if self._keys is not None:
            socket.curve_secretkey = self._keys.secret
            socket.curve_publickey = self._keys.public
            socket.curve_serverkey = self._keys.server
        session = secrets.token_hex(8)
        self._handshakes = watch_refusals(socket, self._keys, self._on_handshake, session)
        socket.connect(self.endpoint)
        self._welcomed = False
        self._heard = self._clock.now()
        self._channel = LoopSocket(socket, self._on_frames)
        self._send(self._hello())
        for _ in range(len(self._unsent)):  # what finished between sessions, in order
            self._send(self._unsent.popleft())
        self._beat()

    def _close(self, *, linger: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._handshakes is not None:
            self._handshakes.close()
            self._handshakes = None
        if self._channel is not None:
            self._channel.close(linger=linger)
            self._channel = None

    async def _until_ended(self) -> _Outcome:
        self._ended = asyncio.get_running_loop().create_future()
        if self._stopping:
            self._ended.set_result("leave")
        try:
            return await self._ended
        finally:
            self._ended = None

    def _end(self, outcome: _Outcome) -> None:
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(outcome)

    def _tick(self) -> None:
        now = self._clock.now()
        if now - self._due > self._heartbeat:
            # This process was suspended or starved, not the supervisor silent: what it
            # sent meanwhile may still be on its way in. Give it a whole window again.
            self._heard = now
        elif now - self._heard > self._heartbeat * self._liveness:
            self._end("reconnect")  # the supervisor is silent: try a new connection
            return
        self._send(self._encode(Heartbeat()))
        self._beat()

    def _beat(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._due = self._clock.now() + self._heartbeat
        self._timer = self._clock.call_later(self._heartbeat, self._tick)

    def _on_handshake(self, refusal: Refusal | None) -> None:
        """Says why the supervisor refuses this worker: once per cause, not once per retry.

        A connection closed mid-handshake is a wrong server key, or what a supervisor
        does now and then before its refusal arrives: it is kept as a doubt, said only
        if the session ends without a sure cause (`_say_doubt`), never instead of one.
        """
        if refusal is None:
            self.refused = self._doubt = None
        elif not refusal.certain:
            if self.refused is None:
                self._doubt = refusal
        else:
            self._doubt = None
            if refusal.code != self.refused:
                self._say(refusal)

    def _say_doubt(self) -> None:
        if self.refused is None and self._doubt is not None:
            self._say(self._doubt)
        self._doubt = None

    def _say(self, refusal: Refusal) -> None:
        _log.error("worker_refused", worker=self.name, code=refusal.code, error=refusal.text)
        self.refused = refusal.code

    def _on_frames(self, frames: list[bytes]) -> None:
        try:
            if len(frames) != 1:
                raise msgspec.DecodeError(f"{len(frames)} frames, not 1")
            message = self._decode(frames[0])
        except msgspec.DecodeError as error:
            self.rejected_frames += 1
            _log.warning("frame_rejected", worker=self.name, reason=str(error))
            return
        self._heard = self._clock.now()
        if isinstance(message, Dispatch):
            self._on_dispatch(message)
        elif isinstance(message, Durable):
            confirmations = self._confirmations.get((message.job, message.attempt))
            if confirmations is not None:
                confirmations.confirm(message.calls)
        elif isinstance(message, Cancel):
            self._on_cancel(message)
        elif isinstance(message, Welcome):
            self._on_welcome(message)
        elif isinstance(message, Disconnect):
            # The supervisor lost track of this session (or is going): introduce it again,
            # once until it answers (each stale message of ours earns one of these).
            if self._welcomed:
                _log.info("worker_unknown", worker=self.name, reason=message.reason)
                self._welcomed = False
                self._send(self._hello())
        elif isinstance(message, WireError):
            _log.error("worker_refused", worker=self.name, code=message.code, error=message.message)
            if message.code == "version":
                self._end("fatal")

    def _on_dispatch(self, dispatch: Dispatch) -> None:
        """Starts a job, unless this worker is stopping or runs that attempt already."""
        key = (dispatch.job, dispatch.attempt)
        if not self._stopping and key not in self._jobs:
            # A supervisor silent for its liveness window is lost: no longer waited for.
            patience = self._heartbeat * self._liveness
            self._confirmations[key] = Confirmations(self._clock, patience)
            task = asyncio.create_task(self._run_job(dispatch), name=f"job {key}")
            task.add_done_callback(functools.partial(self._job_done, dispatch))
            self._jobs[key] = task

    def _on_cancel(self, cancel: Cancel) -> None:
        key = (cancel.job, cancel.attempt)
        running = self._jobs.get(key)
        if running is not None:
            self._cancels[key] = cancel.reason or "cancelled"
            running.cancel(cancel.reason)

    def _on_welcome(self, welcome: Welcome) -> None:
        """The supervisor took this session: its protocol must be ours; its rates are."""
        if welcome.version != PROTOCOL_VERSION:
            _log.error("protocol_mismatch", worker=self.name, supervisor=welcome.version)
            self._end("fatal")
            return
        self._welcomed = True
        self._heartbeat, self._liveness = welcome.heartbeat, welcome.liveness
        self._limit = welcome.max_message or self._max_message
        self._beat()  # at the supervisor's rate from now on
        _log.info("worker_connected", worker=self.name, endpoint=self.endpoint)

    # -- jobs --------------------------------------------------------------------------

    async def _run_job(self, dispatch: Dispatch) -> None:
        job, attempt, order = dispatch.job, dispatch.attempt, dispatch.order
        async with self._slots:
            result = await run_work_order(
                order,
                job,
                attempt,
                clock=self._clock,
                providers=self._models,
                send=self._post,
                confirmations=self._confirmations[job, attempt],
            )
        payload = self._encode(result)
        if len(payload) > self._limit:
            message = f"the result is {len(payload)} bytes, over the {self._limit}-byte frame limit"
            error = ErrorInfo("ResultTooLarge", message, order.address)
            payload = self._encode(Result(job, attempt, "failed", error=error))
        self._send(payload)

    def _job_done(self, dispatch: Dispatch, task: asyncio.Task[None]) -> None:
        """Every job ends here, even one cancelled before it ran a line."""
        key = (dispatch.job, dispatch.attempt)
        self._jobs.pop(key, None)
        self._confirmations.pop(key, None)
        reason = self._cancels.pop(key, None)
        error: ErrorInfo | None = None
        if task.cancelled():
            # Cancelled by the supervisor: answer, to give the credit back. Stopping: no
            # answer; the supervisor sends the job elsewhere once this worker has left.
            if reason is not None:
                error = ErrorInfo("Cancelled", reason, dispatch.order.address)
        elif task.exception() is not None:  # a bug here must not strand the step
            error = ErrorInfo("WorkerError", repr(task.exception()), dispatch.order.address)
        if error is not None:
            status: Literal["cancelled", "failed"] = "failed" if reason is None else "cancelled"
            self._post(Result(dispatch.job, dispatch.attempt, status, error=error))
        self._leave_if_idle()

    def _leave_if_idle(self) -> None:
        if self._draining and not self._jobs and not self._stopping:
            self._send(self._encode(Disconnect("drained")))
            self._end("leave")

    # -- sending -----------------------------------------------------------------------

    def _post(self, message: Any) -> None:
        self._send(self._encode(message))

    def _send(self, payload: bytes) -> None:
        """Sends now; while no session is up, keeps it for the next one."""
        channel = self._channel
        if channel is None:
            self._unsent.append(payload)
            return
        try:
            channel.send((payload,))
        except zmq.ZMQError as error:
            _log.warning("send_failed", worker=self.name, error=str(error))
            self._unsent.append(payload)

    def _hello(self) -> bytes:
        capacity = 0 if self._draining else self.concurrency
        hello = Hello(PROTOCOL_VERSION, self.name, capacity, os.getpid(), sockets.gethostname())
        return self._encode(hello)
