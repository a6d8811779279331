"""The per-run registry that hands out model clients (specs are read by ``_specs``)."""

from __future__ import annotations

import asyncio
import importlib
import os
import random
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Final, Self

import anyio.to_thread
import httpx

from cadenza._redact import redact, register_secrets_from, secrets_from
from cadenza.kernel import Clock, SystemClock

from ._errors import LLMConfigError, LLMError
from ._http import DEFAULT_MAX_BODY, HTTPCaller, http_client
from ._retry import RetryPolicy
from ._scripted import ScriptedClient, ScriptReplyLike
from ._specs import (
    DEFAULT_PROVIDER_VARIABLE,
    PROVIDERS,
    Provider,
    fill_url,
    hint,
    http_provider,
    missing_variable,
    parse_model,
)
from ._types import LLMClient
from ._wire import Connect, Connection, HTTPModelClient, WireFormat

__all__ = ["ProviderRegistry"]

_VARIABLES: Final = frozenset(
    [DEFAULT_PROVIDER_VARIABLE]
    + [
        variable
        for name in PROVIDERS
        if (entry := http_provider(name)) is not None
        for variable in (*entry.url_variables, *entry.key_variables, *entry.variables)
    ]
)
_CONNECT_TIMEOUT: Final = 10.0


class ProviderRegistry:
    """The run's model clients, over one shared ``httpx.AsyncClient``.

    Use one per run, as an async context manager; leaving it closes the HTTP
    client. The HTTP client is created on the first HTTP call, so a run that
    only uses ``scripted`` models opens no connections.

    Example::

        async with ProviderRegistry(environ=os.environ, clock=clock) as providers:
            provider, model = providers.check("openai:gpt-4o-mini")
            client = providers.client(provider, key="writer")
            completion = await client.complete(LLMRequest(model, messages))

    Args:
        environ: Where keys and base URLs come from (``OPENAI_API_KEY``,
            ``OPENAI_BASE_URL``, ``OLLAMA_HOST``... each provider's, as the
            provider table names them); ``os.environ`` when None. Read once,
            here. Its ``*_API_KEY``, ``*_TOKEN`` and ``AWS_SECRET_ACCESS_KEY``
            values are registered for redaction.
        clock: Backoff sleeps and per-attempt deadlines run on it.
        policy: Retries, backoff and the per-attempt deadline.
        transport: An httpx transport to send through (tests pass
            ``httpx.MockTransport``); httpx's default when None.
        rng: The source of backoff jitter (seed it for repeatable waits).
        max_body: The largest response body accepted, in bytes.
        http: Where to get a shared ``httpx.AsyncClient`` owned by the caller (a
            `Runtime` shares one across its runs, so connections and the loaded
            CA bundle are reused); the registry then neither builds nor closes one.
            Build it with `http_client`, whose model calls take the shortest way.
        offline: An offline replay's (``cadenza replay``): its calls are answered from
            a recorded run's journal, so no key is asked for (`check` passes without
            one) and no client may reach the network (a call fails with `LLMError`).
    """

    def __init__(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        policy: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        http: Callable[[], Awaitable[httpx.AsyncClient]] | None = None,
        offline: bool = False,
    ) -> None:
        source = os.environ if environ is None else environ
        register_secrets_from(source)
        self._secrets = secrets_from(source)
        # Keep only what the providers read, so fewer secrets linger here.
        self._environ = {name: source[name] for name in _VARIABLES if name in source}
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._policy = policy if policy is not None else RetryPolicy()
        self._transport = transport
        self._http: httpx.AsyncClient | None = None
        self._http_lock = asyncio.Lock()
        self._shared_http = http
        self._closed = False
        self._offline = offline
        self._clients: dict[tuple[str, str], LLMClient] = {}
        self._connections: dict[str, Connection] = {}  # provider -> its wire's, see _connect
        self._taken: Mapping[str, Collection[int]] = {}  # see resume_scripts
        self._checked: dict[str, tuple[str, str]] = {}  # spec -> check(spec), once it passed
        self._caller = HTTPCaller(
            http=self._http_client,
            clock=self._clock,
            policy=self._policy,
            rng=rng if rng is not None else random.Random(),
            max_body=max_body,
        )

    @property
    def policy(self) -> RetryPolicy:
        """The retry policy every HTTP provider uses."""
        return self._policy

    def check(self, spec: str) -> tuple[str, str]:
        """Parse ``spec`` and check its provider is configured; call it before a run starts.

        Returns:
            ``(provider, model)``, as ``parse_model`` gives them.

        Raises:
            LLMConfigError: The spec is bad, or the provider's key (or a variable
                its URL needs) is not set
                (``OPENAI_API_KEY is not set (needed by model openai:gpt-4o)``).
        """
        checked = self._checked.get(spec)
        if checked is not None:  # the environment was read once: the answer stands
            return checked
        default = self._environ.get(DEFAULT_PROVIDER_VARIABLE)
        provider, model = parse_model(spec, default_provider=default)
        variable = None if self._offline else self._missing(provider)
        if variable is not None:
            raise LLMConfigError(f"{variable} is not set (needed by model {provider}:{model})")
        self._checked[spec] = provider, model
        return provider, model

    def resume_scripts(self, taken: Mapping[str, Collection[int]]) -> None:
        """Continues a resumed run's scripts: the positions its finished work used, per key.

        A ``scripted`` client made afterwards for a key skips that key's positions,
        so an agent goes on with the reply the interrupted run would have given
        next rather than with its first (see `ScriptedClient`). Call it before
        the run asks for clients.
        """
        self._taken = taken

    def client(
        self,
        provider: str,
        *,
        script: Sequence[str | ScriptReplyLike] | None = None,
        key: str = "",
    ) -> LLMClient:
        """The client for ``provider``, created on first use and cached per ``(provider, key)``.

        Args:
            provider: One of ``PROVIDERS``.
            script: The agent's replies, for ``scripted`` (ignored otherwise).
                The script given when a key is first used is the one it keeps.
            key: Tells callers apart, typically the agent's name: each scripted
                agent keeps its own position in its script.

        Raises:
            LLMConfigError: An unknown provider, a bad base URL, or a scripted
                client without a usable script. A missing API key is reported
                by ``complete`` (or ahead of time by ``check``).
            LLMError: The registry is closed.
        """
        if self._closed:
            raise LLMError("the provider registry is closed; create one per run")
        cached = self._clients.get((provider, key))
        if cached is not None:
            return cached
        client = self._create(provider, script, key)
        self._clients[provider, key] = client
        return client

    async def aclose(self) -> None:
        """Close the shared HTTP client; clients handed out stop working."""
        self._closed = True
        if self._http is not None:
            http, self._http = self._http, None
            await http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<ProviderRegistry {state} clients={len(self._clients)} policy={self._policy!r}>"

    def _create(
        self, provider: str, script: Sequence[str | ScriptReplyLike] | None, key: str
    ) -> LLMClient:
        if provider == "scripted":
            return ScriptedClient(script or (), taken=self._taken.get(key, ()))
        entry = http_provider(provider)
        if entry is None:
            raise LLMConfigError(f"unknown provider {provider!r}{hint(provider)}")
        return self._http_model(entry)

    def _http_model(self, entry: Provider) -> LLMClient:
        wire = _wire(entry.wire)
        if wire.connect is not None:  # signed per request: the wire reads its own variables
            connection = self._connect(entry.name, wire.connect)
            auth = connection.auth
            return HTTPModelClient(
                provider=entry.name,
                wire=wire,
                base_url=_http_url(connection.url_variable, connection.base_url, self._secrets),
                api_key=None,
                caller=self._caller if auth is None else self._caller.signed(auth),
                missing_key=connection.missing,
                secrets=self._secrets,
            )
        environ = self._environ
        base = environ.get(entry.url_variable) or fill_url(entry, entry.default_url, environ)
        if entry.bare_host and "://" not in base:
            base = f"http://{base}"
        base_url = _http_url(entry.url_variable, base, self._secrets)
        api_key = next((environ[name] for name in entry.key_variables if environ.get(name)), None)
        return HTTPModelClient(
            provider=entry.name,
            wire=wire,
            base_url=base_url + fill_url(entry, entry.url_suffix, environ),
            api_key=api_key,
            caller=self._caller,
            missing_key=missing_variable(entry.name, environ),
            secrets=self._secrets,
            query=fill_url(entry, entry.query, environ),
        )

    def _missing(self, provider: str) -> str | None:
        """What ``provider`` needs that the environment does not set (a signing wire says)."""
        entry = http_provider(provider)
        connect = None if entry is None else _wire(entry.wire).connect
        if connect is not None:
            return self._connect(provider, connect).missing
        return missing_variable(provider, self._environ)

    def _connect(self, provider: str, connect: Connect) -> Connection:
        """``provider``'s connection, made once a run.

        Every agent's client shares its credentials: Vertex AI's token is
        fetched once a run, not once per agent.
        """
        connection = self._connections.get(provider)
        if connection is None:
            connection = self._connections[provider] = connect(self._environ)
        return connection

    async def _http_client(self) -> httpx.AsyncClient:
        if self._offline:  # never reached by a replay's calls: a guard, should one go live
            raise LLMError("an offline replay makes no model call")
        if self._shared_http is not None:
            return await self._shared_http()
        if self._http is not None:
            return self._http
        async with self._http_lock:
            if self._http is None:
                if self._closed:
                    raise LLMError("the provider registry is closed; create one per run")
                if self._transport is not None:  # nothing to load: build it here
                    http = self._new_http_client()
                else:
                    # Building the default client loads the CA bundle: up to 0.1 s
                    # of blocking work that would stall every actor on the loop.
                    http = await anyio.to_thread.run_sync(self._new_http_client)
                if self._closed:  # closed while we were building it
                    await http.aclose()
                    raise LLMError("the provider registry is closed; create one per run")
                self._http = http
            return self._http

    def _new_http_client(self) -> httpx.AsyncClient:
        return ProviderRegistry.http_client(self._policy, self._transport)

    @staticmethod
    def http_client(
        policy: RetryPolicy | None = None, transport: httpx.AsyncBaseTransport | None = None
    ) -> httpx.AsyncClient:
        """A client to share among registries (their ``http``): model calls take its
        shortest way, straight to its transport.

        Its timeouts are ``policy``'s deadline (`RetryPolicy`'s default when None);
        it sends through ``transport`` (httpx's default when None). It loads the CA
        bundle, tens of milliseconds of blocking work: build it off the event loop.
        """
        deadline = (policy if policy is not None else RetryPolicy()).deadline
        timeout = httpx.Timeout(deadline, connect=min(_CONNECT_TIMEOUT, deadline))
        return http_client(timeout, transport)


def _wire(name: str) -> WireFormat:
    """The wire format of API family ``name``: ``WIRE`` of ``cadenza.llm._<name>``, imported
    when a provider speaking it is first used."""
    wire: WireFormat = importlib.import_module(f"cadenza.llm._{name}").WIRE
    return wire


def _http_url(variable: str, value: str, secrets: frozenset[str]) -> str:
    if not value.startswith(("http://", "https://")):
        shown = redact(value, secrets)
        raise LLMConfigError(f"{variable} must be an http:// or https:// URL, got {shown!r}")
    return value.rstrip("/")
