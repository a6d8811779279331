"""ScriptedLLMServer: rule matching, recording, in-flight counts and both wire formats."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import anyio.to_thread
import httpx
import pytest

from cadenza.llm import (
    LLMHTTPError,
    LLMRequest,
    Message,
    ModelToolCall,
    ProviderRegistry,
    ToolSpec,
)
from cadenza.testing import (
    RequestMatch,
    ScriptedLLMServer,
    ServerReply,
    ServerRule,
    ServerToolCall,
)
from cadenza.testing.pytest_plugin import StartLLMServer

SUBMIT = ToolSpec("submit_result", "Finish the step.", {"type": "object"})


def request(*messages: Message, tools: tuple[ToolSpec, ...] = ()) -> LLMRequest:
    return LLMRequest(model="gpt-test", messages=messages, tools=tools)


async def test_rules_match_on_what_the_request_shows(llm_server: StartLLMServer) -> None:
    """Rules match on system, user, last message, last role, tools and model; first match wins."""
    server = llm_server(
        [
            ServerRule(["reviewed"], match=RequestMatch(system="reviewer"), name="reviewer"),
            ServerRule(["tool seen"], match=RequestMatch(last_role="tool"), name="after-tool"),
            ServerRule(["submitting"], match=RequestMatch(tools="submit_result"), name="tools"),
            ServerRule(["other model"], match=RequestMatch(model="gpt-other"), name="model"),
            ServerRule(["greeting"], match={"user": "hello", "last": "hello"}, name="user"),
        ]
    )
    call = ModelToolCall("c1", "lookup", "{}")
    cases = [
        (request(Message("system", "You are the reviewer."), Message("user", "x")), "reviewed"),
        (
            request(
                Message("user", "go"),
                Message("assistant", None, tool_calls=(call,)),
                Message("tool", "42", tool_call_id="c1"),
            ),
            "tool seen",
        ),
        (request(Message("user", "go"), tools=(SUBMIT,)), "submitting"),
        (LLMRequest("gpt-other", (Message("user", "x"),)), "other model"),
        (request(Message("user", "hello there")), "greeting"),
    ]
    async with ProviderRegistry(environ=server.environ()) as providers:
        client = providers.client("openai")
        for sent, expected in cases:
            assert (await client.complete(sent)).content == expected
    assert [r.rule for r in server.requests] == ["reviewer", "after-tool", "tools", "model", "user"]


async def test_unmatched_request_gets_400_and_is_recorded(llm_server: StartLLMServer) -> None:
    """A request no rule matches is answered 400 with the reason, and recorded without a rule."""
    server = llm_server([ServerRule(["x"], match=RequestMatch(user="never"))])
    async with ProviderRegistry(environ=server.environ()) as providers:
        with pytest.raises(LLMHTTPError, match="no rule matches this request"):
            await providers.client("openai").complete(request(Message("user", "hi")))
    assert [r.rule for r in server.requests] == [None]


async def test_replies_repeat_the_last_or_cycle(llm_server: StartLLMServer) -> None:
    """After its replies a rule repeats the last one, or starts over with after=cycle."""
    server = llm_server(
        [
            {"match": {"user": "repeat"}, "replies": ["a", "b"]},
            {"match": {"user": "cycle"}, "replies": ["a", "b"], "after": "cycle"},
        ]
    )
    async with ProviderRegistry(environ=server.environ()) as providers:
        client = providers.client("openai")
        repeated = [(await client.complete(request(Message("user", "repeat")))).content]
        cycled = [(await client.complete(request(Message("user", "cycle")))).content]
        for _ in range(2):
            repeated.append((await client.complete(request(Message("user", "repeat")))).content)
            cycled.append((await client.complete(request(Message("user", "cycle")))).content)
    assert repeated == ["a", "b", "b"]
    assert cycled == ["a", "b", "a"]


async def test_records_requests_and_the_peak_in_flight(llm_server: StartLLMServer) -> None:
    """Held replies keep three calls in flight at once; each request is recorded with headers."""
    gate = threading.Event()
    server = llm_server([ServerRule([ServerReply("done", hold=gate)])])
    async with ProviderRegistry(environ=server.environ(api_key="k-123")) as providers:
        client = providers.client("openai")
        calls = [
            asyncio.create_task(client.complete(request(Message("user", "hi")))) for _ in "abc"
        ]
        arrived = await anyio.to_thread.run_sync(server.wait_for_requests, 3)
        gate.set()
        results = await asyncio.gather(*calls)
    assert [r.content for r in results] == ["done"] * 3
    assert server.max_inflight == 3
    assert sorted(r.inflight for r in arrived) == [1, 2, 3]
    first = arrived[0]
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer k-123"
    assert first.model == "gpt-test"
    assert first.messages == [{"role": "user", "content": "hi"}]
    assert "k-123" not in repr(first)


async def test_anthropic_wire_end_to_end(llm_server: StartLLMServer) -> None:
    """In Anthropic mode the anthropic provider runs a tool round trip against the server."""
    server = llm_server(
        [
            ServerRule(["Found it."], match=RequestMatch(last_role="tool")),
            ServerRule([ServerReply(tool_calls=[ServerToolCall("lookup", {"word": "coda"})])]),
        ],
        wire="anthropic",
    )
    async with ProviderRegistry(environ=server.environ()) as providers:
        client = providers.client("anthropic")
        first = await client.complete(request(Message("system", "Be brief."), Message("user", "q")))
        (call,) = first.tool_calls
        assert (call.name, call.arguments) == ("lookup", '{"word":"coda"}')
        second = await client.complete(
            request(
                Message("user", "q"),
                Message("assistant", None, tool_calls=first.tool_calls),
                Message("tool", "the ending", tool_call_id=call.id),
            )
        )
    assert second.content == "Found it."
    assert second.usage.prompt_tokens == 10
    sent = server.requests[1]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == "test-key"
    assert sent.messages[-1]["content"][0]["tool_use_id"] == call.id


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ({"replies": [{"contnet": "typo"}]}, "unknown reply key"),
        ({"replies": ["x"], "match": {"usr": "typo"}}, "unexpected keyword argument 'usr'"),
        ({"replies": []}, "has no replies"),
        ({"replies": ["x"], "after": "loop"}, "after must be"),
    ],
)
def test_malformed_rules_are_rejected(rule: dict[str, Any], expected: str) -> None:
    """A malformed rule dict is a ValueError saying what is wrong."""
    with pytest.raises(ValueError, match=expected):
        ScriptedLLMServer([rule])


def test_stops_on_leaving_the_block() -> None:
    """Leaving the with block closes the port, even with a client connection kept alive."""
    with ScriptedLLMServer([ServerRule(["ok"])]) as server:
        url = server.base_url
        with httpx.Client() as client:
            response = client.post(f"{url}/chat/completions", json={"messages": []})
            assert response.json()["choices"][0]["message"]["content"] == "ok"
            port = int(url.rsplit(":", 1)[1].split("/")[0])
    assert "stopped" in repr(server)
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
        pass
