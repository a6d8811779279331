"""One JSON POST to a provider, with retries, a deadline per attempt and a body cap.

Every HTTP provider sends through ``HTTPCaller.post``; it owns the retry loop,
so the providers only map types to and from their wire format.
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

import httpx
from anyio.lowlevel import checkpoint

from cadenza._logging import get_logger
from cadenza._redact import redact
from cadenza.kernel import Clock

from ._errors import (
    LLMConfigError,
    LLMConnectionError,
    LLMError,
    LLMHTTPError,
    LLMResponseError,
    LLMTimeout,
)
from ._retry import RetryPolicy, is_retryable_status
from ._stream import Framer, StreamAssembler, StreamError, framer_for
from ._types import RetryHook

__all__ = ["DEFAULT_MAX_BODY", "HTTPCaller", "http_client"]

DEFAULT_MAX_BODY: Final = 8 * 1024 * 1024
"""The largest response body read, in bytes; a chat completion is far smaller."""

_PREVIEW_CHARS: Final = 200
_PARSED_URLS: Final = 64  # endpoints whose parsed URL is kept; a run uses one or two

_log = get_logger("cadenza.llm")


# Schemes whose proxy, set in the environment, the client's mounts route through.
_PROXIED: Final = frozenset({"http", "https", "all"})


@dataclass(frozen=True, slots=True)
class _Direct:
    """How to send a request straight to a client's transport (see `http_client`)."""

    transport: httpx.AsyncBaseTransport
    headers: dict[str, str]
    """The client's default headers (``User-Agent``, ``Accept-Encoding``...), names lowercased."""
    timeout: dict[str, float | None]
    """The client's timeouts, as ``build_request`` hands them to the transport."""

    async def send(self, url: httpx.URL, headers: Mapping[str, str], body: bytes) -> httpx.Response:
        """POSTs ``body``, headers as ``build_request`` merges them; the reply is streamed."""
        merged = self.headers.copy()
        for name, value in headers.items():
            merged[name.lower()] = value
        request = httpx.Request(
            "POST", url, headers=merged, content=body, extensions={"timeout": self.timeout}
        )
        return await self.transport.handle_async_request(request)


class _ModelClient(httpx.AsyncClient):
    """httpx's client over ``transport``, which model calls reach past ``send`` (`direct`)."""

    def __init__(self, transport: httpx.AsyncBaseTransport, timeout: httpx.Timeout) -> None:
        super().__init__(transport=transport, timeout=timeout)
        defaults = {name.lower(): value for name, value in self.headers.items()}
        self.direct = _Direct(transport, defaults, self.timeout.as_dict())


def http_client(
    timeout: httpx.Timeout, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for model calls, which `HTTPCaller` sends through its
    transport directly.

    ``AsyncClient.send`` costs about 100 us of CPU a request around its transport
    (the auth flow, redirects, the cookie jar, event hooks, a log line), as much as
    a whole agent step's own work, and a model call uses none of it: providers
    neither redirect nor set cookies a call needs, and a signing provider's auth
    takes the client's way (`HTTPCaller.signed`). With a proxy set in the
    environment (``HTTPS_PROXY``...), requests take the client's way too, so that
    its mounts route them. The client is otherwise httpx's default one; closing
    it closes the transport. Build it off the event loop: it loads the CA bundle.
    """
    if transport is None and _PROXIED & urllib.request.getproxies().keys():
        # httpx mounts the environment's proxies only on a client given no transport.
        return httpx.AsyncClient(timeout=timeout)
    return _ModelClient(transport if transport is not None else httpx.AsyncHTTPTransport(), timeout)


class _BodyTooLarge(Exception):
    def __init__(self, size: int) -> None:
        self.size = size


@dataclass(frozen=True, slots=True)
class _Failure:
    """A failed attempt: the error to raise if it is the last, and why, for logs and hooks."""

    error: LLMError
    reason: str
    retryable: bool = True
    headers: httpx.Headers | None = None  # of the error response, for Retry-After


class _Expiry:
    """Cancels the task that made it when its time is up (`expire`), and tells
    whether a cancellation it caught was its own (`expired`)."""

    __slots__ = ("_cancelling", "_fired", "_task")

    def __init__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("an HTTP attempt runs in an asyncio task")
        self._task = task
        self._cancelling = task.cancelling()  # requests before ours: not ours to take back
        self._fired = False

    def expire(self) -> None:
        self._fired = True
        self._task.cancel()

    def expired(self) -> bool:
        """Whether the deadline, and nothing else, cancelled the task (its request is
        taken back: the task goes on, with a `TimeoutError` instead)."""
        return self._fired and self._task.uncancel() <= self._cancelling


class HTTPCaller:
    """Posts JSON bodies under one retry policy, clock and body cap.

    Args:
        http: Gives the shared ``httpx.AsyncClient`` (created on first use).
        clock: Backoff sleeps and per-attempt deadlines run on it.
        policy: Attempts, backoff and the per-attempt deadline.
        rng: The source of backoff jitter.
        max_body: The largest response body accepted, in bytes.
        auth: Signs every attempt's request (see `signed`); None sends them as given.
    """

    def __init__(
        self,
        *,
        http: Callable[[], Awaitable[httpx.AsyncClient]],
        clock: Clock,
        policy: RetryPolicy,
        rng: random.Random,
        max_body: int = DEFAULT_MAX_BODY,
        auth: httpx.Auth | None = None,
    ) -> None:
        self._http = http
        self._clock = clock
        self._policy = policy
        self._rng = rng
        self._max_body = max_body
        self._auth = auth
        self._urls: dict[str, httpx.URL] = {}  # endpoint -> parsed, see _send_once

    def signed(self, auth: httpx.Auth) -> HTTPCaller:
        """A caller like this one (same client, clock, policy, jitter) that signs with ``auth``.

        httpx runs ``auth`` on each attempt's request just before sending it, so a
        retry is signed afresh: a SigV4 signature carries the time it was made,
        and AWS refuses one minutes old.
        """
        caller = copy.copy(self)
        caller._auth = auth
        return caller

    async def post(
        self,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        what: str,
        secrets: frozenset[str],
        on_retry: RetryHook | None = None,
        max_attempts: int | None = None,
        stream: Callable[[int], StreamAssembler] | None = None,
    ) -> tuple[bytes | StreamAssembler, int]:
        """POST ``body`` to ``url`` until a 2xx answer or a final failure.

        Args:
            url: The endpoint.
            headers: Request headers, credentials included; they are never logged.
            body: The encoded JSON request.
            what: Names the call in errors and logs, e.g. ``openai model gpt-4o``.
            secrets: Values to mask in error messages besides the registered ones.
            on_retry: Called as ``on_retry(attempt, reason)`` before each backoff.
            max_attempts: Overrides the policy's attempts for this call (a
                step's ``maxRetries`` + 1).
            stream: For a streamed request, what builds an attempt's assembler
                (given the attempt's number). A 2xx streamed reply
                (``text/event-stream``; AWS's ``application/vnd.amazon.eventstream``)
                is then read event by event as it arrives.

        Returns:
            The 2xx response (its body, or the assembler that read its stream)
            and the number of attempts it took.

        Raises:
            LLMHTTPError: A non-retryable status, or 429/5xx on the last attempt.
            LLMConnectionError: A connection failure on the last attempt.
            LLMTimeout: The last attempt ran past the deadline.
            LLMResponseError: The body was larger than the cap, or undecodable
                (a stream the server broke off with an error event is retried).
            LLMConfigError: The URL is not valid.
        """
        policy = self._policy
        attempts = policy.max_attempts if max_attempts is None else max(1, max_attempts)
        attempt = 0
        while True:
            attempt += 1
            started = self._clock.now()
            outcome = await self._attempt(url, headers, body, what, attempt, secrets, stream)
            elapsed = round(self._clock.now() - started, 4)
            if not isinstance(outcome, _Failure):
                _log.debug("llm_attempt", call=what, attempt=attempt, ok=True, elapsed_s=elapsed)
                return outcome, attempt
            _log.debug(
                "llm_attempt", call=what, attempt=attempt, failure=outcome.reason, elapsed_s=elapsed
            )
            if not outcome.retryable or attempt >= attempts:
                raise outcome.error
            delay = policy.wait(attempt, self._rng, outcome.headers)
            if on_retry is not None:
                on_retry(attempt, outcome.reason)
            await self._clock.sleep(delay)

    async def _attempt(
        self,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        what: str,
        attempt: int,
        secrets: frozenset[str],
        stream: Callable[[int], StreamAssembler] | None,
    ) -> bytes | StreamAssembler | _Failure:
        """One attempt under the deadline: the 2xx reply, or what went wrong."""
        deadline = self._policy.deadline
        # What ``asyncio.timeout`` does, on the run's clock: a timer that cancels this
        # task, and a cancellation that only the timer asked for is the deadline (one
        # from outside, even at the same moment, passes through). An anyio cancel
        # scope did the same for three times the cost, on every model call.
        expiry = _Expiry()
        timer = self._clock.call_later(deadline, expiry.expire)
        try:
            try:
                status, reply_headers, data = await self._send_once(
                    url, headers, body, stream, attempt
                )
            except asyncio.CancelledError:
                if not expiry.expired():
                    raise
                # An anyio scope cancelled in the same moment delivers its cancellation
                # on the loop's next turn (the task's wait was cancelled already): let
                # it in, so that the caller is cancelled, not told of a timeout.
                await checkpoint()
                raise TimeoutError(f"timed out after {deadline}s") from None
            finally:
                timer.cancel()
        except _BodyTooLarge as exc:
            raise LLMResponseError(
                f"{what}: response body of {exc.size} bytes or more is over the "
                f"{self._max_body}-byte limit",
                attempts=attempt,
            ) from None
        except httpx.DecodingError as exc:
            raise LLMResponseError(
                redact(f"{what}: cannot decode the response body: {exc}", secrets),
                attempts=attempt,
            ) from None
        except LLMResponseError as exc:  # a stream's malformed event
            raise LLMResponseError(redact(f"{what}: {exc}", secrets), attempts=attempt) from None
        except StreamError as exc:
            message = redact(f"{what}: the server broke off its stream: {exc}", secrets)
            return _Failure(
                LLMResponseError(f"{message} ({_after(attempt)})", attempts=attempt),
                reason="stream error",
            )
        except httpx.InvalidURL as exc:
            raise LLMConfigError(redact(f"{what}: invalid URL {url}: {exc}", secrets)) from None
        except TimeoutError:
            return _Failure(
                LLMTimeout(
                    f"{what}: an attempt took longer than the {deadline:g} s deadline "
                    f"({_after(attempt)})",
                    attempts=attempt,
                ),
                reason=f"deadline of {deadline:g} s exceeded",
            )
        except httpx.TimeoutException as exc:
            name = type(exc).__name__
            return _Failure(
                LLMTimeout(
                    f"{what}: {name} (no progress for {deadline:g} s; {_after(attempt)})",
                    attempts=attempt,
                ),
                reason=f"timeout: {name}",
            )
        except httpx.TransportError as exc:
            name = type(exc).__name__
            message = redact(
                f"{what}: cannot reach {url}: {name}: {exc} ({_after(attempt)})", secrets
            )
            return _Failure(
                LLMConnectionError(message, attempts=attempt), reason=f"connection error: {name}"
            )
        if 200 <= status < 300:
            return data
        assert isinstance(data, bytes)  # only a 2xx reply is read as a stream
        return _Failure(
            LLMHTTPError(
                f"{what}: HTTP {status} ({_after(attempt)}): {error_preview(data, secrets)}",
                status=status,
                attempts=attempt,
            ),
            reason=f"HTTP {status}",
            retryable=is_retryable_status(status),
            headers=reply_headers,
        )

    async def _send_once(
        self,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        stream: Callable[[int], StreamAssembler] | None,
        attempt: int,
    ) -> tuple[int, httpx.Headers, bytes | StreamAssembler]:
        http = await self._http()
        target = self._urls.get(url)
        if target is None:  # parsed once per endpoint: parsing a URL string costs ~40 us a call
            target = httpx.URL(url)
            if len(self._urls) < _PARSED_URLS:
                self._urls[url] = target
        # A closed client takes httpx's way, which refuses to send (its transport would not).
        if isinstance(http, _ModelClient) and self._auth is None and not http.is_closed:
            response = await http.direct.send(target, headers, body)
        else:
            request = http.build_request("POST", target, headers=headers, content=body)
            if self._auth is None:
                response = await http.send(request, stream=True)
            else:
                response = await http.send(request, stream=True, auth=self._auth)
        try:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self._max_body:
                raise _BodyTooLarge(int(declared))
            framer = None
            if stream is not None and 200 <= response.status_code < 300:
                framer = framer_for(response.headers.get("content-type", ""))
            if stream is not None and framer is not None:
                assembler = stream(attempt)
                await self._read_stream(response, assembler, framer())
                return response.status_code, response.headers, assembler
            # Read in chunks so an endless or decompression-bomb body stops at the cap.
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self._max_body:
                    raise _BodyTooLarge(size)
                chunks.append(chunk)
        finally:
            await response.aclose()
        return response.status_code, response.headers, b"".join(chunks)

    async def _read_stream(
        self, response: httpx.Response, assembler: StreamAssembler, parser: Framer
    ) -> None:
        """Feeds each event of a streamed reply to ``assembler`` as it arrives, up to the cap."""
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self._max_body:
                raise _BodyTooLarge(size)
            assembler.feed(parser.feed(chunk))
        assembler.feed(parser.close())


def _after(attempt: int) -> str:
    return f"after {attempt} attempt{'' if attempt == 1 else 's'}"


def error_preview(data: bytes, secrets: frozenset[str] = frozenset()) -> str:
    """A short, redacted, one-line preview of an error body.

    Prefers the ``error.message`` that OpenAI and Anthropic put in their
    error JSON, or the top-level ``message`` of AWS's; falls back to the raw text.
    """
    text = data[:4096].decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        inner = parsed.get("error", parsed.get("message"))
        message = inner.get("message") if isinstance(inner, dict) else inner
        if isinstance(message, str) and message:
            text = message
    # Redact before cutting, so a secret cut in half cannot slip through unmatched.
    flat = " ".join(redact(text, secrets).split())
    if not flat:
        return "(empty body)"
    if len(flat) > _PREVIEW_CHARS:
        return flat[: _PREVIEW_CHARS - 3] + "..."
    return flat
