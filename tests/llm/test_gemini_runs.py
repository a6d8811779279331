"""Google's wires inside a real run: tools called, a structured result, the usage counted.

One workflow, three providers (``google``, ``vertex``, ``vertex-anthropic``), each
against a scripted server of its own wire on 127.0.0.1. The agent reads two files
with the ``read`` tool in one turn and then submits its ``resultSchema`` result
through ``submit_result``; a run streams its model calls, so the stream's tool
calls are what is assembled here.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from cadenza.testing import RequestMatch, ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import cadenza, run_flow
from tests.conftest import WriteFlow

SCHEMA = {
    "type": "object",
    "properties": {"word": {"type": "string"}, "senses": {"type": "integer"}},
    "required": ["word", "senses"],
    "additionalProperties": False,
}
FLOW = """
name: glossary
agents:
  lexicographer:
    model: "{spec}"
    prompt: "You define words."
    tools: [read]
    resultSchema: {schema}
steps:
  - id: define
    agent: lexicographer
    instructions: "Define the word in a.txt, with the senses in b.txt."
"""
READS = [ServerToolCall("read", {"path": "a.txt"}), ServerToolCall("read", {"path": "b.txt"})]
RULES = [
    ServerRule(
        [
            ServerReply(
                tool_calls=[ServerToolCall("submit_result", {"word": "cadenza", "senses": 2})],
                usage=(40, 6),
            )
        ],
        match=RequestMatch(last_role="tool", last="a solo passage"),
        name="submit",
    ),
    ServerRule([ServerReply("Reading both.", tool_calls=READS, usage=(30, 5))], name="read"),
]


def gemini_turns(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's turn of calls and the user's turn of their results."""
    *_, calls, results = body["contents"]
    return calls, results


@pytest.mark.parametrize(
    ("provider", "model", "wire"),
    [
        ("google", "gemini-2.5-flash", "gemini"),
        ("vertex", "gemini-2.5-pro", "gemini"),
        ("vertex-anthropic", "claude-sonnet-4@20250514", "vertex-anthropic"),
    ],
)
async def test_a_tool_round_trip_and_a_structured_result_in_a_run(
    write_flow: WriteFlow,
    model_server: StartLLMServer,
    provider: str,
    model: str,
    wire: str,
) -> None:
    path = write_flow(FLOW.format(spec=f"{provider}/{model}", schema=json.dumps(SCHEMA)))
    (path.parent / "a.txt").write_text("cadenza: a solo passage")
    (path.parent / "b.txt").write_text("senses: 2")
    server = model_server(RULES, wire=wire)  # type: ignore[arg-type]

    result = await run_flow(path)

    assert result.status == "completed", result.error
    assert result.steps["define"].result == {"word": "cadenza", "senses": 2}
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (70, 11)
    assert result.usage.llm_calls == 2
    first, second = server.requests
    assert [first.rule, second.rule] == ["read", "submit"]
    assert first.model == second.model == model
    if provider == "vertex-anthropic":
        assert_claude_on_vertex(first.path, second.body, model)
    else:
        assert_gemini(provider, first.path, second.body, model)


def assert_gemini(provider: str, path: str, body: dict[str, Any], model: str) -> None:
    where = (
        "/v1beta"
        if provider == "google"
        else "/v1/projects/test-project/locations/us-central1/publishers/google"
    )
    assert path == f"{where}/models/{model}:streamGenerateContent?alt=sse"
    (tools,) = body["tools"]
    declared = {d["name"]: d for d in tools["functionDeclarations"]}
    # resultSchema goes as JSON Schema: additionalProperties and all.
    assert declared["submit_result"]["parametersJsonSchema"] == SCHEMA
    assert "parameters" not in declared["submit_result"]
    calls, results = gemini_turns(body)
    assert calls == {
        "role": "model",
        "parts": [
            {"text": "Reading both."},
            {
                "functionCall": {"name": "read", "args": {"path": "a.txt"}},
                "thoughtSignature": "c2lnbmF0dXJl-1",  # the server's: sent back as it came
            },
            {"functionCall": {"name": "read", "args": {"path": "b.txt"}}},
        ],
    }
    assert results == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "read", "response": {"output": text}}}
            for text in ("cadenza: a solo passage", "senses: 2")
        ],
    }


def assert_claude_on_vertex(path: str, body: dict[str, Any], model: str) -> None:
    where = "/v1/projects/test-project/locations/us-central1/publishers/anthropic"
    assert path == f"{where}/models/{model}:streamRawPredict"
    assert "model" not in body
    assert body["anthropic_version"] == "vertex-2023-10-16"
    assert body["stream"] is True
    tools = {t["name"]: t for t in body["tools"]}
    assert tools["submit_result"]["input_schema"] == SCHEMA
    calls, results = body["messages"][-2:]
    assert [b["type"] for b in calls["content"]] == ["text", "tool_use", "tool_use"]
    answers = [(b["type"], b["content"]) for b in results["content"]]
    assert answers == [
        ("tool_result", "cadenza: a solo passage"),
        ("tool_result", "senses: 2"),
    ]


@pytest.mark.parametrize(
    ("spec", "environ", "warning"),
    [
        (
            "google/gemini-2.5-flash",
            {},
            "GOOGLE_GENERATIVE_AI_API_KEY (or GEMINI_API_KEY) is not set",
        ),
        ("google/gemini-2.5-flash", {"GEMINI_API_KEY": "AIza-test-key"}, None),
        ("vertex:gemini-2.5-pro", {}, None),  # credentials: at the call; the project: at the run
        ("vertex-anthropic/claude-x", {}, None),
    ],
)
def test_cadenza_validate_takes_the_google_providers(
    write_flow: WriteFlow, spec: str, environ: dict[str, str], warning: str | None
) -> None:
    """The three resolve at load; a Gemini key in either variable quiets the warning."""
    path = write_flow(FLOW.format(spec=spec, schema=json.dumps(SCHEMA)))
    clean = {k: v for k, v in os.environ.items() if "GEMINI" not in k and "GOOGLE" not in k}
    proc = cadenza("validate", str(path), cwd=path.parent, env={**clean, **environ})
    assert proc.returncode == 0, proc.stderr
    if warning is None:
        assert "warning" not in proc.stderr
    else:
        assert f"agents.lexicographer.model: warning: {warning}" in proc.stderr
