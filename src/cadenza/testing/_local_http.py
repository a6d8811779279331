"""The plumbing under ``ScriptedLLMServer``: a threaded HTTP server that stops promptly.

The standard library's ``ThreadingHTTPServer`` needs three additions for
tests: it must stop at once (not at its next poll), take down connections a
client keeps alive (or their threads wait forever), and stay quiet when a
client hangs up mid-answer, which the fault tests do on purpose.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import sys
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LocalHTTPServer", "RequestHandler"]


class LocalHTTPServer(ThreadingHTTPServer):
    """Serves on a background thread, one thread per connection, until ``stop``.

    Args:
        address: ``(host, port)``; port 0 picks a free one.
        on_post: Called on the connection's thread for every POST.
        stopping: Set by ``stop``; handlers waiting on it give up.
    """

    daemon_threads = True
    timeout = 0.5  # the accept loop's fallback wake-up, should the poke in stop() fail

    def __init__(
        self,
        address: tuple[str, int],
        on_post: Callable[[RequestHandler], None],
        stopping: threading.Event,
    ) -> None:
        super().__init__(address, RequestHandler)
        self.on_post = on_post
        self.stopping = stopping
        self.bound = (address[0], int(self.socket.getsockname()[1]))  # the port 0 picked
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name=f"LocalHTTPServer {self.bound}")
        self._thread.daemon = True

    def start(self) -> None:
        """Begin accepting connections on the background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting, shut open connections, wait for the accept loop, free the port."""
        self.stopping.set()
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by the client
                connection.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):  # wake the accept loop now, not at its timeout
            socket.create_connection(self.bound, timeout=1).close()
        self._thread.join()
        self.server_close()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            self.handle_request()

    def process_request(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any
    ) -> None:
        if isinstance(request, socket.socket):
            with self._connections_lock:
                self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: socket.socket | tuple[bytes, socket.socket]) -> None:
        if isinstance(request, socket.socket):
            with self._connections_lock:
                self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up (deadline, reset) is routine here, not an error to print.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class RequestHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive; POSTs go to the server's ``on_post``."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, the body
    # waits for the client's delayed ACK, some 40 ms per answer.
    disable_nagle_algorithm = True
    server: LocalHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the scripted server records requests instead."""

    def do_POST(self) -> None:
        """Hand the request to the server's ``on_post``."""
        self.server.on_post(self)

    def do_GET(self) -> None:
        """Nothing is served by GET."""
        self.send_body(404, b'{"error": {"message": "not found"}}')

    def send_body(
        self,
        status: int,
        data: bytes,
        headers: Mapping[str, str] | None = None,
        trickle: float = 0.0,
        content_type: str = "application/json",
        pause: tuple[int, threading.Event] | None = None,
    ) -> None:
        """Answer with a body (JSON unless told), at once or a byte every ``trickle`` seconds.

        With ``pause`` ``(n, event)``: the first ``n`` bytes, then the rest once
        the test sets ``event`` (a reply caught half-way).
        """
        self.send_response(status)
        if not any(name.lower() == "content-type" for name in headers or {}):
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if pause is not None:
            at, resume = pause
            self.wfile.write(data[:at])
            self.wfile.flush()
            while not resume.wait(0.05):
                if self.server.stopping.is_set():
                    self.close_connection = True
                    return
            data = data[at:]
        if trickle <= 0:
            self.wfile.write(data)
            return
        for index in range(len(data)):
            self.wfile.write(data[index : index + 1])
            if self.server.stopping.wait(trickle):
                self.close_connection = True
                return

    def reset(self) -> None:
        """Drop the connection with a TCP reset instead of answering."""
        self.close_connection = True
        # Linger on with a zero timeout makes close() send RST, not a graceful FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
