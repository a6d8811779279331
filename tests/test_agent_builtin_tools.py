"""Agents get zenflow's built-in tools: bash, read, write, glob, grep.

zenflow's rule: no ``tools`` key means all of them; ``tools`` names the ones
offered; ``disallowedTools`` takes away. Every path stays inside the
workflow's directory, and a failure is an answer to the model, not the end of
its step. zenflow's own examples declare ``tools: [write, read, bash]`` and
were offered nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cadenza.testing import RequestMatch, ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import run_flow
from tests.conftest import WriteFlow

FLOW = """
name: coder
agents:
  coder:
    model: "openai:coder"
{tools}
steps:
  - id: code
    agent: coder
    instructions: "Write and run it."
"""


def offered(request: Any) -> set[str]:
    return {tool["function"]["name"] for tool in request.body.get("tools", [])}


def tool_answers(request: Any) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


async def test_an_agent_writes_runs_and_reads_inside_its_directory(
    write_flow: WriteFlow, model_server: StartLLMServer, tmp_path: Path
) -> None:
    path = write_flow(FLOW.format(tools=""))
    (tmp_path / "secret.txt").write_text("outside the tree")
    calls = [
        ServerToolCall("write", {"path": "out/hello.py", "content": "print('hi')\n"}),
        ServerToolCall("bash", {"command": "python3 out/hello.py && exit 3"}),
        ServerToolCall("read", {"path": "out/hello.py"}),
        ServerToolCall("read", {"path": "../secret.txt"}),
    ]
    rules = [
        ServerRule(["done"], match=RequestMatch(model="coder", last_role="tool")),
        ServerRule([ServerReply("", tool_calls=calls)], match=RequestMatch(model="coder")),
    ]
    server = model_server(rules)
    result = await run_flow(path)
    first, second = server.requests
    assert result.status == "completed", result.error
    assert offered(first) >= {"bash", "read", "write", "glob", "grep"}
    assert (path.parent / "out" / "hello.py").read_text() == "print('hi')\n"
    wrote, ran, read, refused = tool_answers(second)
    assert wrote == "wrote 12 bytes to out/hello.py"
    assert "CommandFailed: exit code 3" in json.loads(ran)["message"]
    assert "hi" in json.loads(ran)["message"]  # the output comes back with the failure
    assert read == "print('hi')\n"
    assert "leads outside the workflow's directory" in json.loads(refused)["message"]
    assert "outside the tree" not in json.dumps(second.body)


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        ("    tools: [read]", {"read"}),
        ("    tools: [write, read, bash]", {"write", "read", "bash"}),
        ("    disallowedTools: [bash]", {"read", "write", "glob", "grep"}),
    ],
)
async def test_tools_and_disallowed_tools_decide_what_is_offered(
    write_flow: WriteFlow, model_server: StartLLMServer, tools: str, expected: set[str]
) -> None:
    path = write_flow(FLOW.format(tools=tools))
    server = model_server([ServerRule(["done"])])
    result = await run_flow(path)
    (request,) = server.requests
    assert result.status == "completed", result.error
    builtins = {"bash", "read", "write", "glob", "grep"}
    assert offered(request) & builtins == expected
