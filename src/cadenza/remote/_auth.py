"""CURVE on the supervisor's socket: the server keys, the ZAP allow-list, refusals.

With keys the ROUTER is a CURVE server: the handshake proves the worker holds
the secret key of the public key it presents, and pyzmq's authenticator (its
asyncio flavour, so ZAP requests are answered on the event loop) asks
`AllowList` whether that key is authorized. Three ways to be refused, each
counted and logged as a ``peer_refused`` event with a ``code``:

- ``no-curve``: the peer has no keys (the socket monitor reports the failed
  handshake; ZAP never hears of the peer);
- ``bad-handshake``: the peer has a wrong server key (the monitor again);
- ``unknown-key``: the peer's key is not authorized (ZAP says no, naming it).

The worker sees the other side of the same handshake through its own
socket's monitor (`watch_refusals`): ZAP's refusal arrives as a failed
authentication (status 400), a missing CURVE as a protocol error, a wrong
server key as a connection closed mid-handshake. `why_refused` turns each into
the cause and its fix, in the command line's words (``--curve-keys``), since
the worker is where the fix is made.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Final, NamedTuple

import zmq
from zmq.auth.asyncio import AsyncioAuthenticator
from zmq.utils.monitor import parse_monitor_message

from cadenza._logging import get_logger

from ._keys import ServerKeys, WorkerKeys
from ._socket import LoopSocket

__all__ = [
    "ZAP_DOMAIN",
    "AllowList",
    "Refusal",
    "refuse_unknown_keys",
    "stop_authenticator",
    "watch_handshakes",
    "watch_refusals",
    "why_refused",
]

ZAP_DOMAIN: Final = "cadenza"

_log = get_logger("cadenza.remote")

_CAUSES: Final[dict[int, tuple[str, str]]] = {
    int(zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH): ("no-curve", "the peer does not speak CURVE"),
    int(zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC): (
        "bad-handshake",
        "the CURVE handshake failed (the peer has a wrong server key?)",
    ),
}

Refused = Callable[[str, str, str | None], None]
"""Told ``(code, reason, key)`` of every refused peer: ``no-curve``, ``bad-handshake``,
``unknown-key`` (with the key), or ``handshake``."""


class AllowList:
    """The ZAP credentials provider: lets in the authorized worker keys only."""

    def __init__(self, keys: frozenset[bytes], refused: Refused) -> None:
        self.keys = keys
        self.refused = refused

    def callback(self, domain: str, key: bytes) -> bool:
        """Called by the authenticator with the peer's Z85 public key."""
        if key in self.keys:
            return True
        self.refused("unknown-key", "the client key is not authorized", key.decode("ascii"))
        return False


def refuse_unknown_keys(
    context: zmq.Context[zmq.Socket[bytes]],
    socket: zmq.Socket[bytes],
    keys: ServerKeys,
    refused: Refused,
) -> AsyncioAuthenticator:
    """Makes ``socket`` a CURVE server whose peers ZAP checks; returns the running authenticator.

    Call before binding. Stop the authenticator after closing the socket.
    """
    authenticator = AsyncioAuthenticator(context)
    authenticator.start()
    authenticator.configure_curve_callback(
        domain=ZAP_DOMAIN, credentials_provider=AllowList(keys.authorized, refused)
    )
    socket.curve_secretkey = keys.secret
    socket.curve_publickey = keys.public
    socket.curve_server = True
    socket.zap_domain = ZAP_DOMAIN.encode()
    return authenticator


async def stop_authenticator(authenticator: AsyncioAuthenticator) -> None:
    """Stops ``authenticator`` once its task has let go of the ZAP socket.

    `AsyncioAuthenticator.stop` only cancels the task that polls the socket, and
    closes the socket at once: the poll, cancelled later, can no longer take
    the socket's descriptor out of the event loop, and the next ZAP socket of
    the process, given the same descriptor, is never heard. A second
    supervisor in one process then answered no handshake at all.
    """
    task = getattr(authenticator, "_AsyncioAuthenticator__task", None)  # pyzmq's own
    if isinstance(task, asyncio.Future) and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    authenticator.stop()


def watch_handshakes(socket: zmq.Socket[bytes], refused: Refused) -> LoopSocket:
    """Reports handshakes that fail before ZAP can see the peer; close what it returns."""
    monitor = socket.get_monitor_socket(
        zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    )

    def on_event(frames: list[bytes]) -> None:
        value = int(parse_monitor_message(frames)["value"])
        code, reason = _CAUSES.get(value, ("handshake", f"handshake failed ({value:#x})"))
        refused(code, reason, None)

    return LoopSocket(monitor, on_event)


_ZAP_DENIED: Final = 400
"""ZAP's status code for credentials it does not accept (RFC 27)."""

_MISMATCH: Final = int(zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)


class Refusal(NamedTuple):
    """Why a supervisor refused a worker's handshake, and what fixes it.

    Attributes:
        code: ``no-curve``, ``unexpected-curve``, ``bad-handshake``, ``unknown-key``
            or ``handshake``.
        text: The cause and the fix, in the command line's words.
        certain: False when the connection was only closed mid-handshake: a wrong
            server key, but also what a supervisor without CURVE sometimes does
            before its refusal reaches the worker.
    """

    code: str
    text: str
    certain: bool = True


def why_refused(event: int, value: int, keys: WorkerKeys | None) -> Refusal:
    """What a failed handshake of a worker means.

    Args:
        event: The monitor event, one of the ``EVENT_HANDSHAKE_FAILED_*``.
        value: Its value: a ZAP status, a ``PROTOCOL_ERROR_*``, or an errno.
        keys: The worker's keys (None: it speaks without CURVE).
    """
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH and value == _ZAP_DENIED:
        return Refusal(
            "unknown-key",
            f"the supervisor does not authorize this worker's key "
            f"{keys.public.decode() if keys else '(none)'}: copy this worker's public key "
            "file (NAME.key from `cadenza keys generate`) into the supervisor's "
            "authorized/ directory, and restart the supervisor",
        )
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == _MISMATCH:
        if keys is None:
            return Refusal(
                "no-curve",
                "the supervisor requires CURVE keys and this worker has none: start it with "
                "--curve-keys DIR (a directory from `cadenza keys generate` holding the "
                "supervisor's server.key and a worker key pair it authorizes)",
            )
        return Refusal(
            "unexpected-curve",
            "the supervisor does not use CURVE (it was started without --curve-keys): "
            "give it the keys, or start this worker without --curve-keys",
        )
    if keys is not None and event in (
        zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
        zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
    ):
        return Refusal(
            "bad-handshake",
            "the CURVE handshake failed: the supervisor's key is not the server.key in "
            "this worker's --curve-keys directory (copy the supervisor's server.key "
            "there), or the supervisor does not use CURVE",
            certain=event != zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
        )
    return Refusal(
        "handshake",
        f"the handshake with the supervisor failed (event {event:#x}, {value:#x})",
        certain=False,
    )


OnHandshake = Callable[[Refusal | None], None]
"""Told each handshake's outcome: None when it succeeded."""


def watch_refusals(
    socket: zmq.Socket[bytes], keys: WorkerKeys | None, outcome: OnHandshake, name: str
) -> LoopSocket:
    """Reports each handshake of a worker's ``socket``; close what it returns first.

    ``name`` makes the monitor's address unique (the socket's fd would be reused).
    """
    failed = (
        zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    )
    monitor = socket.get_monitor_socket(
        failed | zmq.EVENT_HANDSHAKE_SUCCEEDED, addr=f"inproc://cadenza-handshakes-{name}"
    )

    def on_event(frames: list[bytes]) -> None:
        message = parse_monitor_message(frames)
        event, value = int(message["event"]), int(message["value"])
        if event & failed:
            outcome(why_refused(event, value, keys))
        elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            outcome(None)

    return LoopSocket(monitor, on_event)
