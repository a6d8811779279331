"""uvicorn's HTTP/1.1 connection (h11) with a deadline on sending each request.

uvicorn closes a connection left idle between requests (``timeout_keep_alive``),
but sets no limit on how long a client may take to send a request once it has
begun, nor on a new connection that never sends one: a client sending a byte
now and then keeps its connection, and its place under ``limit_concurrency``,
for ever (slowloris). Here a client has ``request_timeout`` seconds, from
connecting or from the first byte of its next request, until the request's
last byte. Late, it gets 408 (unless an answer has begun) and the connection
is closed. A request received whole is never timed: an event stream may last
as long as its run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import msgspec
from uvicorn.protocols.http.h11_impl import H11Protocol

from ._models import ApiError, ErrorBody

__all__ = ["deadline_protocol"]


def deadline_protocol(request_timeout: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, giving each request ``request_timeout`` seconds to arrive."""
    body = msgspec.json.encode(
        ErrorBody(
            ApiError(
                type="RequestTimeout",
                message=f"the request was not received within {request_timeout:g} s",
            )
        )
    )
    timeout_answer = (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
    )

    class DeadlineProtocol(_DeadlineProtocol):
        timeout = request_timeout
        answer = timeout_answer

    return DeadlineProtocol


class _DeadlineProtocol(H11Protocol):
    timeout: float
    answer: bytes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline = self.loop.call_later(self.timeout, self._expired)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()  # a pipelined request may have been read meanwhile

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _owed(self) -> bool:
        """Whether the client is part-way through sending a request."""
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            return True
        return state is h11.IDLE and bool(self.conn.trailing_data[0])  # part of a head

    def _follow(self) -> None:
        if not self._owed():
            self._disarm()
        elif self._deadline is None:
            self._deadline = self.loop.call_later(self.timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.IDLE or (state is h11.SEND_BODY and not self.cycle.response_started):
            # No answer to this request has begun: say why before closing. (Written
            # past h11, which has no request to answer yet; the connection ends here.)
            self.transport.write(self.answer)
        self.transport.close()
