"""Vertex AI (provider ``vertex``): Gemini in a Google Cloud project, with an OAuth token.

A request goes to::

    {host}/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:generateContent

``host`` is ``https://{location}-aiplatform.googleapis.com`` (the bare
``aiplatform.googleapis.com`` for ``global``), or ``GOOGLE_VERTEX_BASE_URL``,
which takes the place of the host only, as the Google SDKs' ``api_endpoint``
does. The project is the first of ``GOOGLE_VERTEX_PROJECT``,
``GOOGLE_CLOUD_PROJECT``, ``GCLOUD_PROJECT`` that is set (a run without one is
refused before it starts, as zenflow refuses it); the location the first of
``GOOGLE_VERTEX_LOCATION``, ``GOOGLE_CLOUD_LOCATION``, else ``us-central1``.
The body and the reply are the Gemini API's (``_gemini``). ``vertex-anthropic``
is set up here too, with Anthropic's publisher and wire (``_vertex_anthropic``).

The token is ``GOOGLE_OAUTH_ACCESS_TOKEN`` as it is (Terraform's variable:
``$(gcloud auth print-access-token)``, no library needed), else Application
Default Credentials through google-auth (the ``vertex`` extra):
``GOOGLE_APPLICATION_CREDENTIALS``'s file, gcloud's login, or the metadata
server; google-auth refreshes it before it expires. `GoogleAuth` puts it on
each attempt's request as httpx sends it (Bedrock's SigV4 is added the same
way); loading and refreshing block, so they run on a worker thread. Every token
is registered as a secret the moment it is had: no error, log or event shows it.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import AsyncGenerator, Generator, Mapping
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.to_thread
import httpx

from cadenza._redact import redact, register_secret

from ._errors import LLMConfigError, LLMConnectionError
from ._gemini import WIRE as GEMINI_WIRE
from ._specs import VERTEX_CREDENTIALS, VERTEX_LOCATION, VERTEX_PROJECT
from ._wire import Connection

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

__all__ = ["WIRE", "GoogleAuth", "connect_vertex", "vertex_connection"]

DEFAULT_LOCATION: Final = "us-central1"
SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"
_TOKEN_VARIABLE, _CREDENTIALS_VARIABLE = VERTEX_CREDENTIALS
_URL_VARIABLE: Final = "GOOGLE_VERTEX_BASE_URL"  # the host only, as the SDKs' api_endpoint
# A project or a region goes into the host name and the path: nothing that could
# move either (``/``, ``@``, ``#``, ``..``) gets through. Domain-scoped projects
# (``example.com:my-project``) have a dot and a colon.
_IDENTIFIER: Final = re.compile(r"[a-z0-9][a-z0-9.:_-]{0,127}")


class GoogleAuth(httpx.Auth):
    """Puts a valid OAuth token on each attempt's request (refreshed first if it expired).

    One serves every call of a run's provider (the registry keeps its
    connection), so Application Default Credentials are loaded once.

    Args:
        environ: Where ``GOOGLE_OAUTH_ACCESS_TOKEN`` and
            ``GOOGLE_APPLICATION_CREDENTIALS`` are read.
    """

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._fixed = environ.get(_TOKEN_VARIABLE) or None
        self._file = environ.get(_CREDENTIALS_VARIABLE) or None
        self._credentials: Credentials | None = None
        self._lock = anyio.Lock()

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, Any, None]:
        raise RuntimeError("Vertex AI's token is fetched off the event loop: async clients only")

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        """Authorises ``request`` as a bearer of the token.

        Raises:
            LLMConfigError: No credentials were found, google-auth is not
                installed, or the token server refused them.
            LLMConnectionError: The token server could not be reached.
        """
        request.headers["Authorization"] = f"Bearer {await self._token()}"
        yield request

    async def _token(self) -> str:
        if self._fixed is not None:
            return self._fixed
        async with self._lock:
            if self._credentials is None:
                self._credentials = await _blocking(_application_default, self._file)
            if not self._credentials.valid:
                await _blocking(_refresh, self._credentials)
            token = str(self._credentials.token)
        register_secret(token)
        return token

    def __repr__(self) -> str:
        return "GoogleAuth(***)"


def _application_default(file: str | None) -> Credentials:
    """Application Default Credentials (or the file's), for the cloud-platform scope."""
    import google.auth

    loaded: tuple[Credentials, str | None]  # with the project they name, not read here
    if file is None:
        loaded = google.auth.default(scopes=[SCOPE])
        return loaded[0]
    # The variable is ADC's own, read from the run's environment rather than the
    # process's: loaded as google.auth.default loads it, with its warning about
    # files from untrusted sources silenced as it silences it (the user named it).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        loaded = google.auth.load_credentials_from_file(  # type: ignore[no-untyped-call]
            file, scopes=[SCOPE]
        )
    return loaded[0]


def _refresh(credentials: Credentials) -> None:
    from google.auth.transport.requests import Request

    credentials.refresh(Request())  # type: ignore[no-untyped-call]


async def _blocking(function: Any, argument: Any) -> Any:
    """Runs google-auth's blocking ``function(argument)`` on a thread, its errors ours.

    A cancelled run does not wait for it (google-auth bounds its own requests).
    """
    from google.auth import exceptions  # present: connect_vertex checked

    try:
        return await anyio.to_thread.run_sync(function, argument, abandon_on_cancel=True)
    except exceptions.TransportError as exc:
        raise LLMConnectionError(
            redact(f"Vertex AI: cannot reach the token server: {exc}"), attempts=0
        ) from None
    except exceptions.GoogleAuthError as exc:
        raise LLMConfigError(redact(f"Vertex AI: no usable Google credentials: {exc}")) from None


def vertex_connection(
    environ: Mapping[str, str], publisher: str, claude: tuple[str, ...] = ()
) -> Connection:
    """Where a Vertex AI publisher's models are and the token that reaches them.

    Args:
        environ: The run's variables.
        publisher: ``google`` or ``anthropic``, in the path.
        claude: The Anthropic SDK's project and region variables, read after
            Google's for Claude (a setup made for that SDK works as it is).

    Raises:
        LLMConfigError: A project or region that is not a Google Cloud name
            (it could move the URL), or google-auth missing where it is needed.
    """
    project = _first(environ, VERTEX_PROJECT + claude[:1])
    location = _first(environ, VERTEX_LOCATION + claude[1:]) or DEFAULT_LOCATION
    names = {"project": VERTEX_PROJECT + claude[:1], "location": VERTEX_LOCATION + claude[1:]}
    for what, value in (("project", project), ("location", location)):
        if value is not None and (not _IDENTIFIER.fullmatch(value) or ".." in value):
            variable = next(name for name in names[what] if environ.get(name) == value)
            raise LLMConfigError(
                f"{variable} goes in Vertex AI's URL and must be a Google Cloud {what} name, "
                f"got {value!r}"
            )
    if environ.get(_URL_VARIABLE):
        host = environ[_URL_VARIABLE].rstrip("/")
    elif location == "global":
        host = "https://aiplatform.googleapis.com"
    else:
        host = f"https://{location}-aiplatform.googleapis.com"
    if project is None:
        first, *others = names["project"]
        return Connection(host, _URL_VARIABLE, None, f"{first} (or {', '.join(others)})")
    root = f"{host}/v1/projects/{project}/locations/{location}/publishers/{publisher}"
    if not environ.get(_TOKEN_VARIABLE):
        try:
            import google.auth  # noqa: F401  (the extra, needed for any other credentials)
        except ImportError:
            raise LLMConfigError(
                "Vertex AI needs Google credentials: pip install 'cadenza[vertex]' for "
                f"Application Default Credentials, or set {_TOKEN_VARIABLE}"
            ) from None
    return Connection(root, _URL_VARIABLE, GoogleAuth(environ))


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((value for name in names if (value := environ.get(name))), None)


def connect_vertex(environ: Mapping[str, str]) -> Connection:
    """The ``vertex`` connection: Gemini under ``publishers/google``."""
    return vertex_connection(environ, "google")


WIRE: Final = dataclasses.replace(
    GEMINI_WIRE,
    name="vertex",
    path="/models/{model}:generateContent",
    stream_path="/models/{model}:streamGenerateContent?alt=sse",
    auth_headers=lambda api_key: {},  # an OAuth token, not a key (GoogleAuth)
    connect=connect_vertex,
)
"""Gemini on Vertex AI: the Gemini wire under a project's ``publishers/google``."""
