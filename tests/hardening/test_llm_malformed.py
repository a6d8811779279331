"""Malformed model responses from a real local server: clear errors, nothing recorded lost.

Each case runs ``before`` (a command) and then an agent step against
`ScriptedLLMServer` answering with a raw ``body`` or ``status``: truncated JSON,
HTML, wrong tool-call shapes, a 9 MB body, JSON nested 10,000 deep. The run must
end ``failed`` with the provider's precise error at the agent's address; the store
(SQLite, reopened) still holds ``before`` as completed and the whole event stream.
Shapes a model can legitimately get wrong (bad tool arguments, unknown tools) go
back to the model as tool errors, and the run completes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadenza import Runtime
from cadenza.testing import ScriptedLLMServer, ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from tests.conftest import WriteFlow

FLOW = """
name: malformed
agents:
  asker:
    model: "openai:gpt-test"
steps:
  - id: before
    command: printf kept
  - id: ask
    dependsOn: [before]
    agent: asker
    instructions: "Answer."
"""

GOOD = json.dumps(
    {
        "id": "x",
        "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
)


def choice(message: object) -> str:
    return json.dumps({"choices": [{"message": message}]})


# case -> (reply, words the error message must hold)
BROKEN: dict[str, tuple[ServerReply, list[str]]] = {
    "truncated": (ServerReply(body=GOOD[: len(GOOD) // 2]), ["malformed chat completion"]),
    "html": (ServerReply(body="<html><body>502 Bad Gateway</body></html>"), ["malformed"]),
    "empty-body": (ServerReply(body=""), ["malformed"]),
    "no-choices": (ServerReply(body=json.dumps({"choices": []})), ["no choices"]),
    "choices-not-a-list": (ServerReply(body=json.dumps({"choices": {}})), ["$.choices"]),
    "content-a-number": (ServerReply(body=choice({"content": 5})), ["content"]),
    "tool-calls-a-dict": (
        ServerReply(body=choice({"content": None, "tool_calls": {"name": "x"}})),
        ["tool_calls"],
    ),
    "tool-call-without-function": (
        ServerReply(body=choice({"tool_calls": [{"id": "1", "type": "function"}]})),
        ["function"],
    ),
    "tool-name-a-number": (
        ServerReply(body=choice({"tool_calls": [{"id": "1", "function": {"name": 7}}]})),
        ["name"],
    ),
    "arguments-a-list": (
        ServerReply(
            body=choice({"tool_calls": [{"id": "1", "function": {"name": "x", "arguments": [1]}}]})
        ),
        ["arguments"],
    ),
    "usage-a-string": (
        ServerReply(
            body=json.dumps({"choices": [{"message": {}}], "usage": {"prompt_tokens": "many"}})
        ),
        ["prompt_tokens"],
    ),
    "negative-usage": (
        ServerReply(
            body=json.dumps(
                {"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": -(10**9)}}
            )
        ),
        ["prompt_tokens", ">= 0"],
    ),
    "nine-megabytes": (ServerReply(content="x" * (9 * 1024 * 1024)), ["byte limit"]),
    "nested-10000-deep": (
        ServerReply(
            body='{"choices": [{"message": {"content": ' + "[" * 10_000 + "]" * 10_000 + "}}]}"
        ),
        ["malformed"],
    ),
    "http-400-garbage": (ServerReply(status=400, body="\x00\x01 not json"), ["HTTP 400"]),
}


async def run_against(
    replies: list[ServerReply],
    tmp_path: Path,
    write_flow: WriteFlow,
    model_server: StartLLMServer,
) -> tuple[str, ScriptedLLMServer]:
    """Runs FLOW against a server answering ``replies`` in order; returns the run id."""
    path = write_flow(FLOW)
    server = model_server([ServerRule(replies)])
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        handle = await runtime.start(path)
        await handle.result()
    return handle.run_id, server


@pytest.mark.parametrize("case", sorted(BROKEN))
async def test_malformed_responses_fail_the_step_clearly(
    case: str, tmp_path: Path, write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """The agent step fails with the provider's words; the store keeps everything before it."""
    reply, words = BROKEN[case]
    run_id, server = await run_against([reply], tmp_path, write_flow, model_server)
    assert len(server.requests) == 1, "a malformed answer is not retried"
    async with Runtime(store=tmp_path / "runs.db") as reopened:
        row = await reopened.get_run(run_id)
        steps = await reopened.store.steps(run_id)
        events = await reopened.stored_events(run_id)
    assert row.status == "failed"
    assert row.result is not None
    assert row.result.error is not None
    error = row.result.error
    assert error.address == "ask"
    assert error.type in ("LLMResponseError", "LLMHTTPError"), error
    for word in words:
        assert word in error.message, error.message
    assert len(error.message) < 2_000, "an error message never carries the whole body"
    assert steps["before"].status == "completed"
    assert steps["before"].content == "kept"
    assert steps["ask"].status == "failed"
    types = [event.type for event in events]
    assert types[0] == "workflow_start"
    assert types[-1] == "workflow_end"
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "no event lost"


RECOVERABLE = {
    "arguments-not-json": ServerToolCall("send_message", "{not json"),
    "arguments-not-an-object": ServerToolCall("send_message", "[1, 2]"),
    "unknown-tool": ServerToolCall("rm_rf", {"path": "/"}),
    "missing-argument": ServerToolCall("send_message", {}),
}


@pytest.mark.parametrize("case", sorted(RECOVERABLE))
async def test_bad_tool_calls_go_back_to_the_model(
    case: str, tmp_path: Path, write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """A bad tool call becomes a tool error in the conversation; the model's next answer wins."""
    replies = [ServerReply(tool_calls=[RECOVERABLE[case]]), ServerReply(content="recovered")]
    run_id, server = await run_against(replies, tmp_path, write_flow, model_server)
    async with Runtime(store=tmp_path / "runs.db") as reopened:
        row = await reopened.get_run(run_id)
    assert row.status == "completed", row.result
    assert row.result is not None
    assert row.result.steps["ask"].content == "recovered"
    second = server.requests[1].messages
    tool_message = next(m for m in second if m.get("role") == "tool")
    assert '"status":"error"' in tool_message["content"].replace(" ", "")
