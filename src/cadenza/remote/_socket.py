"""A ZeroMQ socket served straight from the event loop: no future per message.

zmq.asyncio wraps every receive (or poll) in futures that take several trips
around the event loop; measured here, a message then costs about five loop
iterations. `LoopSocket` registers the socket's file descriptor with the loop
once; when it fires, the socket is drained with non-blocking receives and each
message is handed to a plain callback, in the same iteration.

ZeroMQ's descriptor is edge-triggered in effect: it signals that the socket's
state changed, and any operation on the socket (a send included) may consume
that signal. So after every send, `LoopSocket` re-checks ``ZMQ_EVENTS`` and
schedules a drain when input is waiting; a message that arrived during a send
would otherwise sit unnoticed until the next one (that is the lost wake-up of
sending on a shadow of an async socket while a poll waits: the shadow skips
this check). A send that meets the high-water mark waits in a backlog, in
order, until the socket can take it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final, cast

import zmq

from cadenza._logging import get_logger

__all__ = ["LoopSocket"]

_BATCH: Final = 256
"""Messages handled per turn before the other tasks of the loop get one."""

_log = get_logger("cadenza.remote")


class LoopSocket:
    """Owns one ZeroMQ socket: receives through a callback, sends without waiting.

    Args:
        socket: A connected or bound socket; `close` closes it.
        on_message: Called with the frames of each message, on the loop, in order.
            It must not block; what it raises propagates out of the loop's callback.
    """

    __slots__ = ("_backlog", "_fd", "_loop", "_on_message", "_scheduled", "socket")

    def __init__(
        self, socket: zmq.Socket[bytes], on_message: Callable[[list[bytes]], None]
    ) -> None:
        self.socket = socket
        self._on_message = on_message
        self._loop = asyncio.get_running_loop()
        self._fd = cast(int, socket.getsockopt(zmq.FD))
        self._scheduled = False
        self._backlog: deque[Sequence[bytes]] = deque()
        self._loop.add_reader(self._fd, self._ready)
        self._schedule()  # anything already waiting

    def send(self, frames: Sequence[bytes]) -> None:
        """Sends a message now, or after those waiting for the high-water mark.

        Raises:
            zmq.ZMQError: The socket refused it (a ROUTER's unknown peer: EHOSTUNREACH).
        """
        if self._backlog:
            self._backlog.append(frames)
        else:
            try:
                self.socket.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                self._backlog.append(frames)
        if not self._scheduled and _events(self.socket) & zmq.POLLIN:
            self._schedule()

    def close(self, linger: int = 0) -> None:
        """Stops receiving and closes the socket (``linger`` ms for what is still queued)."""
        self._loop.remove_reader(self._fd)
        self.socket.close(linger=linger)

    def _schedule(self) -> None:
        self._scheduled = True
        self._loop.call_soon(self._ready)

    def _ready(self) -> None:
        self._scheduled = False
        socket = self.socket
        if socket.closed:
            return
        if self._backlog:
            self._flush()
        receive = socket.recv_multipart
        for _ in range(_BATCH):
            try:
                frames = receive(zmq.NOBLOCK)
            except zmq.Again:
                break
            except zmq.ZMQError as error:  # the context is ending under us
                _log.debug("receive_failed", error=str(error))
                return
            self._on_message(frames)
            if socket.closed:
                return
        else:
            self._schedule()  # more may be waiting: come back after the others had a turn
            return
        if self._backlog and _events(socket) & zmq.POLLOUT:
            self._schedule()

    def _flush(self) -> None:
        while self._backlog:
            try:
                self.socket.send_multipart(self._backlog[0], zmq.NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError as error:  # the peer left meanwhile; nobody to tell
                _log.debug("send_dropped", error=str(error))
            self._backlog.popleft()


def _events(socket: zmq.Socket[bytes]) -> int:
    return cast(int, socket.getsockopt(zmq.EVENTS))
