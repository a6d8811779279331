"""CURVE on the supervisor's socket: the server keys, the ZAP allow-list, refusals.

With keys the ROUTER is a CURVE server: the handshake proves the worker holds
the secret key of the public key it presents, and pyzmq's authenticator (its
asyncio flavour, so ZAP requests are answered on the event loop) asks
`AllowList` whether that key is authorized. Three ways to be refused, each
counted and logged as a ``peer_refused`` event:

- no keys at all, or a wrong server key: the handshake fails (the socket
  monitor reports it; ZAP never hears of the peer);
- an unknown client key: ZAP says no, naming the key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import structlog
import zmq
import zmq.asyncio
from zmq.auth.asyncio import AsyncioAuthenticator
from zmq.utils.monitor import parse_monitor_message

from ._keys import ServerKeys

__all__ = ["ZAP_DOMAIN", "AllowList", "secure_server", "watch_handshakes"]

ZAP_DOMAIN: Final = "cadenza"

_log = structlog.get_logger("cadenza.remote")

_FAILURES: Final = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake failed",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "handshake failed: no CURVE, or a wrong server key",
}

Refused = Callable[[str, str | None], None]
"""Told ``(reason, key)`` of every refused peer."""


class AllowList:
    """The ZAP credentials provider: lets in the authorized worker keys only."""

    def __init__(self, keys: frozenset[bytes], refused: Refused) -> None:
        self.keys = keys
        self.refused = refused

    def callback(self, domain: str, key: bytes) -> bool:
        """Called by the authenticator with the peer's Z85 public key."""
        if key in self.keys:
            return True
        self.refused("client key not authorized", key.decode("ascii", "replace"))
        return False


def secure_server(
    context: zmq.asyncio.Context, socket: zmq.asyncio.Socket, keys: ServerKeys, refused: Refused
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


async def watch_handshakes(socket: zmq.asyncio.Socket, refused: Refused) -> None:
    """Reports handshakes that failed before ZAP could see the peer; runs until cancelled."""
    monitor = socket.get_monitor_socket(
        zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    )
    try:
        while True:
            event = parse_monitor_message(await monitor.recv_multipart())
            reason = _FAILURES.get(event["event"], "handshake failed")
            refused(reason, None)
    finally:
        socket.disable_monitor()
        monitor.close(linger=0)
