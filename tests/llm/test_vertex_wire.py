"""Vertex AI: Gemini (``vertex``) and Claude (``vertex-anthropic``) in a Google Cloud project.

The model servers are ``ScriptedLLMServer``s speaking Vertex AI's paths on
127.0.0.1. The credentials are google-auth's own: a service-account key file
whose ``token_uri`` is a local token server (as Application Default
Credentials read it from ``GOOGLE_APPLICATION_CREDENTIALS``), or an access
token given as ``GOOGLE_OAUTH_ACCESS_TOKEN``.
"""

from __future__ import annotations

import json
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from cadenza._redact import MASK
from cadenza.llm import (
    Completion,
    LLMConfigError,
    LLMHTTPError,
    LLMRequest,
    Message,
    ProviderRegistry,
)
from cadenza.testing import ScriptedTransport, ServerReply, ServerRule, ServerToolCall
from cadenza.testing._local_http import LocalHTTPServer, RequestHandler
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import cadenza
from tests.conftest import WriteFlow

TOKEN = "ya29.test-access-token-0123456789"
HELLO = LLMRequest("gemini-test", (Message("user", "hi"),))
VERTEX_AT = "/v1/projects/{project}/locations/{location}/publishers/{publisher}/models/{model}"


@dataclass
class TokenServer:
    """Google's OAuth token endpoint, as a service account's JWT grant meets it."""

    status: int = 200
    grants: list[dict[str, list[str]]] = field(default_factory=list)
    url: str = ""

    def on_post(self, handler: RequestHandler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        self.grants.append(urllib.parse.parse_qs(raw.decode()))
        body: dict[str, str | int]
        if self.status != 200:
            body = {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        else:
            body = {"access_token": TOKEN, "expires_in": 3600, "token_type": "Bearer"}
        handler.send_body(self.status, json.dumps(body).encode())


@pytest.fixture
def token_server() -> Iterator[TokenServer]:
    server = TokenServer()
    httpd = LocalHTTPServer(("127.0.0.1", 0), server.on_post, threading.Event())
    httpd.start()
    host, port = httpd.bound
    server.url = f"http://{host}:{port}/token"
    try:
        yield server
    finally:
        httpd.stop()


def key_file(tmp_path: Path, token_uri: str, project: str = "sa-project") -> Path:
    """A service-account key file, as ``gcloud iam service-accounts keys create`` writes."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    path = tmp_path / "service-account.json"
    info = {
        "type": "service_account",
        "project_id": project,
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": f"cadenza@{project}.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    }
    path.write_text(json.dumps(info))
    return path


def adc_environ(server_environ: dict[str, str], credentials: Path) -> dict[str, str]:
    """The server's Vertex variables with ADC's key file instead of a token."""
    environ = {
        k: v for k, v in server_environ.items() if k.startswith(("GOOGLE_VERTEX", "GOOGLE_CLOUD"))
    }
    environ["GOOGLE_APPLICATION_CREDENTIALS"] = str(credentials)
    return environ


async def calls(
    environ: dict[str, str], provider: str, *requests: tuple[LLMRequest, bool]
) -> list[Completion]:
    """Each request on one registry (one run), streamed where its flag says."""
    done = []
    async with ProviderRegistry(environ=environ) as providers:
        client = providers.client(provider)
        for request, stream in requests:
            on_delta = (lambda text, attempt: None) if stream else None
            done.append(await client.complete(request, on_delta=on_delta))
    return done


async def test_gemini_on_vertex_with_application_default_credentials(
    llm_server: StartLLMServer, token_server: TokenServer, tmp_path: Path
) -> None:
    """The key file's token: fetched once, sent as a bearer, whole and streamed."""
    reply = ServerReply("Hello.", tool_calls=[ServerToolCall("lookup", {"w": 1})], usage=(9, 2))
    server = llm_server([ServerRule([reply])], wire="gemini")
    environ = adc_environ(server.environ(), key_file(tmp_path, token_server.url))

    whole, streamed = await calls(environ, "vertex", (HELLO, False), (HELLO, True))

    assert whole.content == streamed.content == "Hello."
    assert whole.usage == streamed.usage
    assert [c.name for c in streamed.tool_calls] == ["lookup"]
    (grant,) = token_server.grants  # one token for the run's calls
    assert grant["grant_type"] == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
    where = VERTEX_AT.format(
        project="test-project", location="us-central1", publisher="google", model="gemini-test"
    )
    first, second = server.requests
    assert first.path == f"{where}:generateContent"
    assert second.path == f"{where}:streamGenerateContent?alt=sse"
    for request in (first, second):
        assert request.headers["authorization"] == f"Bearer {TOKEN}"
        assert "x-goog-api-key" not in request.headers


async def test_an_error_that_echoes_the_token_shows_it_masked(
    llm_server: StartLLMServer, token_server: TokenServer, tmp_path: Path
) -> None:
    """A token fetched at run time is a secret from the moment it is had."""
    echo = {"error": {"code": 403, "message": f"token {TOKEN} lacks aiplatform.endpoints.predict"}}
    server = llm_server(
        [ServerRule([ServerReply(status=403, body=json.dumps(echo))])], wire="vertex-anthropic"
    )
    environ = adc_environ(server.environ(), key_file(tmp_path, token_server.url))
    with pytest.raises(LLMHTTPError) as caught:
        await calls(environ, "vertex-anthropic", (HELLO, False))
    message = str(caught.value)
    assert "vertex-anthropic model gemini-test: HTTP 403" in message
    assert "lacks aiplatform.endpoints.predict" in message
    assert TOKEN not in message
    assert MASK in message


async def test_claude_on_vertex_by_raw_predict(llm_server: StartLLMServer) -> None:
    """The Messages API body less its model, with Vertex's version, to :rawPredict."""
    server = llm_server(
        [ServerRule([ServerReply("Bonjour.", usage=(7, 3))])], wire="vertex-anthropic"
    )
    environ = {
        "GOOGLE_VERTEX_BASE_URL": server.url,
        # Claude on Vertex is often set up for Anthropic's SDK: its variables serve.
        "ANTHROPIC_VERTEX_PROJECT_ID": "claude-project",
        "CLOUD_ML_REGION": "us-east5",
        "GOOGLE_OAUTH_ACCESS_TOKEN": TOKEN,
    }
    request = LLMRequest("claude-sonnet-4@20250514", (Message("user", "hi"),), max_tokens=50)
    whole, streamed = await calls(environ, "vertex-anthropic", (request, False), (request, True))
    assert whole.content == streamed.content == "Bonjour."
    assert whole.usage == streamed.usage
    where = VERTEX_AT.format(
        project="claude-project",
        location="us-east5",
        publisher="anthropic",
        model="claude-sonnet-4@20250514",
    )
    first, second = server.requests
    assert first.path == f"{where}:rawPredict"
    assert second.path == f"{where}:streamRawPredict"
    assert first.body == {
        "anthropic_version": "vertex-2023-10-16",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    assert second.body["stream"] is True
    assert first.headers["authorization"] == f"Bearer {TOKEN}"
    assert "x-api-key" not in first.headers


@pytest.mark.parametrize(
    ("location", "url"),
    [
        (
            "europe-west4",
            "https://europe-west4-aiplatform.googleapis.com/v1/projects/p-1/locations/"
            "europe-west4/publishers/google/models/gemini-test:generateContent",
        ),
        (
            "global",
            "https://aiplatform.googleapis.com/v1/projects/p-1/locations/global/"
            "publishers/google/models/gemini-test:generateContent",
        ),
    ],
)
async def test_the_region_picks_the_host(location: str, url: str) -> None:
    http = ScriptedTransport({"candidates": [{"content": {"parts": [{"text": "ok"}]}}]})
    environ = {
        "GOOGLE_CLOUD_PROJECT": "p-1",
        "GOOGLE_CLOUD_LOCATION": location,
        "GOOGLE_OAUTH_ACCESS_TOKEN": TOKEN,
    }
    async with ProviderRegistry(environ=environ, transport=http) as providers:
        await providers.client("vertex").complete(HELLO)
    assert str(http.requests[0].url) == url


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("GOOGLE_CLOUD_LOCATION", "attacker.example/x#"),  # would make the host attacker.example
        ("GOOGLE_CLOUD_LOCATION", "us-central1@attacker.example"),
        ("GOOGLE_CLOUD_PROJECT", "p/../../../v1/projects/other"),
        ("GOOGLE_CLOUD_PROJECT", "p..q"),
        ("GOOGLE_CLOUD_PROJECT", "P?alt=x"),
    ],
)
async def test_a_project_or_region_that_would_move_the_url_is_refused(
    variable: str, value: str
) -> None:
    """Refused before the run starts: the token is not sent anywhere a name could redirect it."""
    http = ScriptedTransport({})
    environ = {
        "GOOGLE_CLOUD_PROJECT": "p-1",
        "GOOGLE_OAUTH_ACCESS_TOKEN": TOKEN,
        variable: value,
    }
    what = "location" if "LOCATION" in variable else "project"
    expected = (
        f"{variable} goes in Vertex AI's URL and must be a Google Cloud {what} name, got {value!r}"
    )
    async with ProviderRegistry(environ=environ, transport=http) as providers:
        with pytest.raises(LLMConfigError) as caught:
            providers.check("vertex:gemini-test")
        assert str(caught.value) == expected
        with pytest.raises(LLMConfigError) as caught:
            await providers.client("vertex").complete(HELLO)
        assert str(caught.value) == expected
    assert http.requests == []


@pytest.mark.parametrize(
    ("provider", "variables"),
    [
        ("vertex", "GOOGLE_VERTEX_PROJECT (or GOOGLE_CLOUD_PROJECT, GCLOUD_PROJECT)"),
        (
            "vertex-anthropic",
            "GOOGLE_VERTEX_PROJECT (or GOOGLE_CLOUD_PROJECT, GCLOUD_PROJECT, "
            "ANTHROPIC_VERTEX_PROJECT_ID)",
        ),
    ],
)
async def test_no_project_is_refused_before_the_run_naming_the_variables(
    provider: str, variables: str
) -> None:
    http = ScriptedTransport({})
    environ = {"GOOGLE_OAUTH_ACCESS_TOKEN": TOKEN}
    expected = f"{variables} is not set (needed by model {provider}:gemini-test)"
    async with ProviderRegistry(environ=environ, transport=http) as providers:
        with pytest.raises(LLMConfigError) as caught:
            providers.check(f"{provider}/gemini-test")
        assert str(caught.value) == expected
        with pytest.raises(LLMConfigError) as caught:
            await providers.client(provider).complete(HELLO)
        assert str(caught.value) == expected
    assert http.requests == []


async def test_credentials_the_token_server_refuses(
    token_server: TokenServer, tmp_path: Path
) -> None:
    token_server.status = 400
    http = ScriptedTransport({})
    environ = {
        "GOOGLE_CLOUD_PROJECT": "p-1",
        "GOOGLE_APPLICATION_CREDENTIALS": str(key_file(tmp_path, token_server.url)),
    }
    async with ProviderRegistry(environ=environ, transport=http) as providers:
        with pytest.raises(LLMConfigError) as caught:
            await providers.client("vertex").complete(HELLO)
    assert str(caught.value).startswith("Vertex AI: no usable Google credentials: ")
    assert "invalid_grant" in str(caught.value)
    assert http.requests == []


async def test_without_google_auth_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "google.auth", None)  # as if the extra were not installed
    http = ScriptedTransport({})
    async with ProviderRegistry(environ={"GCLOUD_PROJECT": "p-1"}, transport=http) as providers:
        with pytest.raises(LLMConfigError) as caught:
            providers.check("vertex/gemini-test")  # refused before the run starts
    assert str(caught.value) == (
        "Vertex AI needs Google credentials: pip install 'cadenza[vertex]' for Application "
        "Default Credentials, or set GOOGLE_OAUTH_ACCESS_TOKEN"
    )
    assert http.requests == []


FLOW = """
name: vertex-run
agents:
  writer: {model: "vertex/gemini-2.5-flash", prompt: "Be brief."}
  editor: {model: "vertex/gemini-2.5-flash", prompt: "Be briefer."}
steps:
  - id: write
    agent: writer
    instructions: "Say hello."
  - id: edit
    agent: editor
    dependsOn: [write]
    instructions: "Shorten: {{ steps.write.content }}"
"""


def test_cadenza_run_finds_application_default_credentials(
    llm_server: StartLLMServer, token_server: TokenServer, write_flow: WriteFlow, tmp_path: Path
) -> None:
    """A user's setup: GOOGLE_APPLICATION_CREDENTIALS in the environment of ``cadenza run``.

    Two agents on ``vertex``, one token: the run's agents share its credentials.
    """
    replies = [
        ServerReply("Hi from Vertex.", usage=(5, 2)),
        ServerReply("Hello from Vertex.", usage=(6, 2)),
    ]
    server = llm_server([ServerRule(replies)], wire="gemini")
    path = write_flow(FLOW)
    environ = adc_environ(server.environ(), key_file(tmp_path, token_server.url))
    proc = cadenza("run", str(path), "--json", cwd=tmp_path, env={**_base_env(), **environ})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["output"] == "Hello from Vertex."
    assert result["usage"]["promptTokens"] == 11
    assert result["usage"]["completionTokens"] == 4  # both calls
    assert len(server.requests) == 2
    for request in server.requests:
        assert request.path.startswith("/v1/projects/test-project/locations/us-central1/")
        assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert len(token_server.grants) == 1
    assert TOKEN not in proc.stdout + proc.stderr


def _base_env() -> dict[str, str]:
    """The test process's environment without any Google settings of the machine's."""
    import os

    return {k: v for k, v in os.environ.items() if "GOOGLE" not in k and "GCLOUD" not in k}
