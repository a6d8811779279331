"""The openai and ollama providers: request shapes, reply mapping and malformed replies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from cadenza.llm import (
    LLMConfigError,
    LLMHTTPError,
    LLMRequest,
    LLMResponseError,
    LLMUsage,
    Message,
    ModelToolCall,
    ProviderRegistry,
    ToolSpec,
)
from cadenza.testing import ScriptedTransport

ENV = {"OPENAI_API_KEY": "test-openai-key", "OPENAI_BASE_URL": "https://llm.example/v1/"}
WEATHER = ToolSpec(
    name="weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


def ask(text: str = "hi", *, model: str = "gpt-test", **options: Any) -> LLMRequest:
    """A request with a system prompt and one user message."""
    messages = (Message("system", "You are terse."), Message("user", text))
    return LLMRequest(model=model, messages=messages, **options)


def openai_reply(
    content: str | None = "ok", tool_calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A Chat Completions response body."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-test-0001",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3},
    }


async def test_request_shape() -> None:
    """POST {base}/chat/completions with a bearer key, the messages, tools and set options only."""
    http = ScriptedTransport(openai_reply())
    async with ProviderRegistry(environ=ENV, transport=http) as providers:
        await providers.client("openai").complete(ask(tools=(WEATHER,), temperature=0.2))
    request = http.requests[0]
    assert request.method == "POST"
    assert str(request.url) == "https://llm.example/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer test-openai-key"
    assert request.headers["content-type"] == "application/json"
    assert http.json() == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "hi"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    "description": "The weather in a city.",
                    "parameters": WEATHER.parameters,
                },
            }
        ],
        "temperature": 0.2,
    }


async def test_tool_turns_are_sent_in_openai_shape() -> None:
    """Assistant tool calls go out as ``tool_calls``; tool results as ``tool`` messages by id."""
    http = ScriptedTransport(openai_reply())
    call = ModelToolCall(id="call_1", name="weather", arguments='{"city": "Oslo"}')
    request = LLMRequest(
        model="gpt-test",
        messages=(
            Message("user", "Weather in Oslo?"),
            Message("assistant", None, tool_calls=(call,)),
            Message("tool", "rain", tool_call_id="call_1", name="weather"),
        ),
        top_p=0.9,
        max_tokens=50,
    )
    async with ProviderRegistry(environ=ENV, transport=http) as providers:
        await providers.client("openai").complete(request)
    body = http.json()
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "content": "rain", "tool_call_id": "call_1", "name": "weather"},
    ]
    assert (body["top_p"], body["max_tokens"]) == (0.9, 50)
    assert "tools" not in body


async def test_reply_with_tool_calls_and_usage() -> None:
    """Tool calls keep the model's raw argument text; usage and model come from the reply."""
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"ci'}},
        {"id": "c2", "type": "function", "function": {"name": "weather", "arguments": {"x": 1}}},
    ]
    http = ScriptedTransport(openai_reply(content=None, tool_calls=calls))
    async with ProviderRegistry(environ=ENV, transport=http) as providers:
        completion = await providers.client("openai").complete(ask())
    assert completion.content is None
    assert completion.tool_calls == (
        ModelToolCall("c1", "weather", '{"ci'),
        ModelToolCall("c2", "weather", '{"x":1}'),
    )
    assert completion.usage == LLMUsage(prompt_tokens=12, completion_tokens=3)
    assert completion.model == "gpt-test-0001"
    assert completion.finish_reason == "stop"
    assert completion.attempts == 1


async def test_missing_usage_counts_zero_and_model_falls_back() -> None:
    """A reply without usage or model still completes, with zero tokens and the requested model."""
    reply = openai_reply()
    del reply["usage"], reply["model"]
    async with ProviderRegistry(environ=ENV, transport=ScriptedTransport(reply)) as providers:
        completion = await providers.client("openai").complete(ask())
    assert completion.usage == LLMUsage(0, 0)
    assert completion.model == "gpt-test"


def _bad_tool_call() -> dict[str, Any]:
    reply = openai_reply(tool_calls=[{"id": "c1", "function": {"name": 7, "arguments": "{}"}}])
    return reply


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"<html>oops</html>", "malformed chat completion: JSON is malformed"),
        (b'{"choices": []}', "the response has no choices"),
        (b'{"id": "x"}', "missing required field `choices`"),
        (_bad_tool_call(), "Expected `str`, got `int` - at `$.choices[0].message.tool_calls[0]"),
        ({"choices": [{"message": {"content": 5}}]}, "at `$.choices[0].message.content`"),
    ],
)
async def test_malformed_reply_is_a_response_error(
    body: bytes | dict[str, Any], expected: str
) -> None:
    """A reply that is not a chat completion raises LLMResponseError saying what was wrong."""
    answer = httpx.Response(200, content=body) if isinstance(body, bytes) else body
    async with ProviderRegistry(environ=ENV, transport=ScriptedTransport(answer)) as providers:
        with pytest.raises(LLMResponseError) as caught:
            await providers.client("openai").complete(ask())
    assert expected in str(caught.value)
    assert "openai model gpt-test" in str(caught.value)


async def test_oversized_body_is_refused() -> None:
    """A body over the cap is a response error, whether its length is declared or not."""

    async def undeclared() -> AsyncIterator[bytes]:
        yield b"x" * 3000
        yield b"x" * 3000

    big = openai_reply(content="x" * 5000)
    streamed = httpx.Response(200, content=undeclared())
    for answer in (big, streamed):
        http = ScriptedTransport(answer)
        async with ProviderRegistry(environ=ENV, transport=http, max_body=4096) as providers:
            with pytest.raises(LLMResponseError, match="over the 4096-byte limit"):
                await providers.client("openai").complete(ask())


async def test_client_error_is_not_retried() -> None:
    """A 400 raises LLMHTTPError at once, with the status and the server's message."""
    http = ScriptedTransport(httpx.Response(400, json={"error": {"message": "bad tool schema"}}))
    async with ProviderRegistry(environ=ENV, transport=http) as providers:
        with pytest.raises(LLMHTTPError) as caught:
            await providers.client("openai").complete(ask())
    assert caught.value.status == 400
    assert caught.value.attempts == 1
    assert "HTTP 400" in str(caught.value)
    assert "bad tool schema" in str(caught.value)
    assert len(http.requests) == 1


async def test_missing_key_names_the_variable() -> None:
    """Without OPENAI_API_KEY, check() and complete() name the variable and the model."""
    http = ScriptedTransport(openai_reply())
    async with ProviderRegistry(environ={}, transport=http) as providers:
        with pytest.raises(LLMConfigError) as checked:
            providers.check("openai:gpt-4o")
        with pytest.raises(LLMConfigError) as called:
            await providers.client("openai").complete(ask(model="gpt-4o"))
    expected = "OPENAI_API_KEY is not set (needed by model openai:gpt-4o)"
    assert str(checked.value) == str(called.value) == expected
    assert http.requests == []


async def test_base_url_must_be_http() -> None:
    """A base URL without an http(s) scheme is a config error naming the variable."""
    providers = ProviderRegistry(environ={"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "localhost"})
    with pytest.raises(LLMConfigError, match="OPENAI_BASE_URL must be an http"):
        providers.client("openai")


@pytest.mark.parametrize(
    ("environ", "url"),
    [
        ({}, "http://127.0.0.1:11434/v1/chat/completions"),
        ({"OLLAMA_HOST": "gpu-box:11434"}, "http://gpu-box:11434/v1/chat/completions"),
        ({"OLLAMA_HOST": "https://ollama.example/"}, "https://ollama.example/v1/chat/completions"),
    ],
)
async def test_ollama_speaks_openai_without_a_key(environ: dict[str, str], url: str) -> None:
    """ollama posts Chat Completions to OLLAMA_HOST/v1 and sends no credentials."""
    http = ScriptedTransport(openai_reply())
    async with ProviderRegistry(environ=environ, transport=http) as providers:
        providers.check("ollama:llama3.1")
        completion = await providers.client("ollama").complete(ask(model="llama3.1"))
    assert completion.content == "ok"
    assert str(http.requests[0].url) == url
    assert "authorization" not in http.requests[0].headers
    assert http.json()["model"] == "llama3.1"


async def test_undecodable_body_is_a_response_error() -> None:
    """A body that claims gzip but is not is a response error, not a raw httpx exception."""

    async def not_gzip() -> AsyncIterator[bytes]:
        yield b"not gzip"

    bad = httpx.Response(200, headers={"Content-Encoding": "gzip"}, content=not_gzip())
    async with ProviderRegistry(environ=ENV, transport=ScriptedTransport(bad)) as providers:
        with pytest.raises(LLMResponseError, match="cannot decode the response body"):
            await providers.client("openai").complete(ask())
