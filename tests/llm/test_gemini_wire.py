"""The google provider: the Gemini API's requests and replies, over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cadenza._redact import MASK
from cadenza.llm import (
    Completion,
    LLMConfigError,
    LLMHTTPError,
    LLMRequest,
    LLMResponseError,
    LLMUsage,
    Message,
    ModelToolCall,
    ProviderRegistry,
    Reasoning,
    RetryPolicy,
    ToolSpec,
    parse_model,
)
from cadenza.testing import ScriptedTransport, ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer

KEY = "AIzaSyTEST-gemini-key-0123456789"
ENV = {"GEMINI_API_KEY": KEY, "GOOGLE_GENERATIVE_AI_BASE_URL": "https://gemini.example"}
LOOKUP = ToolSpec(
    "lookup",
    "Look a word up.",
    # additionalProperties is what Gemini's OpenAPI ``parameters`` refuses: sent as JSON Schema.
    {"type": "object", "properties": {"word": {"type": "string"}}, "additionalProperties": False},
)
HELLO = LLMRequest(model="gemini-test", messages=(Message("user", "hi"),))


def gemini_reply(*parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A generateContent response body."""
    return {
        "candidates": [
            {"content": {"role": "model", "parts": list(parts)}, "finishReason": "STOP"}
        ],
        "usageMetadata": {"promptTokenCount": 20, "candidatesTokenCount": 4},
        "modelVersion": "gemini-test-001",
    } | fields


async def complete(answer: dict[str, Any], request: LLMRequest) -> tuple[Any, ScriptedTransport]:
    http = ScriptedTransport(answer)
    async with ProviderRegistry(environ=ENV, transport=http) as providers:
        completion = await providers.client("google").complete(request)
    return completion, http


async def test_request_shape() -> None:
    """POST {base}/v1beta/models/{model}:generateContent, the key in x-goog-api-key, not the URL."""
    request = LLMRequest(
        model="gemini-test",
        messages=(Message("system", "Be brief."), Message("user", "hi")),
        tools=(LOOKUP,),
        temperature=0.5,
        top_p=0.9,
        max_tokens=64,
    )
    _, http = await complete(gemini_reply({"text": "hello"}), request)
    sent = http.requests[0]
    assert str(sent.url) == "https://gemini.example/v1beta/models/gemini-test:generateContent"
    assert sent.headers["x-goog-api-key"] == KEY
    assert "authorization" not in sent.headers
    assert KEY not in str(sent.url)
    assert http.json() == {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "lookup",
                        "description": "Look a word up.",
                        "parametersJsonSchema": LOOKUP.parameters,
                    }
                ]
            }
        ],
        "generationConfig": {"temperature": 0.5, "topP": 0.9, "maxOutputTokens": 64},
    }


async def test_a_model_name_cannot_leave_its_path_segment() -> None:
    """A model named like a path or a query is quoted whole: the endpoint stays the model's."""
    request = LLMRequest(model="../../v1/files?key=x#", messages=(Message("user", "hi"),))
    _, http = await complete(gemini_reply({"text": "ok"}), request)
    assert str(http.requests[0].url) == (
        "https://gemini.example/v1beta/models/..%2F..%2Fv1%2Ffiles%3Fkey%3Dx%23:generateContent"
    )


async def test_tool_turns_become_parts() -> None:
    """Calls become functionCall parts with their signature; results functionResponse parts."""
    calls = (
        # A call Gemini gave an id and signed, and one it gave neither (Cadenza's own id).
        ModelToolCall("fc-1#ts=c2lnbmVk", "lookup", '{"word": "cadenza"}'),
        ModelToolCall("gemini-call-1", "lookup", "not json"),
    )
    request = LLMRequest(
        model="gemini-test",
        messages=(
            Message("user", "Define two words."),
            Message("assistant", "Looking up.", tool_calls=calls),
            Message("tool", '{"sense": "a solo passage"}', tool_call_id=calls[0].id),
            Message("tool", "error: bad arguments", tool_call_id=calls[1].id, name="lookup"),
            Message("user", "Thanks."),
        ),
    )
    _, http = await complete(gemini_reply({"text": "ok"}), request)
    assert http.json()["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {"text": "Looking up."},
                {
                    "functionCall": {"name": "lookup", "args": {"word": "cadenza"}, "id": "fc-1"},
                    "thoughtSignature": "c2lnbmVk",
                },
                {"functionCall": {"name": "lookup", "args": {}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "name": "lookup",
                        "response": {"sense": "a solo passage"},
                        "id": "fc-1",
                    }
                },
                {
                    "functionResponse": {
                        "name": "lookup",
                        "response": {"output": "error: bad arguments"},
                    }
                },
                {"text": "Thanks."},
            ],
        },
    ]


async def test_reply_maps_to_completion() -> None:
    """Text parts join (thoughts apart, as the reasoning), calls keep their signature,
    thinking is output (and counted as reasoning tokens)."""
    reply = gemini_reply(
        {"text": "thinking it over", "thought": True},
        {"text": "Let me "},
        {"text": "look."},
        {"functionCall": {"name": "lookup", "args": {"word": "fugue"}}, "thoughtSignature": "U0lH"},
        {"functionCall": {"name": "lookup", "args": {}, "id": "fc-7"}},
        usageMetadata={
            "promptTokenCount": 20,
            "candidatesTokenCount": 4,
            "thoughtsTokenCount": 30,
            "toolUsePromptTokenCount": 2,
        },
    )
    reply["candidates"][0]["finishReason"] = "STOP"
    completion, _ = await complete(reply, HELLO)
    assert completion.content == "Let me look."
    assert completion.tool_calls == (
        ModelToolCall("gemini-call-0#ts=U0lH", "lookup", '{"word":"fugue"}'),
        ModelToolCall("fc-7", "lookup", "{}"),
    )
    assert completion.usage == LLMUsage(prompt_tokens=22, completion_tokens=34, reasoning_tokens=30)
    assert completion.reasoning == (Reasoning("thinking it over"),)
    assert completion.model == "gemini-test-001"
    assert completion.finish_reason == "STOP"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ({"candidates": {}}, "Expected `array`, got `object` - at `$.candidates`"),
        ({"promptFeedback": {"blockReason": "SAFETY"}}, "the prompt was blocked: SAFETY"),
        (gemini_reply({"functionCall": {"args": {}}}), "missing required field `name`"),
        (
            gemini_reply(usageMetadata={"promptTokenCount": -5}),
            "Expected `int` >= 0 - at `$.usageMetadata.promptTokenCount`",
        ),
    ],
)
async def test_malformed_reply_is_a_response_error(reply: dict[str, Any], expected: str) -> None:
    """A reply that is not a response (or a blocked prompt) says what was wrong."""
    with pytest.raises(LLMResponseError) as caught:
        await complete(reply, HELLO)
    assert expected in str(caught.value)


@pytest.mark.parametrize("variable", ["GEMINI_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY"])
async def test_either_of_zenflows_key_variables_serves(variable: str) -> None:
    http = ScriptedTransport(gemini_reply({"text": "ok"}))
    environ = {variable: KEY, "GOOGLE_GENERATIVE_AI_BASE_URL": "https://gemini.example"}
    async with ProviderRegistry(environ=environ, transport=http) as providers:
        assert providers.check("google/gemini-test") == ("google", "gemini-test")
        await providers.client("google").complete(HELLO)
    assert http.requests[0].headers["x-goog-api-key"] == KEY


async def test_missing_key_names_both_variables() -> None:
    """Without a key the call fails before any request, naming where a key may be."""
    http = ScriptedTransport(gemini_reply())
    async with ProviderRegistry(environ={}, transport=http) as providers:
        with pytest.raises(LLMConfigError) as caught:
            providers.check("google:gemini-x")
        with pytest.raises(LLMConfigError):
            await providers.client("google").complete(LLMRequest("gemini-x", ()))
    assert str(caught.value) == (
        "GOOGLE_GENERATIVE_AI_API_KEY (or GEMINI_API_KEY) is not set "
        "(needed by model google:gemini-x)"
    )
    assert http.requests == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("google/gemini-2.5-flash", ("google", "gemini-2.5-flash")),
        ("google:gemini-2.5-flash", ("google", "gemini-2.5-flash")),
        ("gemini-2.5-flash", ("google", "gemini-2.5-flash")),  # zenflow places bare gemini-*
        ("vertex/gemini-2.5-pro", ("vertex", "gemini-2.5-pro")),
        (
            "vertex-anthropic/claude-sonnet-4@20250514",
            ("vertex-anthropic", "claude-sonnet-4@20250514"),
        ),
        ("vertex-anthropic:claude-sonnet-4", ("vertex-anthropic", "claude-sonnet-4")),
    ],
)
def test_google_specs_resolve(spec: str, expected: tuple[str, str]) -> None:
    assert parse_model(spec) == expected


# -- against a scripted Gemini server on 127.0.0.1 ----------------------------------------


async def call(
    environ: dict[str, str], request: LLMRequest = HELLO, *, stream: bool = False
) -> tuple[Completion, list[str]]:
    deltas: list[str] = []
    policy = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.001)
    async with ProviderRegistry(environ=environ, policy=policy) as providers:
        on_delta = (lambda text, attempt: deltas.append(text)) if stream else None
        completion = await providers.client("google").complete(request, on_delta=on_delta)
    return completion, deltas


async def test_a_plain_reply_from_a_gemini_server(llm_server: StartLLMServer) -> None:
    server = llm_server([ServerRule([ServerReply("Hello there.", usage=(12, 3))])], wire="gemini")
    completion, _ = await call(server.environ(KEY))
    assert completion.content == "Hello there."
    assert completion.usage == LLMUsage(12, 3)
    assert completion.model == "gemini-test"
    (request,) = server.requests
    assert request.path == "/v1beta/models/gemini-test:generateContent"
    assert request.model == "gemini-test"
    assert request.headers["x-goog-api-key"] == KEY
    assert request.body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


async def test_a_streamed_reply_is_the_whole_reply_in_pieces(llm_server: StartLLMServer) -> None:
    """2,000 one-character pieces and a signed call: the same completion as unstreamed."""
    text = "".join(str(n % 10) for n in range(2000))
    reply = ServerReply(
        text, tool_calls=[ServerToolCall("lookup", {"word": "x" * 300})], usage=(321, 54), chunk=1
    )
    server = llm_server([ServerRule([reply])], wire="gemini")
    request = LLMRequest("gemini-test", (Message("user", "go"),), tools=(LOOKUP,))
    whole, none = await call(server.environ(KEY), request)
    streamed, deltas = await call(server.environ(KEY), request, stream=True)
    assert none == []
    assert "".join(deltas) == text
    # The server signs each reply's call afresh (its serial in the signature); all else is equal.
    assert [c.id for c in whole.tool_calls] == ["gemini-call-0#ts=c2lnbmF0dXJl-1"]
    assert [c.id for c in streamed.tool_calls] == ["gemini-call-0#ts=c2lnbmF0dXJl-2"]
    assert streamed.tool_calls[0].arguments == whole.tool_calls[0].arguments
    assert (streamed.content, streamed.usage, streamed.model, streamed.finish_reason) == (
        whole.content,
        whole.usage,
        whole.model,
        whole.finish_reason,
    )
    assert streamed.usage.total_tokens == 375
    first, second = server.requests
    assert first.path == "/v1beta/models/gemini-test:generateContent"
    assert second.path == "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
    assert first.body == second.body  # Gemini asks for a stream by its URL only


async def test_a_stream_cut_before_its_finish_is_an_error(llm_server: StartLLMServer) -> None:
    cut = 'data: {"candidates": [{"content": {"parts": [{"text": "Hel"}]}}]}\n\n'
    headers = {"Content-Type": "text/event-stream"}
    server = llm_server([ServerRule([ServerReply(body=cut, headers=headers)])], wire="gemini")
    with pytest.raises(LLMResponseError, match="the stream ended before the reply did"):
        await call(server.environ(KEY), stream=True)


@pytest.mark.parametrize("status", [400, 403, 500])
async def test_an_error_body_is_shown_with_the_key_masked(
    llm_server: StartLLMServer, status: int
) -> None:
    """Google's error JSON: its message is shown, the key the server echoes is not."""
    body = {
        "error": {
            "code": status,
            "message": f"API key not valid: {KEY} (key={KEY})",
            "status": "INVALID_ARGUMENT",
        }
    }
    server = llm_server(
        [ServerRule([ServerReply(status=status, body=json.dumps(body))])], wire="gemini"
    )
    with pytest.raises(LLMHTTPError) as caught:
        await call(server.environ(KEY))
    message = str(caught.value)
    assert caught.value.status == status
    assert f"google model gemini-test: HTTP {status}" in message
    assert "API key not valid" in message
    assert KEY not in message
    assert KEY[4:] not in message  # nor the key without its vendor prefix
    assert MASK in message
    # 5xx is retried (the policy's two attempts); a 4xx is the request's fault, not retried.
    assert len(server.requests) == (2 if status >= 500 else 1)
