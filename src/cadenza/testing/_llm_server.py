"""``ScriptedLLMServer``: a real local HTTP server that plays a chat model from rules.

It speaks OpenAI Chat Completions (``POST .../chat/completions``) or the
Anthropic Messages API (``POST /v1/messages``) on 127.0.0.1, answers from
rules (see ``ServerRule``), records every request, counts the peak number in
flight, and can misbehave on cue: error statuses with ``Retry-After``, reset
connections, delays and bodies trickled a byte at a time. It runs on a
thread, so it serves synchronous and asynchronous tests alike.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self

from ._llm_rules import RuleLike, Script, ServerReply
from ._llm_wire import WIRES, ServerWire

__all__ = ["RecordedRequest", "ScriptedLLMServer"]

Wire = Literal["openai", "anthropic"]


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the server received.

    Attributes:
        path: The request path.
        headers: The request headers, names lower-cased (kept out of the repr:
            they hold the API key).
        body: The parsed JSON body, or None when it was not JSON.
        rule: The name (or index) of the rule that answered; None if none did.
        inflight: Requests in flight when this one arrived, itself included.
    """

    path: str
    headers: Mapping[str, str] = field(repr=False)
    body: Any
    rule: str | None
    inflight: int

    @property
    def model(self) -> str | None:
        """The requested model."""
        model = self.body.get("model") if isinstance(self.body, dict) else None
        return model if isinstance(model, str) else None

    @property
    def messages(self) -> list[Any]:
        """The request's ``messages`` list (empty when absent)."""
        messages = self.body.get("messages") if isinstance(self.body, dict) else None
        return messages if isinstance(messages, list) else []


class ScriptedLLMServer:
    """A scripted chat-model server on a free local port.

    Example:
        >>> rules = [ServerRule(["Hello!"], match=RequestMatch(user="hi"))]
        >>> with ScriptedLLMServer(rules) as server:  # doctest: +SKIP
        ...     providers = ProviderRegistry(environ=server.environ())
        ...     ...
        ...     assert server.requests[0].model == "gpt-test"

    Args:
        rules: Tried in order for every request; the first match answers. A
            request no rule matches gets HTTP 400 (and is recorded).
        wire: ``openai`` or ``anthropic``.
        host: The interface to listen on.
        port: The port; 0 picks a free one.

    Raises:
        ValueError: An unknown wire format or a malformed rule.
    """

    def __init__(
        self,
        rules: Sequence[RuleLike],
        *,
        wire: Wire = "openai",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if wire not in WIRES:
            raise ValueError(f"unknown wire format {wire!r}; use one of {sorted(WIRES)}")
        self._wire: ServerWire = WIRES[wire]
        self._script = Script(rules)
        self._address = (host, port)
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._inflight = 0
        self._max_inflight = 0
        self._serial = 0
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://host:port``, the server's root."""
        if self._httpd is None:
            raise RuntimeError("the server is not running; use it as a context manager")
        host, port = self._httpd.bound
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        """The provider's base URL: ``.../v1`` for OpenAI, the root for Anthropic."""
        return f"{self.url}/v1" if self._wire.name == "openai" else self.url

    def environ(self, api_key: str = "test-key") -> dict[str, str]:
        """Environment variables that point the matching provider at this server."""
        prefix = "OPENAI" if self._wire.name == "openai" else "ANTHROPIC"
        return {f"{prefix}_BASE_URL": self.base_url, f"{prefix}_API_KEY": api_key}

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def max_inflight(self) -> int:
        """The most completion requests that were in flight at once."""
        with self._lock:
            return self._max_inflight

    def start(self) -> Self:
        """Listen and serve on a background thread; returns the server itself."""
        if self._httpd is not None:
            raise RuntimeError("the server is already running")
        self._stopping.clear()
        self._httpd = _Server(self._address, self)
        self._thread = threading.Thread(
            target=self._serve, args=(self._httpd,), name=f"ScriptedLLMServer {self.url}"
        )
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: close open connections, end delays and trickles, free the port."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        self._stopping.set()
        httpd.close_connections()
        with contextlib.suppress(OSError):  # wake the accept loop now, not at its timeout
            socket.create_connection(httpd.bound, timeout=1).close()
        thread.join()
        httpd.server_close()
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.url if self._httpd is not None else "stopped"
        return f"ScriptedLLMServer(wire={self._wire.name!r}, {where})"

    def _serve(self, httpd: _Server) -> None:
        while not self._stopping.is_set():
            httpd.handle_request()

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _on_post(self, handler: _Handler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        headers = {name.lower(): value for name, value in handler.headers.items()}
        path = handler.path
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not self._wire.accepts(path) or body is None:
            self._record(RecordedRequest(path, headers, body, None, 0))
            status, problem = (404, f"unknown path {path}") if body is not None else (400, "")
            handler.send_body(status, self._error(status, problem or "body is not JSON"))
            return
        with self._lock:
            self._inflight += 1
            self._max_inflight = max(self._max_inflight, self._inflight)
            self._serial += 1
            inflight, serial = self._inflight, self._serial
        try:
            picked = self._script.pick(self._wire.view(body))
            rule = picked[0] if picked is not None else None
            self._record(RecordedRequest(path, headers, body, rule, inflight))
            if picked is None:
                handler.send_body(400, self._error(400, "no rule matches this request"))
            else:
                self._reply(handler, body, picked[1], serial)
        finally:
            with self._lock:
                self._inflight -= 1

    def _reply(self, handler: _Handler, body: Any, reply: ServerReply, serial: int) -> None:
        if reply.delay > 0 and self._stopping.wait(reply.delay):
            handler.close_connection = True
            return
        if reply.reset:
            handler.reset()
            return
        if reply.body is not None:
            data = reply.body.encode()
        elif reply.status != 200:
            data = self._error(reply.status, "scripted failure")
        else:
            data = json.dumps(self._wire.success(body, reply, serial)).encode()
        handler.send_body(reply.status, data, reply.headers, reply.trickle, self._stopping)

    def _error(self, status: int, message: str) -> bytes:
        return json.dumps(self._wire.error(status, message)).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    timeout = 0.5  # the accept loop's fallback wake-up, should the poke in stop() fail

    def __init__(self, address: tuple[str, int], owner: ScriptedLLMServer) -> None:
        super().__init__(address, _Handler)
        self.owner = owner
        self.bound = (address[0], self.socket.getsockname()[1])  # the port 0 picked
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

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

    def close_connections(self) -> None:
        """Shut every open connection, so handler threads waiting on one finish."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by the client
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up (deadline, reset) is routine here, not an error to print.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: requests are recorded instead

    def do_POST(self) -> None:
        self.server.owner._on_post(self)

    def do_GET(self) -> None:
        self.send_body(404, b'{"error": {"message": "not found"}}')

    def send_body(
        self,
        status: int,
        data: bytes,
        headers: Mapping[str, str] | None = None,
        trickle: float = 0.0,
        stopping: threading.Event | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if trickle <= 0:
            self.wfile.write(data)
            return
        for index in range(len(data)):
            self.wfile.write(data[index : index + 1])
            if stopping is not None and stopping.wait(trickle):
                self.close_connection = True
                return

    def reset(self) -> None:
        """Drop the connection with a TCP reset instead of answering."""
        self.close_connection = True
        # Linger on with a zero timeout makes close() send RST, not a graceful FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
