"""Reasoning on every native wire: the ``thinking`` level as each provider takes it, the
reasoning kept apart from the answer, and the cache's tokens reported (and priced).

Each test speaks real HTTP to a local server that answers in the wire's own
shapes (``ScriptedLLMServer``): a thinking block with its signature, a Gemini
thought part, a Converse ``reasoningContent`` block, DeepSeek's
``reasoning_content``.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from cadenza.llm import (
    Completion,
    LLMRequest,
    LLMUsage,
    Message,
    ModelToolCall,
    Price,
    ProviderRegistry,
    Reasoning,
    ToolSpec,
)
from cadenza.llm._stream import OpenAIStream, SSEParser
from cadenza.testing import RequestMatch, ScriptedLLMServer, ServerReply, ServerRule, ServerToolCall
from cadenza.testing._llm_wire import thinking_signature
from cadenza.testing.pytest_plugin import StartLLMServer

THOUGHT = "The user greets me; a greeting back is the whole task. " * 3
ANSWER = "Hello there."
LOOKUP = ToolSpec("lookup", "Look a word up.", {"type": "object"})

# provider, the server's wire, the model asked for
WIRES = [
    ("openai", "openai", "o-test"),
    ("anthropic", "anthropic", "claude-test"),
    ("google", "gemini", "gemini-2.5-flash"),
    ("vertex-anthropic", "vertex-anthropic", "claude-test@001"),
    ("bedrock", "bedrock", "anthropic.claude-sonnet-4-6"),
]
LEVELS = [None, "off", "low", "medium", "high"]
BUDGET = {"low": 1024, "medium": 4096, "high": 16384}


def ask(model: str, thinking: str | None = None, *messages: Message) -> LLMRequest:
    conversation = messages or (Message("user", "hi"),)
    if thinking is None:
        return LLMRequest(model, conversation)
    return LLMRequest(model, conversation, thinking=thinking)  # type: ignore[arg-type]


@pytest.fixture
def servers(llm_server: StartLLMServer) -> dict[str, ScriptedLLMServer]:
    """One server per wire, each answering every request with THOUGHT, then ANSWER."""
    reply = ServerReply(content=ANSWER, reasoning=THOUGHT, chunk=5, usage=(40, 30))
    return {wire: llm_server([ServerRule([reply])], wire=wire) for _, wire, _ in WIRES}  # type: ignore[arg-type]


def _thinking_sent(provider: str, body: dict[str, Any]) -> Any:
    """What of ``body`` says how much to think, in the provider's own terms."""
    if provider == "openai":
        return body.get("reasoning_effort")
    if provider in ("anthropic", "vertex-anthropic"):
        return (body.get("thinking"), body["max_tokens"])
    if provider == "google":
        return body.get("generationConfig", {}).get("thinkingConfig")
    inference = body.get("inferenceConfig", {}).get("maxTokens")
    return (body.get("additionalModelRequestFields"), inference)


def _expected(provider: str, level: str | None) -> Any:
    budget = BUDGET.get(level or "")
    if provider == "openai":
        return level if budget else None  # off and no level: nothing at all
    if provider in ("anthropic", "vertex-anthropic"):
        if budget is None:
            return (None, 4096)
        return ({"type": "enabled", "budget_tokens": budget}, 4096 + budget)
    if provider == "google":
        if level == "off":
            return {"thinkingBudget": 0}  # 2.5 Flash thinks unless told not to
        return None if budget is None else {"thinkingBudget": budget, "includeThoughts": True}
    if budget is None:
        return (None, None)
    return ({"thinking": {"type": "enabled", "budget_tokens": budget}}, 4096 + budget)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("provider", "wire", "model"), WIRES)
async def test_each_level_reaches_the_wire_as_its_own_option(
    servers: dict[str, ScriptedLLMServer], provider: str, wire: str, model: str, level: str | None
) -> None:
    """low/medium/high are the wire's effort or budget (max_tokens raised by it where the
    budget is part of it); off and no level send nothing, but Gemini's off is a budget of 0."""
    server = servers[wire]
    async with ProviderRegistry(environ=server.environ()) as providers:
        await providers.client(provider).complete(ask(model, level))
    (request,) = server.requests
    assert _thinking_sent(provider, request.body) == _expected(provider, level)


@pytest.mark.parametrize(
    ("provider", "wire", "model"),
    [
        ("google", "gemini", "gemini-2.5-pro"),
        ("vertex", "gemini", "gemini-3-pro-preview"),
        ("bedrock", "bedrock", "deepseek.r1-v1:0"),
    ],
)
async def test_a_model_that_cannot_take_the_option_is_sent_none(
    servers: dict[str, ScriptedLLMServer], provider: str, wire: str, model: str
) -> None:
    """Gemini 2.5 Pro and Gemini 3 refuse a budget of 0 (they always think): off sends
    nothing; Converse has no common field, so only Claude on Bedrock is told a level."""
    server = servers[wire]
    level = "off" if wire == "gemini" else "high"
    async with ProviderRegistry(environ=server.environ()) as providers:
        completion = await providers.client(provider).complete(ask(model, level))
    body = server.requests[0].body
    assert "thinkingConfig" not in body.get("generationConfig", {})
    assert "additionalModelRequestFields" not in body
    assert body.get("inferenceConfig", {}).get("maxTokens") is None
    assert completion.content == ANSWER  # the reasoning still comes back, apart
    assert completion.reasoning_text == THOUGHT


async def _complete(
    server: ScriptedLLMServer, provider: str, request: LLMRequest, *, stream: bool
) -> tuple[Completion, list[tuple[str, str]]]:
    """The completion, and what the hooks heard in order: ("answer" or "reasoning", text)."""
    heard: list[tuple[str, str]] = []
    async with ProviderRegistry(environ=server.environ()) as providers:
        completion = await providers.client(provider).complete(
            request,
            on_delta=(lambda text, _: heard.append(("answer", text))) if stream else None,
            on_reasoning=lambda text, _: heard.append(("reasoning", text)),
        )
    return completion, heard


@pytest.mark.parametrize(("provider", "wire", "model"), WIRES)
async def test_reasoning_comes_apart_from_the_answer_streamed_or_whole(
    servers: dict[str, ScriptedLLMServer], provider: str, wire: str, model: str
) -> None:
    """The reasoning goes to ``on_reasoning`` as it arrives, the answer to ``on_delta``; the
    completion's content is the answer only, and a stream gives the same reply as a body."""
    server = servers[wire]
    request = ask(model, "high")
    whole, heard_whole = await _complete(server, provider, request, stream=False)
    streamed, heard = await _complete(server, provider, request, stream=True)

    assert whole.content == streamed.content == ANSWER
    assert heard_whole == [("reasoning", THOUGHT)]  # no stream: the reasoning in one piece
    kinds = [kind for kind, _ in heard]
    assert kinds == sorted(kinds, reverse=True)  # reasoning first, then the answer
    assert "".join(text for kind, text in heard if kind == "reasoning") == THOUGHT
    assert "".join(text for kind, text in heard if kind == "answer") == ANSWER
    signed = provider in ("anthropic", "vertex-anthropic", "bedrock")
    for serial, completion in enumerate((whole, streamed), start=1):
        signature = thinking_signature(THOUGHT, serial) if signed else None
        assert completion.reasoning == (Reasoning(THOUGHT, signature),)


async def test_reasoning_under_either_name_of_the_compatible_servers() -> None:
    """DeepSeek and vLLM stream ``reasoning_content``, OpenRouter, Groq and Ollama
    ``reasoning``: both are reasoning, neither is the answer."""
    heard: list[str] = []
    answer: list[str] = []
    stream = OpenAIStream(lambda t, _: answer.append(t), 1, lambda t, _: heard.append(t))
    parser = SSEParser()
    for delta in ({"reasoning_content": "one "}, {"reasoning": "two"}, {"content": "three"}):
        chunk = {"model": "m", "choices": [{"index": 0, "delta": delta}]}
        stream.feed(parser.feed(f"data: {json.dumps(chunk)}\n\n".encode()))
    end = {"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    stream.feed(parser.feed(f"data: {json.dumps(end)}\n\n".encode()))
    completion = stream.completion(what="m", model="m", attempts=1)
    assert heard == ["one ", "two"]
    assert answer == ["three"]
    assert completion.content == "three"
    assert completion.reasoning == (Reasoning("one two"),)


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize(
    ("provider", "wire", "model"),
    [w for w in WIRES if w[0] in ("anthropic", "vertex-anthropic", "bedrock")],
)
async def test_a_tool_loop_sends_the_signed_thinking_back(
    llm_server: StartLLMServer, provider: str, wire: str, model: str, streamed: bool
) -> None:
    """With thinking on, the assistant turn that called a tool goes back led by its thinking
    block, signature and all, as the provider requires; nothing of it is in the text."""
    rules = [
        ServerRule(
            [ServerReply(tool_calls=[ServerToolCall("lookup", {"w": "x"})], reasoning=THOUGHT)],
            match=RequestMatch(last_role="user"),
        ),
        ServerRule([ServerReply(content=ANSWER)], match=RequestMatch(last_role="tool")),
    ]
    server = llm_server(rules, wire=wire)  # type: ignore[arg-type]
    first = ask(model, "low")
    async with ProviderRegistry(environ=server.environ()) as providers:
        client = providers.client(provider)
        hook = (lambda text, _: None) if streamed else None
        called = await client.complete(first, on_delta=hook)
        (call,) = called.tool_calls
        follow = ask(
            model,
            "low",
            *first.messages,
            Message("assistant", None, tool_calls=(call,), reasoning=called.reasoning),
            Message("tool", "x is a letter", tool_call_id=call.id, name="lookup"),
        )
        done = await client.complete(follow, on_delta=hook)
    assert done.content == ANSWER
    signature = thinking_signature(THOUGHT, 1)
    sent = server.requests[1].body["messages"][1]
    assert sent["role"] == "assistant"
    if wire == "bedrock":
        said = {"text": THOUGHT, "signature": signature}
        assert sent["content"][0] == {"reasoningContent": {"reasoningText": said}}
        assert "toolUse" in sent["content"][1]
    else:
        assert sent["content"][0] == {
            "type": "thinking",
            "thinking": THOUGHT,
            "signature": signature,
        }
        assert sent["content"][1]["type"] == "tool_use"


async def test_reasoning_is_not_sent_back_where_the_wire_does_not_want_it(
    llm_server: StartLLMServer,
) -> None:
    """OpenAI-compatible servers refuse their reasoning in the history (DeepSeek: HTTP 400),
    and another provider's block has no signature a Claude would take: neither goes out."""
    server = llm_server([ServerRule([ANSWER])])
    anthropic = llm_server([ServerRule([ANSWER])], wire="anthropic")
    call = ModelToolCall("c1", "lookup", "{}")
    history = (
        Message("user", "hi"),
        Message("assistant", None, tool_calls=(call,), reasoning=(Reasoning("unsigned"),)),
        Message("tool", "ok", tool_call_id="c1", name="lookup"),
    )
    environ = server.environ() | anthropic.environ()
    async with ProviderRegistry(environ=environ) as providers:
        await providers.client("openai").complete(ask("o-test", "high", *history))
        await providers.client("anthropic").complete(ask("claude-test", "high", *history))
    openai_turn = server.requests[0].body["messages"][1]
    assert set(openai_turn) == {"role", "content", "tool_calls"}
    claude_turn = anthropic.requests[0].body["messages"][1]
    assert [block["type"] for block in claude_turn["content"]] == ["tool_use"]


@pytest.mark.parametrize(("provider", "wire", "model"), WIRES)
async def test_cached_tokens_are_reported_and_priced_at_cached_input(
    llm_server: StartLLMServer, provider: str, wire: str, model: str
) -> None:
    """800 of 1,000 prompt tokens read from the cache: the usage says so on every wire, and
    the call costs 200 tokens at ``input`` plus 800 at ``cachedInput``."""
    reply = ServerReply(content=ANSWER, usage=(1000, 50), cached_tokens=800, reasoning_tokens=20)
    server = llm_server([ServerRule([reply, reply])], wire=wire)  # type: ignore[arg-type]
    async with ProviderRegistry(environ=server.environ()) as providers:
        client = providers.client(provider)
        whole = await client.complete(ask(model))
        streamed = await client.complete(ask(model), on_delta=lambda text, _: None)
    counts_reasoning = provider in ("openai", "google")  # the wires that count it apart
    expected = LLMUsage(1000, 50, cached_tokens=800, reasoning_tokens=20 if counts_reasoning else 0)
    assert whole.usage == streamed.usage == expected
    price = Price(input=2.0, output=8.0, cached_input=0.5)
    assert price.cost(whole.usage) == pytest.approx((200 * 2.0 + 800 * 0.5 + 50 * 8.0) / 1e6)


def test_a_request_without_reasoning_encodes_as_before_it_existed() -> None:
    """A recorded model call is found again by the digest of its encoded request: one that
    sets no level and holds no reasoning has no key it lacked before, so the runs recorded
    before reasoning existed still resume and replay."""
    request = LLMRequest("m", (Message("user", "hi"), Message("assistant", "ok")))
    encoded = json.loads(msgspec.json.encode(request))
    assert set(encoded) == {
        "model",
        "messages",
        "tools",
        "temperature",
        "top_p",
        "max_tokens",
        "max_retries",
    }
    for message in encoded["messages"]:
        assert set(message) == {"role", "content", "tool_calls", "tool_call_id", "name"}
    thinking = json.loads(msgspec.json.encode(ask("m", "low")))
    assert thinking["thinking"] == "low"
