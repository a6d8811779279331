"""The client model calls share: what reaches the server, and proxies from the environment.

`ProviderRegistry.http_client` sends straight through its transport, past
``AsyncClient.send``; these check that nothing a server or a proxy sees changed.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from cadenza.llm import LLMRequest, Message, ProviderRegistry, RetryPolicy

HI = LLMRequest("gpt-test", (Message("user", "hi"),))
ONE_TRY = RetryPolicy(max_attempts=1, deadline=10.0)
_COMPLETION = json.dumps({"choices": [{"message": {"content": "via the recorder"}}]}).encode()
_CHUNKS = [
    {"choices": [{"delta": {"content": "via the "}}]},
    {"choices": [{"delta": {"content": "recorder"}, "finish_reason": "stop"}]},
]
_STREAM = b"".join(b"data: %s\n\n" % json.dumps(chunk).encode() for chunk in _CHUNKS)
_STREAM += b"data: [DONE]\n\n"


@dataclass
class _Seen:
    """A request as the recorder received it: its request line and every header line."""

    line: str
    headers: list[tuple[str, str]] = field(default_factory=list)

    def values(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name]


class _Recorder(ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 that answers every POST with one chat completion.

    As a proxy it gets the request in absolute form (``POST http://host/...``) and
    answers it itself, as a proxy relays the origin's reply.
    """

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[_Seen] = []
        self.gzip = False
        """Whether replies are sent compressed (``Content-Encoding: gzip``)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Recorder

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.server.seen.append(_Seen(self.requestline, list(self.headers.items())))
        streamed = request.get("stream") is True
        body = _STREAM if streamed else _COMPLETION
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if streamed else "application/json")
        if self.server.gzip:
            body = gzip.compress(body)
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    server = _Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(autouse=True)
def no_proxy_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


async def _complete(environ: dict[str, str], *, stream: bool = False) -> str:
    http = ProviderRegistry.http_client(ONE_TRY)
    deltas: list[str] = []
    try:
        registry = ProviderRegistry(environ=environ, policy=ONE_TRY, http=_shared(http))
        async with registry as providers:
            client = providers.client("openai")
            if stream:
                on_delta = lambda text, attempt: deltas.append(text)  # noqa: E731
                completion = await client.complete(HI, on_delta=on_delta)
                assert "".join(deltas) == completion.content
            else:
                completion = await client.complete(HI)
    finally:
        await http.aclose()
    return str(completion.content)


def _shared(http: httpx.AsyncClient) -> Callable[[], Awaitable[httpx.AsyncClient]]:
    async def give() -> httpx.AsyncClient:
        return http

    return give


async def test_a_call_sends_the_clients_headers_and_the_providers_once_each(
    recorder: _Recorder,
) -> None:
    """The client's defaults (User-Agent, Accept...) go with the call, a header the
    provider sets replaces the default of the same name whatever its case, and no
    header is sent twice."""
    environ = {"OPENAI_API_KEY": "key-one-two-three", "OPENAI_BASE_URL": f"{recorder.url}/v1"}
    assert await _complete(environ) == "via the recorder"
    [seen] = recorder.seen
    assert seen.line == "POST /v1/chat/completions HTTP/1.1"
    names = [name.lower() for name, _ in seen.headers]
    assert len(names) == len(set(names)), seen.headers
    assert seen.values("authorization") == ["Bearer key-one-two-three"]
    assert seen.values("content-type") == ["application/json"]
    assert seen.values("accept") == ["application/json"]  # the provider's, not httpx's */*
    assert seen.values("user-agent")[0].startswith("python-httpx/")
    assert seen.values("accept-encoding"), "the client's defaults were left out"
    assert seen.values("host") == [recorder.url.removeprefix("http://")]


async def test_a_proxy_set_in_the_environment_carries_the_model_calls(
    recorder: _Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With HTTP_PROXY set, a model call goes to the proxy (absolute form), as httpx's
    client sends it: the endpoint's host is never resolved here (``.invalid``)."""
    monkeypatch.setenv("HTTP_PROXY", recorder.url)
    environ = {"OPENAI_API_KEY": "key-one-two-three", "OPENAI_BASE_URL": "http://model.invalid/v1"}
    assert await _complete(environ) == "via the recorder"
    [seen] = recorder.seen
    assert seen.line == "POST http://model.invalid/v1/chat/completions HTTP/1.1"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_compressed_reply_is_decoded(recorder: _Recorder, stream: bool) -> None:
    """A reply sent with ``Content-Encoding: gzip`` (the client asks for it) is read
    decoded, whole or as a stream."""
    recorder.gzip = True
    environ = {"OPENAI_API_KEY": "key-one-two-three", "OPENAI_BASE_URL": f"{recorder.url}/v1"}
    assert await _complete(environ, stream=stream) == "via the recorder"
    [seen] = recorder.seen
    assert "gzip" in seen.values("accept-encoding")[0]


async def test_a_closed_client_sends_nothing(recorder: _Recorder) -> None:
    """A call through a shared client its owner closed fails as httpx's own does; no
    connection is opened that nothing would close."""
    http = ProviderRegistry.http_client(ONE_TRY)
    await http.aclose()
    environ = {"OPENAI_API_KEY": "key-one-two-three", "OPENAI_BASE_URL": f"{recorder.url}/v1"}
    registry = ProviderRegistry(environ=environ, policy=ONE_TRY, http=_shared(http))
    async with registry as providers:
        with pytest.raises(RuntimeError, match="client has been closed"):
            await providers.client("openai").complete(HI)
    assert recorder.seen == []
