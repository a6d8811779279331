"""What one client may cost the viewer: body size, open event streams, time to send.

`Limits` holds the caps. Two of them are kept by the application (so a
service mounting `create_app` gets them too):

* **Body size.** `BodyLimit`, an ASGI middleware, answers 413 at once when
  ``Content-Length`` is over the cap, and counts the bytes of a body as the
  endpoint reads them (a chunked body has no length to check): past the cap the
  endpoint is told the client left, and the client gets 413. Nothing is buffered
  beyond what the endpoint holds, so a body costs at most the cap.
* **Open event streams.** `StreamSlots` counts them; past the cap the stream
  endpoint answers 503.

The other two are the server's (``cadenza serve``, `BackgroundServer`): the
number of connections served at once (uvicorn's ``limit_concurrency``) and the
time a client has to send a whole request (`_connection`).

Every refusal closes its connection (``Connection: close``): an unread body is
never read, and the client cannot keep the slot by sending more.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from starlette.requests import ClientDisconnect

from ._models import ApiError, ErrorBody

__all__ = ["DEFAULT_LIMITS", "BodyLimit", "Limits", "StreamSlots", "refuse"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Limits:
    """The caps on what clients may cost the viewer (docs/api.md, "Limits").

    Attributes:
        max_body: Bytes a request body may hold; a larger one is refused with 413.
        max_streams: Event streams open at once; one more is refused with 503.
        max_connections: Connections served at once (``cadenza serve`` and
            `BackgroundServer` only); a request on one more is refused with 503.
            Also bounds memory: at most this many bodies of ``max_body`` at once.
        request_timeout: Seconds a client has to send a whole request, head and
            body, from its first byte (or from connecting); a slower one gets 408
            and its connection is closed (``cadenza serve`` and `BackgroundServer`
            only). Idle connections between requests close after 5 s.
    """

    max_body: int = 1 << 20
    max_streams: int = 100
    max_connections: int = 256
    request_timeout: float = 10.0

    def __post_init__(self) -> None:
        for name in ("max_body", "max_streams", "max_connections"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Limits.{name} must be a whole number >= 1, not {value!r}")
        if not 0 < self.request_timeout < math.inf:  # NaN fails this too
            raise ValueError(
                f"Limits.request_timeout must be seconds above 0, not {self.request_timeout!r}"
            )


DEFAULT_LIMITS: Final = Limits()


class StreamSlots:
    """How many event streams are open, against the cap (one event loop: no lock needed)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open = 0

    def take(self) -> bool:
        """Takes a slot; False when all are taken."""
        if self.open >= self.cap:
            return False
        self.open += 1
        return True

    def give_back(self) -> None:
        """Returns a slot taken by `take`."""
        self.open -= 1


class BodyLimit:
    """The middleware refusing bodies over ``max_body`` bytes with 413."""

    def __init__(self, app: ASGIApp, *, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body:
            await self._refuse(send)
            return
        received = 0
        over = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    # The endpoint sees the client leave; the client is told why below.
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def noting_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        # Gone mid-body (or cut off at the cap): not the server's fault, not an error.
        with contextlib.suppress(ClientDisconnect):
            await self.app(scope, counting_receive, noting_send)
        if over and not started:
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        await refuse(
            send,
            413,
            "PayloadTooLarge",
            f"the request body is over this server's limit of {self.max_body} bytes",
        )


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name.lower() == b"content-length":
            # The server has checked the framing; anything but digits never gets here.
            return int(value) if value.strip().isdigit() else None
    return None


async def refuse(
    send: Send,
    status: int,
    kind: str,
    message: str,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Answers ``status`` with the API's JSON error body and closes the connection."""
    body = msgspec.json.encode(ErrorBody(ApiError(type=kind, message=message)))
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"connection", b"close"),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
