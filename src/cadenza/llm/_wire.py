"""A model client over HTTP: a wire format plus the shared ``HTTPCaller``.

The providers differ only in their ``WireFormat`` (path, headers, body encoding
and decoding, how a request is signed) and configuration (URL, key); one client
class serves them all.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Unpack
from urllib.parse import quote

import httpx
import msgspec

from cadenza._redact import redact

from ._errors import LLMConfigError
from ._http import HTTPCaller
from ._stream import StreamAssembler, StreamFactory
from ._types import CallHooks, Completion, DeltaHook, LLMRequest, Message

__all__ = [
    "Connect",
    "Connection",
    "Decode",
    "Encode",
    "HTTPModelClient",
    "WireFormat",
    "alternating_turns",
    "arguments_object",
    "sampling",
]


class Encode(Protocol):
    """Builds the request body; ``stream`` asks the server to stream its reply."""

    def __call__(self, request: LLMRequest, *, stream: bool = False) -> bytes: ...


class Decode(Protocol):
    """Builds the ``Completion`` from a 2xx body, or raises ``LLMResponseError``."""

    def __call__(self, data: bytes, *, what: str, model: str, attempts: int) -> Completion: ...


_arguments_decoder = msgspec.json.Decoder(dict[str, Any])


def arguments_object(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as the JSON object the Anthropic, Bedrock and Gemini wires
    send back in the history; ``{}`` when they are not one.

    Arguments that are no object were already reported back to the model by the
    tool loop; sending ``{}`` keeps the history valid.
    """
    try:
        return _arguments_decoder.decode(arguments)
    except msgspec.DecodeError:
        return {}


def alternating_turns(
    messages: tuple[Message, ...], blocks: Callable[[Message], list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The conversation as alternating ``user`` and ``assistant`` turns of ``blocks``
    (the Anthropic and Bedrock wires): system messages left out, a tool result in a
    user turn, consecutive messages of one side merged into one turn, and a message
    with no block dropped (both APIs reject empty turns and blank text blocks)."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        content = blocks(message)
        if not content:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(content)
        else:
            turns.append({"role": role, "content": content})
    return turns


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


@dataclass(frozen=True, slots=True)
class Connection:
    """How to reach a provider that the environment configures with more than a key and a URL.

    Attributes:
        base_url: The API root the environment names.
        url_variable: The variable ``base_url`` came from, for errors (or the one to set).
        auth: Signs each attempt's request (Bedrock's SigV4); None when
            ``missing`` is set.
        missing: The variables to set when the credentials are incomplete, as
            in ``"AWS_SECRET_ACCESS_KEY is not set"``; None when complete.
    """

    base_url: str
    url_variable: str
    auth: httpx.Auth | None
    missing: str | None = None


Connect = Callable[[Mapping[str, str]], Connection]
"""Reads a provider's credentials, region and endpoint from the environment.

Raises:
    LLMConfigError: What the wire needs is not installed (its extra).
"""


@dataclass(frozen=True, slots=True)
class WireFormat:
    """How one API family talks: where to POST, which headers, and the body both ways.

    Attributes:
        name: The API family, e.g. ``openai``.
        path: Appended to the provider's base URL; ``{model}`` in it stands for
            the model's name, percent-encoded (Bedrock's ``/model/{model}/converse``,
            Gemini's ``/v1beta/models/{model}:generateContent``).
        encode: Builds the request body.
        decode: Builds the ``Completion`` from a 2xx body.
        auth_headers: The credential headers for an API key.
        extra_headers: Headers every request carries (an API version, say).
        stream: Assembles a streamed reply; None for a family that cannot stream.
        stream_path: The path of a streamed request, when it is not ``path``.
        connect: For a family authorised per request from several variables
            (Bedrock's SigV4, Vertex AI's OAuth token): reads them. None: the
            provider's key goes in ``auth_headers``.
    """

    name: str
    path: str
    encode: Encode
    decode: Decode
    auth_headers: Callable[[str], dict[str, str]] = _no_headers
    extra_headers: tuple[tuple[str, str], ...] = ()
    stream: StreamFactory | None = None
    stream_path: str | None = None
    connect: Connect | None = None


def _assembler(
    factory: StreamFactory, on_delta: DeltaHook, on_reasoning: DeltaHook | None, attempt: int
) -> StreamAssembler:
    return factory(on_delta, attempt, on_reasoning)


class HTTPModelClient:
    """An ``LLMClient`` that speaks ``wire`` to ``base_url``.

    Args:
        provider: The provider's name in errors and logs (``openai``, ``ollama``).
        wire: The API family's wire format.
        base_url: The API root; ``wire.path`` is appended. A ``{model}`` in it is
            each request's model (an Azure deployment's name), URL-quoted.
        api_key: The credential, or None to send none.
        caller: Sends the requests with retries.
        missing_key: When set, the variable whose absence makes every call
            fail with ``LLMConfigError``. It is checked per call, not at
            construction, so the message can name the model.
        secrets: Values to mask in errors besides the registered ones.
        query: Appended after ``wire.path`` (``?api-version=...``).
    """

    __slots__ = (
        "_caller",
        "_headers",
        "_missing_key",
        "_provider",
        "_secrets",
        "_stream_url",
        "_url",
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
        query: str = "",
    ) -> None:
        self._provider = provider
        self._wire = wire
        self._url = base_url.rstrip("/") + wire.path + query
        self._stream_url = base_url.rstrip("/") + (wire.stream_path or wire.path) + query
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

    @property
    def provider(self) -> str:
        """The provider's name, e.g. ``openai``."""
        return self._provider

    @property
    def url(self) -> str:
        """The endpoint requests go to (credentials in it, if any, masked)."""
        return redact(self._url, self._secrets)

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
        on_reasoning = hooks.get("on_reasoning")
        stream = None
        if factory is not None and on_delta is not None:
            stream = functools.partial(_assembler, factory, on_delta, on_reasoning)
        url = self._stream_url if stream is not None else self._url
        if "{model}" in url:
            # Quoted whole, so a model name cannot add a path segment or a query;
            # an '@' stays (Claude's versions on Vertex AI), as Google writes it.
            url = url.replace("{model}", quote(request.model, safe="@"))
        reply, attempts = await self._caller.post(
            url,
            self._headers,
            self._wire.encode(request, stream=stream is not None),
            what=what,
            secrets=self._secrets,
            on_retry=hooks.get("on_retry"),
            max_attempts=None if request.max_retries is None else request.max_retries + 1,
            stream=stream,
        )
        if not isinstance(reply, bytes):
            return reply.completion(what=what, model=request.model, attempts=attempts)
        completion = self._wire.decode(reply, what=what, model=request.model, attempts=attempts)
        # The server did not stream: the reasoning in one piece, then the text in one.
        if on_reasoning is not None and completion.reasoning_text:
            on_reasoning(completion.reasoning_text, attempts)
        if on_delta is not None and completion.content:
            on_delta(completion.content, attempts)
        return completion

    def __repr__(self) -> str:
        return f"HTTPModelClient(provider={self._provider!r}, url={self.url!r})"
