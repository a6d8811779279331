"""Vertex AI (provider ``vertex``): Gemini in a Google Cloud project, with an OAuth token.

A request goes to::

    {host}/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:generateContent

``host`` is ``https://{location}-aiplatform.googleapis.com`` (the bare
``aiplatform.googleapis.com`` for ``global``), or ``GOOGLE_VERTEX_BASE_URL``,
which takes the place of the host only, as the Google SDKs' ``api_endpoint``
does. The project is the first of ``GOOGLE_VERTEX_PROJECT``,
``GOOGLE_CLOUD_PROJECT``, ``GCLOUD_PROJECT`` that is set, else the one the
credentials name; the location the first of ``GOOGLE_VERTEX_LOCATION``,
``GOOGLE_CLOUD_LOCATION``, else ``us-central1``. The body and the reply are
the Gemini API's (``_gemini``). ``vertex-anthropic`` is set up here too, with
Anthropic's publisher and wire (``_vertex_anthropic``).

The token is ``GOOGLE_OAUTH_ACCESS_TOKEN`` as it is (Terraform's variable:
``$(gcloud auth print-access-token)``, no library needed), else Application
Default Credentials through google-auth (the ``vertex`` extra):
``GOOGLE_APPLICATION_CREDENTIALS``'s file, gcloud's login, or the metadata
server; google-auth refreshes it before it expires. Loading and refreshing
block, so they run on a worker thread. Every token is registered as a secret
the moment it is had: no error, log or event shows it.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Unpack

import anyio
import anyio.to_thread

from cadenza._redact import redact, register_secret

from ._errors import LLMConfigError, LLMConnectionError
from ._gemini import WIRE as GEMINI_WIRE
from ._http import HTTPCaller
from ._specs import VERTEX_CLAUDE, VERTEX_CREDENTIALS, VERTEX_LOCATION, VERTEX_PROJECT, Provider
from ._types import CallHooks, Completion, LLMRequest
from ._wire import HTTPModelClient, WireFormat

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

__all__ = ["WIRE", "GoogleToken", "VertexClient", "client"]

DEFAULT_LOCATION: Final = "us-central1"
SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"
_TOKEN_VARIABLE, _CREDENTIALS_VARIABLE = VERTEX_CREDENTIALS
# A project or a region goes into the host name and the path: nothing that could
# move either (``/``, ``@``, ``#``, ``..``) gets through. Domain-scoped projects
# (``example.com:my-project``) have a dot and a colon.
_IDENTIFIER: Final = re.compile(r"[a-z0-9][a-z0-9.:_-]{0,127}")

WIRE: Final = dataclasses.replace(
    GEMINI_WIRE,
    name="vertex",
    path="/models/{model}:generateContent",
    stream_path="/models/{model}:streamGenerateContent?alt=sse",
    auth_headers=lambda api_key: {},  # an OAuth token, not a key (GoogleToken)
)
"""Gemini on Vertex AI: the Gemini wire under a project's ``publishers/google``."""


class GoogleToken:
    """The OAuth access token of a run's Vertex AI calls.

    Args:
        environ: Where ``GOOGLE_OAUTH_ACCESS_TOKEN`` and
            ``GOOGLE_APPLICATION_CREDENTIALS`` are read.
    """

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._fixed = environ.get(_TOKEN_VARIABLE) or None
        self._file = environ.get(_CREDENTIALS_VARIABLE) or None
        self._credentials: Credentials | None = None
        self._project: str | None = None
        self._lock = anyio.Lock()

    async def __call__(self) -> str:
        """A token that is valid now (refreshed first if it is about to expire).

        Raises:
            LLMConfigError: No credentials were found, google-auth is not
                installed, or the token server refused them.
            LLMConnectionError: The token server could not be reached.
        """
        if self._fixed is not None:
            return self._fixed
        async with self._lock:
            credentials = await self._load()
            if not credentials.valid:
                await _blocking(_refresh, credentials)
            token = str(credentials.token)
        register_secret(token)
        return token

    async def project(self) -> str | None:
        """The project the credentials belong to, if they name one."""
        if self._fixed is not None:
            return None
        async with self._lock:
            await self._load()
        return self._project

    async def _load(self) -> Credentials:
        if self._credentials is None:
            self._credentials, self._project = await _blocking(_application_default, self._file)
        return self._credentials


def _application_default(file: str | None) -> tuple[Credentials, str | None]:
    """Application Default Credentials (or the file's), for the cloud-platform scope."""
    import google.auth

    if file is None:
        loaded = google.auth.default(scopes=[SCOPE])
    else:
        # The variable is ADC's own, read from the run's environment rather than the
        # process's: loaded as google.auth.default loads it, with its warning about
        # files from untrusted sources silenced as it silences it (the user named it).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            loaded = google.auth.load_credentials_from_file(  # type: ignore[no-untyped-call]
                file, scopes=[SCOPE]
            )
    return loaded


def _refresh(credentials: Credentials) -> None:
    from google.auth.transport.requests import Request

    credentials.refresh(Request())  # type: ignore[no-untyped-call]


async def _blocking(function: Any, argument: Any) -> Any:
    """Runs google-auth's blocking ``function(argument)`` on a thread, its errors ours.

    A cancelled run does not wait for it (google-auth bounds its own requests).
    """
    try:
        from google.auth import exceptions
    except ImportError:
        raise LLMConfigError(
            "Vertex AI needs Google credentials: pip install 'cadenza[vertex]' for "
            f"Application Default Credentials, or set {_TOKEN_VARIABLE}"
        ) from None

    try:
        return await anyio.to_thread.run_sync(function, argument, abandon_on_cancel=True)
    except exceptions.TransportError as exc:
        raise LLMConnectionError(
            redact(f"Vertex AI: cannot reach the token server: {exc}"), attempts=0
        ) from None
    except exceptions.GoogleAuthError as exc:
        raise LLMConfigError(redact(f"Vertex AI: no usable Google credentials: {exc}")) from None


class VertexClient:
    """An ``LLMClient`` for a Vertex AI publisher, set up on its first call.

    The project may come from the credentials, which are loaded off the event
    loop, so the endpoint is known only once a call needs it.

    Args:
        entry: The provider (``vertex`` or ``vertex-anthropic``).
        wire: The publisher's wire format.
        publisher: ``google`` or ``anthropic``.
        host: The API host, ``{location}`` in it standing for the region.
        environ: Where the project and region variables are read.
        caller: Sends the requests with retries.
        secrets: Values to mask in errors.
    """

    def __init__(
        self,
        entry: Provider,
        wire: WireFormat,
        publisher: str,
        host: str,
        environ: Mapping[str, str],
        caller: HTTPCaller,
        secrets: frozenset[str],
    ) -> None:
        # Claude on Vertex is often set up for Anthropic's SDK: its variables count too.
        claude = VERTEX_CLAUDE if publisher == "anthropic" else ()
        self._entry = entry
        self._wire = wire
        self._publisher = publisher
        self._host = host
        self._project = _first(environ, VERTEX_PROJECT + claude[:1])
        self._location = _first(environ, VERTEX_LOCATION + claude[1:]) or DEFAULT_LOCATION
        self._caller = caller
        self._secrets = secrets
        self._token = GoogleToken(environ)
        self._client: HTTPModelClient | None = None

    @property
    def provider(self) -> str:
        """The provider's name, ``vertex`` or ``vertex-anthropic``."""
        return self._entry.name

    async def complete(self, request: LLMRequest, **hooks: Unpack[CallHooks]) -> Completion:
        """Send ``request`` to the project's model; see ``LLMClient.complete``.

        Raises:
            LLMConfigError: No project, a project or region that cannot be in a
                URL, or no usable credentials (besides ``LLMClient``'s errors).
        """
        client = self._client or await self._set_up(request.model)
        return await client.complete(request, **hooks)

    async def _set_up(self, model: str) -> HTTPModelClient:
        project = self._project or await self._token.project()
        if not project:
            names = ", ".join(VERTEX_PROJECT)
            raise LLMConfigError(
                f"no Google Cloud project for model {self._entry.name}:{model}: set one of "
                f"{names}, or use credentials that name one"
            )
        for what, value in (("project", project), ("location", self._location)):
            if not _IDENTIFIER.fullmatch(value) or ".." in value:
                raise LLMConfigError(
                    f"Vertex AI {what} {redact(value, self._secrets)!r} is not a Google Cloud "
                    f"{what} name (needed by model {self._entry.name}:{model})"
                )
        location = self._location
        host = self._host.replace(
            "{location}-" if location == "global" else "{location}",
            "" if location == "global" else location,
        )
        self._client = HTTPModelClient(
            provider=self._entry.name,
            wire=self._wire,
            base_url=(
                f"{host}/v1/projects/{project}/locations/{location}/publishers/{self._publisher}"
            ),
            api_key=None,
            caller=self._caller,
            secrets=self._secrets,
            token=self._token,
        )
        return self._client

    def __repr__(self) -> str:
        return f"VertexClient(provider={self._entry.name!r}, publisher={self._publisher!r})"


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((value for name in names if (value := environ.get(name))), None)


def client(
    entry: Provider,
    base_url: str,
    environ: Mapping[str, str],
    caller: HTTPCaller,
    secrets: frozenset[str],
) -> VertexClient:
    """The ``vertex`` client: Gemini under ``publishers/google`` (the registry's hook)."""
    return VertexClient(entry, WIRE, "google", base_url, environ, caller, secrets)
