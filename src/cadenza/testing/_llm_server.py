"""``ScriptedLLMServer``: a real local HTTP server that plays a chat model from rules.

It speaks OpenAI Chat Completions (``POST .../chat/completions``), the
Anthropic Messages API (``POST /v1/messages``), Gemini (the Gemini API's
``POST /v1beta/models/{model}:generateContent`` and Vertex AI's
``.../publishers/google/models/{model}:generateContent``), Claude on Vertex
AI (``.../publishers/anthropic/models/{model}:rawPredict``) or Amazon
Bedrock's Converse (``POST /model/{id}/converse``, SigV4-verified) on
127.0.0.1, whole or streamed (server-sent events; Bedrock's binary event
stream) when a request asks for a stream, answers from
rules (see ``ServerRule``), records every request, counts the peak number in
flight, and can misbehave on cue: error statuses with ``Retry-After``, reset
connections, delays and bodies trickled a byte at a time. It runs on a
thread, so it serves synchronous and asynchronous tests alike.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Self
from urllib.parse import unquote

from ._llm_bedrock import BEDROCK_ACCESS_KEY_ID, BedrockWire
from ._llm_rules import RuleLike, Script, ServerReply
from ._llm_wire import WIRES, ServerWire
from ._local_http import LocalHTTPServer, RequestHandler

__all__ = ["RecordedRequest", "ScriptedLLMServer"]

Wire = Literal["openai", "anthropic", "gemini", "vertex-anthropic", "bedrock"]
_WIRES: Final[dict[str, ServerWire]] = {**WIRES, "bedrock": BedrockWire()}

# Where a model is named in the path: Bedrock's /model/{id}/..., Google's .../models/{id}:...
_MODEL_IN_PATH: Final = re.compile(r"\A/model/([^/?#]+)/|/models/([^/:?#]+):")

# How often a held reply checks whether the server is stopping.
_HOLD_POLL: Final = 0.05


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
        client_port: The client's port: requests over one kept-alive connection share it.
    """

    path: str
    headers: Mapping[str, str] = field(repr=False)
    body: Any
    rule: str | None
    inflight: int
    client_port: int = 0

    @property
    def model(self) -> str | None:
        """The requested model (from the path, where Bedrock, Gemini and Vertex AI put it)."""
        model = self.body.get("model") if isinstance(self.body, dict) else None
        if model is None and (found := _MODEL_IN_PATH.search(self.path)) is not None:
            model = unquote(found[1] or found[2])
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
        wire: ``openai``, ``anthropic``, ``gemini`` (the Gemini API and Vertex
            AI's Gemini), ``vertex-anthropic`` or ``bedrock``.
        host: The interface to listen on.
        port: The port; 0 picks a free one.
        keep: How many requests `requests` remembers (the newest); a long soak
            must not grow without bound. `request_count` counts them all.
        api_key: The key the server knows. The ``bedrock`` dialect verifies
            each request's SigV4 signature with it as the secret access key of
            ``BEDROCK_ACCESS_KEY_ID`` (or takes it as a bearer token) and
            answers a forgery HTTP 403, as AWS does; the others take any key.

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
        keep: int = 10_000,
        api_key: str = "test-key",
    ) -> None:
        if wire not in _WIRES:
            raise ValueError(f"unknown wire format {wire!r}; use one of {sorted(_WIRES)}")
        self._wire: ServerWire = _WIRES[wire]
        self._api_key = api_key
        self._script = Script(rules)
        self._address = (host, port)
        self._lock = threading.Lock()
        self._recorded = threading.Condition(self._lock)
        self._requests: deque[RecordedRequest] = deque(maxlen=keep)
        self._request_count = 0
        self._inflight = 0
        self._max_inflight = 0
        self._serial = 0
        self._stopping = threading.Event()
        self._httpd: LocalHTTPServer | None = None

    @property
    def url(self) -> str:
        """``http://host:port``, the server's root."""
        if self._httpd is None:
            raise RuntimeError("the server is not running; use it as a context manager")
        host, port = self._httpd.bound
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        """The provider's base URL: ``.../v1`` for OpenAI, the root for the others."""
        return f"{self.url}/v1" if self._wire.name == "openai" else self.url

    def environ(self, api_key: str | None = None) -> dict[str, str]:
        """Environment variables that point the matching provider(s) at this server.

        ``api_key`` is the key the client sends (the server's own by default);
        for ``bedrock`` it is the secret access key, beside the endpoint URL
        override, the access key id and a region, as the AWS SDKs read them.
        The ``gemini`` server serves ``google`` and ``vertex`` alike, so both
        are pointed at it; Vertex AI's project is ``test-project`` in
        ``us-central1``, and the key its access token.
        """
        key = self._api_key if api_key is None else api_key
        name = self._wire.name
        if name == "bedrock":
            return {
                "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": self.base_url,
                "AWS_ACCESS_KEY_ID": BEDROCK_ACCESS_KEY_ID,
                "AWS_SECRET_ACCESS_KEY": key,
                "AWS_REGION": "us-east-1",
            }
        if name in ("openai", "anthropic"):
            prefix = name.upper()
            return {f"{prefix}_BASE_URL": self.base_url, f"{prefix}_API_KEY": key}
        vertex = {
            "GOOGLE_VERTEX_BASE_URL": self.url,
            "GOOGLE_CLOUD_PROJECT": "test-project",
            "GOOGLE_CLOUD_LOCATION": "us-central1",
            "GOOGLE_OAUTH_ACCESS_TOKEN": key,
        }
        if name == "gemini":
            vertex.update(GOOGLE_GENERATIVE_AI_BASE_URL=self.url, GEMINI_API_KEY=key)
        return vertex

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests received so far (the newest ``keep``), oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def request_count(self) -> int:
        """How many requests arrived, including those `requests` no longer keeps."""
        with self._lock:
            return self._request_count

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until ``count`` requests have arrived; returns them all.

        From async code run it on a thread
        (``await anyio.to_thread.run_sync(server.wait_for_requests, 3)``).

        Raises:
            TimeoutError: Fewer arrived within ``timeout`` seconds.
        """
        with self._recorded:
            if not self._recorded.wait_for(lambda: len(self._requests) >= count, timeout):
                raise TimeoutError(
                    f"{len(self._requests)} of {count} requests arrived within {timeout} s"
                )
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
        self._stopping = threading.Event()
        self._httpd = LocalHTTPServer(self._address, self._on_post, self._stopping)
        self._httpd.start()
        return self

    def stop(self) -> None:
        """Stop serving: close open connections, end delays and trickles, free the port."""
        if self._httpd is not None:
            httpd, self._httpd = self._httpd, None
            httpd.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.url if self._httpd is not None else "stopped"
        return f"ScriptedLLMServer(wire={self._wire.name!r}, {where})"

    def _record(self, request: RecordedRequest) -> None:
        with self._recorded:
            self._requests.append(request)
            self._request_count += 1
            self._recorded.notify_all()

    def _on_post(self, handler: RequestHandler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        headers = {name.lower(): value for name, value in handler.headers.items()}
        path = handler.path
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        refused = self._wire.refuse(path, headers, raw, self._api_key)
        problem = (
            (404, f"unknown path {path}")
            if not self._wire.accepts(path)
            else (400, "the body is not JSON")
            if body is None
            else None
        )
        if problem is not None or refused is not None:
            self._record(RecordedRequest(path, headers, body, None, 0, handler.client_address[1]))
            if refused is not None:
                handler.send_body(refused[0], json.dumps(refused[1]).encode())
            elif problem is not None:
                handler.send_body(problem[0], self._error(*problem))
            return
        with self._lock:
            self._inflight += 1
            self._max_inflight = max(self._max_inflight, self._inflight)
            self._serial += 1
            inflight, serial = self._inflight, self._serial
        try:
            picked = self._script.pick(self._wire.view(body, path))
            rule = picked[0] if picked is not None else None
            self._record(
                RecordedRequest(path, headers, body, rule, inflight, handler.client_address[1])
            )
            if picked is None:
                handler.send_body(400, self._error(400, "no rule matches this request"))
            else:
                self._reply(handler, body, path, picked[1], serial)
        finally:
            with self._lock:
                self._inflight -= 1

    def _reply(
        self, handler: RequestHandler, body: Any, path: str, reply: ServerReply, serial: int
    ) -> None:
        if reply.delay > 0 and self._stopping.wait(reply.delay):
            handler.close_connection = True
            return
        while reply.hold is not None and not reply.hold.wait(_HOLD_POLL):
            if self._stopping.is_set():
                handler.close_connection = True
                return
        if reply.reset:
            handler.reset()
            return
        if reply.body is not None:
            data = reply.body.encode()
        elif reply.status != 200:
            data = self._error(reply.status, "scripted failure")
        elif reply.stream and self._wire.streams(body, path):
            data = self._wire.stream(body, reply, serial)
            kind = self._wire.stream_type
            pause = None
            if reply.pause is not None:  # after the event at the body's middle
                pause = (self._wire.middle(data), reply.pause)
            handler.send_body(reply.status, data, reply.headers, reply.trickle, kind, pause)
            return
        else:
            data = json.dumps(self._wire.success(body, reply, serial)).encode()
        handler.send_body(reply.status, data, reply.headers, reply.trickle)

    def _error(self, status: int, message: str) -> bytes:
        return json.dumps(self._wire.error(status, message)).encode()
