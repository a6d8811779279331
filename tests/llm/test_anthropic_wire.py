"""The anthropic provider: Messages API requests, replies and malformed replies."""

from __future__ import annotations

from typing import Any

import pytest

from cadenza.llm import (
    LLMConfigError,
    LLMRequest,
    LLMResponseError,
    LLMUsage,
    Message,
    ModelToolCall,
    ProviderRegistry,
    Reasoning,
    ToolSpec,
)
from cadenza.testing import ScriptedTransport

ENV = {"ANTHROPIC_API_KEY": "test-anthropic-key", "ANTHROPIC_BASE_URL": "https://claude.example"}
LOOKUP = ToolSpec("lookup", "Look a word up.", {"type": "object"})


def anthropic_reply(*content: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A Messages API response body."""
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-0001",
        "content": list(content),
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 20, "output_tokens": 4},
    } | fields


async def complete(answer: dict[str, Any], request: LLMRequest) -> tuple[Any, ScriptedTransport]:
    http = ScriptedTransport(answer)
    async with ProviderRegistry(environ=ENV, transport=http) as providers:
        completion = await providers.client("anthropic").complete(request)
    return completion, http


async def test_request_shape() -> None:
    """POST {base}/v1/messages with x-api-key, the version, top-level system and max_tokens."""
    request = LLMRequest(
        model="claude-test",
        messages=(Message("system", "Be brief."), Message("user", "hi")),
        tools=(LOOKUP,),
        temperature=0.5,
    )
    _, http = await complete(anthropic_reply({"type": "text", "text": "hello"}), request)
    sent = http.requests[0]
    assert str(sent.url) == "https://claude.example/v1/messages"
    assert sent.headers["x-api-key"] == "test-anthropic-key"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    assert http.json() == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "tools": [
            {"name": "lookup", "description": "Look a word up.", "input_schema": {"type": "object"}}
        ],
        "temperature": 0.5,
    }


async def test_tool_turns_become_blocks() -> None:
    """Tool calls become tool_use blocks; consecutive tool results share one user turn."""
    calls = (
        ModelToolCall("toolu_1", "lookup", '{"word": "cadenza"}'),
        ModelToolCall("toolu_2", "lookup", "not json"),
    )
    request = LLMRequest(
        model="claude-test",
        messages=(
            Message("user", "Define two words."),
            Message("assistant", "Looking up.", tool_calls=calls),
            Message("tool", "a solo passage", tool_call_id="toolu_1"),
            Message("tool", "error: bad arguments", tool_call_id="toolu_2"),
            Message("user", "Thanks."),
        ),
        max_tokens=100,
    )
    _, http = await complete(anthropic_reply({"type": "text", "text": "ok"}), request)
    body = http.json()
    assert body["max_tokens"] == 100
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking up."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "lookup",
                    "input": {"word": "cadenza"},
                },
                {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a solo passage"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "error: bad arguments",
                },
                {"type": "text", "text": "Thanks."},
            ],
        },
    ]


async def test_reply_maps_to_completion() -> None:
    """Text blocks join into content, tool_use input turns into JSON text, cache reads count
    (as prompt tokens, and as the cached ones), a thinking block is the reasoning."""
    reply = anthropic_reply(
        {"type": "thinking", "thinking": "hmm", "signature": "x"},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {"word": "fugue"}},
        stop_reason="tool_use",
        usage={"input_tokens": 20, "output_tokens": 4, "cache_read_input_tokens": 100},
    )
    request = LLMRequest(model="claude-test", messages=(Message("user", "hi"),))
    completion, _ = await complete(reply, request)
    assert completion.content == "Let me look."
    assert completion.tool_calls == (ModelToolCall("toolu_9", "lookup", '{"word":"fugue"}'),)
    assert completion.usage == LLMUsage(prompt_tokens=120, completion_tokens=4, cached_tokens=100)
    assert completion.reasoning == (Reasoning("hmm", signature="x"),)
    assert completion.finish_reason == "tool_use"
    assert completion.model == "claude-test-0001"


async def test_tool_only_reply_has_no_content() -> None:
    """A reply with only tool_use blocks has content None."""
    reply = anthropic_reply({"type": "tool_use", "id": "t", "name": "lookup", "input": {}})
    completion, _ = await complete(reply, LLMRequest("m", (Message("user", "hi"),)))
    assert completion.content is None
    assert completion.tool_calls == (ModelToolCall("t", "lookup", "{}"),)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ({"type": "message"}, "missing required field `content`"),
        (anthropic_reply({"type": "text"}), "content[0] is a text block without text"),
        (
            anthropic_reply({"type": "tool_use", "id": "t", "name": "lookup"}),
            "content[0] is a tool_use block without id, name or input",
        ),
        (
            anthropic_reply({"type": "tool_use", "id": "t", "name": "x", "input": "{}"}),
            "got `str` - at `$.content[0].input`",
        ),
    ],
)
async def test_malformed_reply_is_a_response_error(reply: dict[str, Any], expected: str) -> None:
    """A reply that is not a message raises LLMResponseError saying what was wrong."""
    with pytest.raises(LLMResponseError) as caught:
        await complete(reply, LLMRequest("claude-test", (Message("user", "hi"),)))
    assert expected in str(caught.value)


async def test_missing_key_names_the_variable() -> None:
    """Without ANTHROPIC_API_KEY the call fails before any request, naming the variable."""
    http = ScriptedTransport(anthropic_reply())
    async with ProviderRegistry(environ={}, transport=http) as providers:
        with pytest.raises(LLMConfigError) as caught:
            await providers.client("anthropic").complete(LLMRequest("claude-x", ()))
    assert str(caught.value) == "ANTHROPIC_API_KEY is not set (needed by model anthropic:claude-x)"
    assert http.requests == []
