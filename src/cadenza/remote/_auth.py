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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import zmq
from zmq.auth.asyncio import AsyncioAuthenticator
from zmq.utils.monitor import parse_monitor_message

from cadenza._logging import get_logger

from ._keys import ServerKeys
from ._socket import LoopSocket

__all__ = ["ZAP_DOMAIN", "AllowList", "refuse_unknown_keys", "watch_handshakes"]

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
