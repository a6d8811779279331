"""The scripted provider: replies in order, the last repeating, with estimated usage."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from cadenza.kernel import FakeClock
from cadenza.llm import (
    Completion,
    LLMClient,
    LLMConfigError,
    LLMRequest,
    Message,
    ModelToolCall,
    ProviderRegistry,
    ScriptReplyLike,
)
from cadenza.testing import ServerRule
from cadenza.testing.pytest_plugin import StartLLMServer
from cadenza.workflow import ScriptReply, ScriptToolCall

HI = LLMRequest(model="demo", messages=(Message("user", "x" * 40),))


@dataclass
class _ToolCallObject:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class _ReplyObject:
    """Shaped like ``cadenza.workflow.ScriptReply``."""

    content: str | None = None
    tool_calls: list[_ToolCallObject] = field(default_factory=list)


async def replies(client: LLMClient, count: int) -> list[Completion]:
    return [await client.complete(HI) for _ in range(count)]


async def test_replies_in_order_then_the_last_repeats() -> None:
    """Each call takes the next reply; after the last, the last one repeats."""
    providers = ProviderRegistry(environ={}, clock=FakeClock())
    client = providers.client("scripted", script=["one", "two"])
    contents = [c.content for c in await replies(client, 4)]
    assert contents == ["one", "two", "two", "two"]


async def test_tool_calls_from_mappings_and_objects() -> None:
    """Dict replies (toolCalls or tool_calls) and ScriptReply-like objects both give tool calls."""
    script: list[ScriptReplyLike] = [
        {"toolCalls": [{"name": "search", "arguments": {"q": "fugue"}}]},
        {"content": "two calls", "tool_calls": [{"name": "a"}, {"name": "b", "arguments": "{bad"}]},
        _ReplyObject(tool_calls=[_ToolCallObject("submit_result", {"done": True})]),
        _ReplyObject(content="done"),
    ]
    client = ProviderRegistry(environ={}).client("scripted", script=script)
    first, second, third, fourth = await replies(client, 4)
    assert first.tool_calls == (ModelToolCall("call_1_1", "search", '{"q":"fugue"}'),)
    assert first.content is None
    assert first.finish_reason == "tool_calls"
    assert second.content == "two calls"
    assert second.tool_calls == (
        ModelToolCall("call_2_1", "a", "{}"),
        ModelToolCall("call_2_2", "b", "{bad"),
    )
    assert third.tool_calls == (ModelToolCall("call_3_1", "submit_result", '{"done":true}'),)
    assert (fourth.content, fourth.tool_calls, fourth.finish_reason) == ("done", (), "stop")


async def test_usage_is_estimated_from_text_length() -> None:
    """Prompt and completion tokens are about a quarter of the characters."""
    client = ProviderRegistry(environ={}).client("scripted", script=["y" * 20])
    completion = await client.complete(HI)
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (10, 5)
    assert completion.model == "demo"
    assert completion.attempts == 1


async def test_each_key_keeps_its_own_position() -> None:
    """Clients are cached per key: the same key resumes, another key starts over."""
    providers = ProviderRegistry(environ={})
    writer = providers.client("scripted", script=["w1", "w2"], key="writer")
    assert (await writer.complete(HI)).content == "w1"
    critic = providers.client("scripted", script=["c1", "c2"], key="critic")
    assert (await critic.complete(HI)).content == "c1"
    again = providers.client("scripted", script=["ignored"], key="writer")
    assert again is writer
    assert (await again.complete(HI)).content == "w2"


async def test_a_resumed_run_skips_the_replies_its_finished_work_had() -> None:
    """Each call gets the lowest position not taken, and says which it was."""
    providers = ProviderRegistry(environ={})
    # Replies 1, 2 and 4 went to steps that finished; 3 to one that was in flight.
    providers.resume_scripts({"writer": {0, 1, 3}})
    script = ["w1", "w2", "w3", "w4", "w5"]
    writer = providers.client("scripted", script=script, key="writer")
    answers = await replies(writer, 3)
    assert [(c.content, c.script_position) for c in answers] == [
        ("w3", 2),
        ("w5", 4),
        ("w5", 5),  # past the end the last reply repeats; the position goes on
    ]
    other = providers.client("scripted", script=["c1"], key="critic")
    assert (await other.complete(HI)).script_position == 0


async def test_an_http_model_gives_no_position(llm_server: StartLLMServer) -> None:
    """A real provider's completion has no script position, in a resumed run too."""
    server = llm_server([ServerRule(["ok"])])
    async with ProviderRegistry(environ=server.environ()) as providers:
        providers.resume_scripts({"": {0}})
        completion = await providers.client("openai").complete(HI)
    assert (completion.content, completion.script_position) == ("ok", None)


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (None, "needs a script"),
        ([], "needs a script"),
        ([{"text": "hi"}], "script reply 1: unknown key(s) text"),
        (["ok", {"toolCalls": [{"arguments": {}}]}], "script reply 2: toolCalls[0] has no name"),
        ([{"toolCalls": "search"}], "toolCalls must be a list"),
        ([{"content": 5}], "content must be a string"),
        ([{"toolCalls": [{"name": "f", "arguments": 3}]}], "arguments must be an object"),
        ([42], "expected a string or {content, toolCalls}, got int"),
    ],
)
def test_bad_scripts_are_config_errors(script: Any, expected: str) -> None:
    """An empty or malformed script is reported when the client is made, naming the reply."""
    with pytest.raises(LLMConfigError, match=re.escape(expected)):
        ProviderRegistry(environ={}).client("scripted", script=script)


async def test_accepts_the_workflow_script_types() -> None:
    """The workflow's own ScriptReply and ScriptToolCall work as script entries."""
    script: list[str | ScriptReplyLike] = [
        ScriptReply(tool_calls=[ScriptToolCall(name="send_message", arguments={"text": "hi"})]),
        "plain",
    ]
    client = ProviderRegistry(environ={}).client("scripted", script=script)
    first, second = await replies(client, 2)
    assert first.tool_calls == (ModelToolCall("call_1_1", "send_message", '{"text":"hi"}'),)
    assert second.content == "plain"
