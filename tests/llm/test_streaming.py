"""Streamed replies: the same completion as a whole reply, text handed out as it arrives."""

from __future__ import annotations

import pytest

from cadenza.llm import (
    Completion,
    LLMRequest,
    LLMResponseError,
    Message,
    ProviderRegistry,
    ToolSpec,
)
from cadenza.testing import ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer

LOOKUP = ToolSpec("lookup", "Look a word up.", {"type": "object"})
TEXT = "".join(f"{n % 10}" for n in range(2000))
ARGUMENTS = {"word": "cadenza", "senses": [1, 2, 3], "note": "x" * 200}

REQUEST = LLMRequest(model="m-test", messages=(Message("user", "go"),), tools=(LOOKUP,))


async def complete(
    server_environ: dict[str, str], provider: str, *, stream: bool
) -> tuple[Completion, list[tuple[str, int]]]:
    deltas: list[tuple[str, int]] = []
    async with ProviderRegistry(environ=server_environ) as providers:
        client = providers.client(provider)
        on_delta = (lambda text, attempt: deltas.append((text, attempt))) if stream else None
        completion = await client.complete(REQUEST, on_delta=on_delta)
    return completion, deltas


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
async def test_two_thousand_deltas_make_the_same_completion_as_a_whole_reply(
    llm_server: StartLLMServer, wire: str
) -> None:
    """2,000 one-character text deltas and a tool call in fragments: the same reply either way."""
    reply = ServerReply(
        content=TEXT,
        tool_calls=[ServerToolCall("lookup", ARGUMENTS)],
        usage=(321, 54),
        chunk=1,
    )
    server = llm_server([ServerRule([reply, reply])], wire=wire)  # type: ignore[arg-type]
    environ = server.environ()
    whole, none = await complete(environ, wire, stream=False)
    streamed, deltas = await complete(environ, wire, stream=True)

    assert none == []
    assert "".join(text for text, _ in deltas) == TEXT
    assert {attempt for _, attempt in deltas} == {1}
    assert streamed.content == whole.content == TEXT
    # The server numbers its calls per request; all else is the same.
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == [
        (c.name, c.arguments) for c in whole.tool_calls
    ]
    assert len(streamed.tool_calls) == 1
    assert streamed.tool_calls[0].name == "lookup"
    assert streamed.usage == whole.usage  # the budget counts a streamed call the same
    assert streamed.usage.total_tokens == 375
    assert streamed.finish_reason == whole.finish_reason
    first, second = server.requests
    assert "stream" not in first.body
    assert second.body["stream"] is True
    if wire == "openai":  # the usage comes in the last chunk only when asked for
        assert second.body["stream_options"] == {"include_usage": True}


async def test_text_goes_out_as_it_arrives(llm_server: StartLLMServer) -> None:
    """A stream trickled a byte at a time: its text reaches ``on_delta`` in many pieces."""
    reply = ServerReply(content="abcd", chunk=1, trickle=0.0005)
    server = llm_server([ServerRule([reply])])
    completion, deltas = await complete(server.environ(), "openai", stream=True)
    assert completion.content == "abcd"
    assert [text for text, _ in deltas] == ["a", "b", "c", "d"]


async def test_a_server_that_does_not_stream_is_read_whole(llm_server: StartLLMServer) -> None:
    """Asked to stream, a server answers with one JSON body: the text arrives in one piece."""
    server = llm_server([ServerRule([ServerReply(content="all at once", stream=False)])])
    completion, deltas = await complete(server.environ(), "openai", stream=True)
    assert server.requests[0].body["stream"] is True
    assert completion.content == "all at once"
    assert deltas == [("all at once", 1)]


async def test_a_malformed_chunk_fails_the_call_naming_it(llm_server: StartLLMServer) -> None:
    """A chunk that is not a Chat Completions chunk is a response error, not a crash."""
    body = 'data: {"choices": "many"}\n\ndata: [DONE]\n\n'
    sse = {"Content-Type": "text/event-stream"}
    server = llm_server([ServerRule([ServerReply(body=body, headers=sse)])])
    with pytest.raises(LLMResponseError, match=r"openai model m-test: malformed stream chunk"):
        await complete(server.environ(), "openai", stream=True)


async def test_a_stream_cut_short_is_an_error(llm_server: StartLLMServer) -> None:
    """A stream that ends before its finish chunk is not taken for a whole reply."""
    body = 'data: {"choices": [{"delta": {"content": "half"}}]}\n\n'
    sse = {"Content-Type": "text/event-stream"}
    server = llm_server([ServerRule([ServerReply(body=body, headers=sse)])])
    with pytest.raises(LLMResponseError, match="the stream ended before the reply did"):
        await complete(server.environ(), "openai", stream=True)


async def test_an_error_event_mid_stream_is_retried(llm_server: StartLLMServer) -> None:
    """Anthropic's overloaded ``error`` event mid-stream: the call is retried and succeeds."""
    broken = (
        'event: message_start\ndata: {"type": "message_start", "message": {"model": "m"}}\n\n'
        "event: error\n"
        'data: {"type": "error",'
        ' "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
    )
    sse = {"Content-Type": "text/event-stream"}
    server = llm_server(
        [ServerRule([ServerReply(body=broken, headers=sse), "recovered"])], wire="anthropic"
    )
    deltas: list[tuple[str, int]] = []
    async with ProviderRegistry(environ=server.environ()) as providers:
        client = providers.client("anthropic")
        completion = await client.complete(
            REQUEST, on_delta=lambda text, attempt: deltas.append((text, attempt))
        )
    assert completion.content == "recovered"
    assert completion.attempts == 2
    assert "".join(text for text, _ in deltas) == "recovered"
    assert {attempt for _, attempt in deltas} == {2}
