"""A model client over HTTP: a wire format plus the shared ``HTTPCaller``.

``openai``, ``ollama``, ``anthropic`` and Google's wires differ only in their
``WireFormat`` (path, headers, body encoding and decoding) and configuration;
one client class serves them all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, Unpack
from urllib.parse import quote

import httpx

from cadenza._redact import redact

from ._errors import LLMConfigError
from ._http import HTTPCaller
from ._stream import StreamFactory
from ._types import CallHooks, Completion, LLMRequest

__all__ = ["Decode", "Encode", "HTTPModelClient", "TokenSource", "WireFormat", "sampling"]

TokenSource = Callable[[], Awaitable[str]]
"""Gives the OAuth bearer token for the next call (Vertex AI's, which expires hourly)."""


class Encode(Protocol):
    """Builds the request body; ``stream`` asks the server to stream its reply."""

    def __call__(self, request: LLMRequest, *, stream: bool = False) -> bytes: ...


class Decode(Protocol):
    """Builds the ``Completion`` from a 2xx body, or raises ``LLMResponseError``."""

    def __call__(self, data: bytes, *, what: str, model: str, attempts: int) -> Completion: ...


def sampling(request: LLMRequest) -> dict[str, Any]:
    """The sampling settings ``request`` sets (``temperature``, ``top_p``): both wires' keys."""
    chosen: dict[str, Any] = {}
    if request.temperature is not None:
        chosen["temperature"] = request.temperature
    if request.top_p is not None:
        chosen["top_p"] = request.top_p
    return chosen


def _no_headers(api_key: str) -> dict[str, str]:
    return {}


_ENDPOINTS = 64  # endpoints kept per client, one per model and mode: a run uses a few


@dataclass(frozen=True, slots=True)
class WireFormat:
    """How one API family talks: where to POST, which headers, and the body both ways.

    Attributes:
        name: The API family, e.g. ``openai``.
        path: Appended to the provider's base URL; ``{model}`` in it stands for
            the requested model (Gemini names the model in the URL, not the body).
        encode: Builds the request body.
        decode: Builds the ``Completion`` from a 2xx body.
        auth_headers: The credential headers for an API key.
        extra_headers: Headers every request carries (an API version, say).
        stream: Assembles a streamed reply; None for a family that cannot stream.
        stream_path: The path of a streamed request, where it is not ``path``
            (Gemini's ``:streamGenerateContent?alt=sse``).
    """

    name: str
    path: str
    encode: Encode
    decode: Decode
    auth_headers: Callable[[str], dict[str, str]] = _no_headers
    extra_headers: tuple[tuple[str, str], ...] = ()
    stream: StreamFactory | None = None
    stream_path: str | None = None


class HTTPModelClient:
    """An ``LLMClient`` that speaks ``wire`` to ``base_url``.

    Args:
        provider: The provider's name in errors and logs (``openai``, ``ollama``).
        wire: The API family's wire format.
        base_url: The API root; ``wire.path`` is appended.
        api_key: The credential, or None to send none.
        caller: Sends the requests with retries.
        missing_key: When set, the variable whose absence makes every call
            fail with ``LLMConfigError``. It is checked per call, not at
            construction, so the message can name the model.
        secrets: Values to mask in errors besides the registered ones.
        token: Where an OAuth bearer token comes from, asked before each call
            (for credentials that expire, unlike an API key); None for none.
    """

    __slots__ = (
        "_base",
        "_caller",
        "_headers",
        "_missing_key",
        "_provider",
        "_secrets",
        "_token",
        "_urls",
        "_wire",
    )

    def __init__(
        self,
        *,
        provider: str,
        wire: WireFormat,
        base_url: str,
        api_key: str | None,
        caller: HTTPCaller,
        missing_key: str | None = None,
        secrets: frozenset[str] = frozenset(),
        token: TokenSource | None = None,
    ) -> None:
        self._provider = provider
        self._wire = wire
        self._base = base_url.rstrip("/")
        self._urls: dict[tuple[str, bool], str] = {}  # (model, stream) -> endpoint
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        headers.update(wire.extra_headers)
        if api_key:
            headers.update(wire.auth_headers(api_key))
            secrets = secrets | {api_key}
        # Built once: httpx copies an ``httpx.Headers`` as is, but normalises a dict per call.
        self._headers = httpx.Headers(headers)
        self._missing_key = missing_key
        self._caller = caller
        self._secrets = secrets
        self._token = token

    @property
    def provider(self) -> str:
        """The provider's name, e.g. ``openai``."""
        return self._provider

    @property
    def url(self) -> str:
        """The endpoint requests go to (credentials in it, if any, masked)."""
        return redact(self._base + self._wire.path, self._secrets)

    def _endpoint(self, model: str, stream: bool) -> str:
        """The URL a request for ``model`` goes to, streamed or whole."""
        url = self._urls.get((model, stream))
        if url is None:
            path = self._wire.stream_path if stream and self._wire.stream_path else self._wire.path
            # Quoted whole, so a model name cannot add a path segment or a query.
            url = self._base + path.replace("{model}", quote(model, safe="@"))
            if len(self._urls) < _ENDPOINTS:
                self._urls[model, stream] = url
        return url

    async def complete(self, request: LLMRequest, **hooks: Unpack[CallHooks]) -> Completion:
        """Send ``request`` and decode the reply; see ``LLMClient.complete``.

        With ``on_delta`` the reply is asked for as a stream; a server that
        answers with a whole body instead is read as one.
        """
        if self._missing_key is not None:
            raise LLMConfigError(
                f"{self._missing_key} is not set (needed by model {self._provider}:{request.model})"
            )
        what = f"{self._provider} model {request.model}"
        on_delta, factory = hooks.get("on_delta"), self._wire.stream
        stream = None if factory is None or on_delta is None else (factory, on_delta)
        headers, secrets = self._headers, self._secrets
        if self._token is not None:
            token = await self._token()
            headers = headers.copy()
            headers["Authorization"] = f"Bearer {token}"
            secrets = secrets | {token}
        reply, attempts = await self._caller.post(
            self._endpoint(request.model, stream is not None),
            headers,
            self._wire.encode(request, stream=stream is not None),
            what=what,
            secrets=secrets,
            on_retry=hooks.get("on_retry"),
            max_attempts=None if request.max_retries is None else request.max_retries + 1,
            stream=stream,
        )
        if not isinstance(reply, bytes):
            return reply.completion(what=what, model=request.model, attempts=attempts)
        completion = self._wire.decode(reply, what=what, model=request.model, attempts=attempts)
        if on_delta is not None and completion.content:  # the server did not stream: one piece
            on_delta(completion.content, attempts)
        return completion

    def __repr__(self) -> str:
        return f"HTTPModelClient(provider={self._provider!r}, url={self.url!r})"
