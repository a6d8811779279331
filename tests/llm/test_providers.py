"""Every provider prefix reaches its wire, at its URL, with its key (issue 31, item 1).

Each case points a provider's base-URL variable at a real scripted server on
127.0.0.1 and checks what arrived there: the path, the credential header and
the model. The default URLs (which no test can reach) are checked through a
recording transport, and the variables a URL is built from (an account id, an
endpoint id, a region, a resource) are refused by name when missing or bad.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from cadenza.llm import (
    PROVIDERS,
    LLMConfigError,
    LLMHTTPError,
    LLMRequest,
    LLMUsage,
    Message,
    ProviderRegistry,
    ToolSpec,
    parse_model,
)
from cadenza.testing import ScriptedTransport, ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import run_flow
from tests.conftest import WriteFlow
from tests.llm._providers import CASES, KEY, Case, environ_for

HI = (Message("user", "hi"),)

# zenflow's prefixes on native wires of their own, tested by their own files:
# bedrock in test_bedrock_wire.py, google in test_gemini_wire.py, vertex and
# vertex-anthropic in test_vertex_wire.py (their URLs and credentials are not a
# base URL and a key header, which is what a case here checks).
NATIVE = {"bedrock", "google", "vertex", "vertex-anthropic"}


def case_id(case: Case) -> str:
    return f"{case.provider}-{case.key_variable or 'no-key'}"


def test_every_provider_has_a_case() -> None:
    """A provider added to the table without a test here fails this test."""
    assert {case.provider for case in CASES} == set(PROVIDERS) - {"scripted"} - NATIVE


@pytest.mark.parametrize("case", CASES, ids=case_id)
async def test_a_request_reaches_the_wire_and_url_with_the_key(
    case: Case, llm_server: StartLLMServer
) -> None:
    """provider/model and provider:model alike: the server sees its path, the key, the model."""
    server = llm_server([ServerRule([ServerReply("pong", usage=(7, 2))])], wire=case.wire)  # type: ignore[arg-type]
    async with ProviderRegistry(environ=environ_for(case, server.url)) as providers:
        assert providers.check(f"{case.provider}/m-1") == (case.provider, "m-1")
        provider, model = providers.check(f"{case.provider}:m-1")
        completion = await providers.client(provider).complete(LLMRequest(model, HI))
    assert completion.content == "pong"
    assert completion.usage == LLMUsage(7, 2)
    (request,) = server.requests
    assert request.path == case.path
    assert request.model == "m-1"
    credentials = {"authorization", "api-key", "x-api-key"} & set(request.headers)
    if case.key_variable is None:
        assert credentials == set()
    else:
        assert case.header is not None
        assert credentials == {case.header}
        assert request.headers[case.header] == case.scheme + KEY


@pytest.mark.parametrize(
    ("provider", "environ", "url"),
    [
        ("cerebras", {}, "https://api.cerebras.ai/v1/chat/completions"),
        ("cloudflare", {"CLOUDFLARE_ACCOUNT_ID": "0f1e2d"},
         "https://api.cloudflare.com/client/v4/accounts/0f1e2d/ai/v1/chat/completions"),
        ("cohere", {}, "https://api.cohere.ai/compatibility/v1/chat/completions"),
        ("compat", {}, "http://localhost:8080/v1/chat/completions"),
        ("deepinfra", {}, "https://api.deepinfra.com/v1/openai/chat/completions"),
        ("deepseek", {}, "https://api.deepseek.com/chat/completions"),
        ("fireworks", {}, "https://api.fireworks.ai/inference/v1/chat/completions"),
        ("fptcloud", {}, "https://mkp-api.fptcloud.com/v1/chat/completions"),
        ("fptcloud", {"FPT_REGION": "jp"}, "https://mkp-api.fptcloud.jp/v1/chat/completions"),
        ("groq", {}, "https://api.groq.com/openai/v1/chat/completions"),
        ("minimax", {}, "https://api.minimax.io/anthropic/v1/messages"),
        ("mistral", {}, "https://api.mistral.ai/v1/chat/completions"),
        ("nvidia", {}, "https://integrate.api.nvidia.com/v1/chat/completions"),
        ("openrouter", {}, "https://openrouter.ai/api/v1/chat/completions"),
        ("perplexity", {}, "https://api.perplexity.ai/chat/completions"),
        ("runpod", {"RUNPOD_ENDPOINT_ID": "ep42"},
         "https://api.runpod.ai/v2/ep42/openai/v1/chat/completions"),
        ("together", {}, "https://api.together.xyz/v1/chat/completions"),
        ("vllm", {}, "http://localhost:8000/v1/chat/completions"),
        ("xai", {}, "https://api.x.ai/v1/chat/completions"),
        ("azure", {"AZURE_RESOURCE_NAME": "acme"},
         "https://acme.openai.azure.com/openai/v1/chat/completions"),
        ("azure-deployment",
         {"AZURE_RESOURCE_NAME": "acme", "AZURE_OPENAI_API_VERSION": "2024-10-21"},
         "https://acme.openai.azure.com/openai/deployments/m-1/chat/completions"
         "?api-version=2024-10-21"),
    ],
)  # fmt: skip
async def test_default_urls_are_the_providers_own(
    provider: str, environ: dict[str, str], url: str
) -> None:
    """Without a base-URL variable a request goes to the provider's documented endpoint."""
    keys = {case.key_variable: KEY for case in CASES if case.key_variable}
    http = ScriptedTransport(httpx.Response(500, json={"error": {"message": "down"}}))
    async with ProviderRegistry(environ={**keys, **environ}, transport=http) as providers:
        providers.check(f"{provider}:m-1")
        with pytest.raises(LLMHTTPError, match="HTTP 500"):
            await providers.client(provider).complete(LLMRequest("m-1", HI, max_retries=0))
    assert str(http.requests[0].url) == url


@pytest.mark.parametrize(
    ("spec", "environ", "message"),
    [
        ("cloudflare:@cf/meta/llama-3.1-8b-instruct", {"CLOUDFLARE_API_TOKEN": KEY},
         "CLOUDFLARE_ACCOUNT_ID (or CLOUDFLARE_BASE_URL) is not set "
         "(needed by model cloudflare:@cf/meta/llama-3.1-8b-instruct)"),
        ("runpod/llama", {"RUNPOD_API_KEY": KEY},
         "RUNPOD_ENDPOINT_ID (or RUNPOD_BASE_URL) is not set (needed by model runpod:llama)"),
        ("azure/gpt-4o", {"AZURE_OPENAI_API_KEY": KEY},
         "AZURE_RESOURCE_NAME (or AZURE_OPENAI_ENDPOINT) is not set "
         "(needed by model azure:gpt-4o)"),
        ("together:llama", {},
         "TOGETHER_AI_API_KEY (or TOGETHER_API_KEY) is not set (needed by model together:llama)"),
        ("azure-deployment:gpt-4o", {"AZURE_RESOURCE_NAME": "acme"},
         "AZURE_OPENAI_API_KEY (or AZURE_API_KEY) is not set "
         "(needed by model azure-deployment:gpt-4o)"),
        ("cloudflare:m", {"CLOUDFLARE_ACCOUNT_ID": "abc"},
         "CLOUDFLARE_API_TOKEN is not set (needed by model cloudflare:m)"),
    ],
)  # fmt: skip
async def test_a_missing_variable_is_named_before_and_at_the_call(
    spec: str, environ: dict[str, str], message: str
) -> None:
    """check() refuses the spec, and a call made anyway fails the same way, sending nothing."""
    http = ScriptedTransport({"choices": []})
    async with ProviderRegistry(environ=environ, transport=http) as providers:
        with pytest.raises(LLMConfigError) as checked:
            providers.check(spec)
        provider, model = parse_model(spec)
        with pytest.raises(LLMConfigError) as called:
            await providers.client(provider).complete(LLMRequest(model, HI))
    assert str(checked.value) == str(called.value) == message
    assert http.requests == []


@pytest.mark.parametrize(
    ("provider", "environ", "words"),
    [
        ("fptcloud", {"FPT_API_KEY": KEY, "FPT_REGION": "eu"},
         "FPT_REGION must be one of global, jp, got 'eu'"),
        ("cloudflare", {"CLOUDFLARE_API_TOKEN": KEY, "CLOUDFLARE_ACCOUNT_ID": "evil.example/x?"},
         "CLOUDFLARE_ACCOUNT_ID goes in cloudflare's URL and must be letters, digits"),
        ("azure", {"AZURE_OPENAI_API_KEY": KEY, "AZURE_RESOURCE_NAME": "evil.example#"},
         "AZURE_RESOURCE_NAME goes in azure's URL"),
        ("runpod", {"RUNPOD_API_KEY": KEY, "RUNPOD_ENDPOINT_ID": ".."},
         "RUNPOD_ENDPOINT_ID goes in runpod's URL"),
    ],
)  # fmt: skip
def test_a_value_that_would_bend_the_url_is_refused(
    provider: str, environ: dict[str, str], words: str
) -> None:
    """A variable can fill its place in the URL only: no '/', '?', '#' to move the host or path."""
    with pytest.raises(LLMConfigError, match=words):
        ProviderRegistry(environ=environ).client(provider)


def test_keyless_local_servers_pass_the_check() -> None:
    """compat and vllm serve without a key when started without one; ollama never takes one."""
    providers = ProviderRegistry(environ={})
    for spec in ("compat/qwen2.5", "vllm:meta-llama/Llama-3.1-8B", "ollama:llama3.1"):
        providers.check(spec)


def test_every_prefix_resolves_by_itself() -> None:
    """groq/, google/, bedrock/...: each is a provider of its own; grok-* is placed on xai."""
    assert parse_model("groq/llama-3.3-70b") == ("groq", "llama-3.3-70b")
    assert parse_model("grok-4") == ("xai", "grok-4")  # zenflow places grok-* on xai
    assert parse_model("gemini-2.5-flash") == ("google", "gemini-2.5-flash")
    for prefix in NATIVE:
        assert parse_model(f"{prefix}/some-model") == (prefix, "some-model")


@pytest.mark.parametrize(
    ("spec", "close"), [("azur:gpt-4o", "azure"), ("grok/llama", "groq"), ("mistrall:m", "mistral")]
)
def test_a_misspelt_provider_gets_a_suggestion(spec: str, close: str) -> None:
    with pytest.raises(LLMConfigError, match=f"did you mean {close!r}"):
        parse_model(spec)


LOOKUP = ToolSpec("lookup", "Look a word up.", {"type": "object"})


@pytest.mark.parametrize("provider", ["azure", "azure-deployment"])
async def test_azure_streams_tool_calls_and_usage_as_openai_does(
    provider: str, llm_server: StartLLMServer
) -> None:
    """Azure is the OpenAI wire: a streamed reply with a tool call in fragments, and its usage."""
    reply = ServerReply(
        "looking", [ServerToolCall("lookup", {"word": "cadenza"})], (30, 4), chunk=2
    )
    server = llm_server([ServerRule([reply])])
    environ = {"AZURE_OPENAI_ENDPOINT": server.url, "AZURE_OPENAI_API_KEY": KEY}
    deltas: list[str] = []
    async with ProviderRegistry(environ=environ) as providers:
        completion = await providers.client(provider).complete(
            LLMRequest("gpt-4o", HI, tools=(LOOKUP,)),
            on_delta=lambda text, attempt: deltas.append(text),
        )
    assert "".join(deltas) == "looking"  # pieces read at once are handed out together
    assert [(c.name, c.arguments) for c in completion.tool_calls] == [
        ("lookup", '{"word": "cadenza"}')
    ]
    assert completion.usage == LLMUsage(30, 4)
    assert server.requests[0].body["stream"] is True


STRUCTURED = """
name: structured
agents:
  judge:
    model: azure-deployment/gpt-4o-prod
    resultSchema:
      type: object
      required: [verdict]
      properties: {verdict: {type: string}}
steps:
  - {id: judge, agent: judge, instructions: "Judge."}
output: steps.judge.result
"""


async def test_a_workflow_on_an_azure_deployment_gives_its_structured_result(
    write_flow: WriteFlow, llm_server: StartLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run reads zenflow's Azure variables from the environment, like a user's shell."""
    submit = ServerToolCall("submit_result", {"verdict": "fine"})
    server = llm_server([ServerRule([ServerReply(tool_calls=[submit])])])
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", server.url)
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    result = await run_flow(write_flow(STRUCTURED))
    assert result.status == "completed", result.error
    assert result.output == {"verdict": "fine"}
    assert server.requests[0].path.startswith("/openai/deployments/gpt-4o-prod/chat/completions?")
    assert server.requests[0].headers["api-key"] == KEY


def test_the_table_is_documented() -> None:
    """docs/providers.md has a row for every provider the table knows, and the native four."""
    page = (Path(__file__).parents[2] / "docs" / "providers.md").read_text()
    for provider in {*PROVIDERS, *NATIVE} - {"scripted"}:
        assert f"| `{provider}` |" in page, provider
