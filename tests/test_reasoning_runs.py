"""Runs with reasoning models: ``thinking`` per agent or ``--thinking``, the reasoning
streamed as zenflow's ``output`` events with ``reasoning: true``, never the step's output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from cadenza import Runtime
from cadenza.testing import ServerReply, ServerRule, ServerToolCall, replay_run
from cadenza.testing._llm_wire import thinking_signature
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import assert_refused, cadenza
from tests.conftest import WriteFlow

THOUGHT = " ".join(f"step{n} of the argument," for n in range(120))  # 2,591 characters
ANSWER = "Forty-two."

TWO_AGENTS = """
name: thinkers
agents:
  deep: {model: "anthropic:claude-test", prompt: "You are deep."}
  quick: {model: "anthropic:claude-test", prompt: "You are quick.", thinking: low}
steps:
  - id: ponder
    agent: deep
    instructions: "What is six times seven?"
  - id: glance
    agent: quick
    instructions: "What is six times seven?"
"""


def _lines(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def _thinking_by_agent(bodies: list[dict[str, Any]]) -> dict[str, Any]:
    return {body["system"]: body.get("thinking") for body in bodies}


def test_thinking_on_the_command_line_is_the_default_an_agents_own_wins(
    model_server: StartLLMServer, write_flow: WriteFlow, tmp_path: Path
) -> None:
    """``--thinking high`` reaches the agent that sets none (Anthropic's budget of 16,384);
    the agent with ``thinking: low`` keeps its own, as an agent's model wins over --model.
    The reasoning streams as ``output`` events marked ``reasoning``; the output is the answer."""
    server = model_server(
        [ServerRule([ServerReply(content=ANSWER, reasoning=THOUGHT)])], wire="anthropic"
    )
    path = str(write_flow(TWO_AGENTS))
    proc = cadenza("run", path, "--thinking", "high", "--events", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _thinking_by_agent([r.body for r in server.requests]) == {
        "You are deep.": {"type": "enabled", "budget_tokens": 16384},
        "You are quick.": {"type": "enabled", "budget_tokens": 1024},
    }
    events = _lines(proc.stderr)
    requested = {
        e["agent"]: e["data"]["thinking"]
        for e in events
        if e["type"] == "agent_turn" and e["data"]["phase"] == "request"
    }
    assert requested == {"deep": "high", "quick": "low"}
    for agent in ("deep", "quick"):
        streamed = [e for e in events if e["type"] == "output" and e["agent"] == agent]
        thought = [e for e in streamed if e.get("reasoning") is True]
        answer = [e for e in streamed if "reasoning" not in e]
        assert "".join(e["delta"] for e in thought) == THOUGHT
        assert "".join(e["delta"] for e in answer) == ANSWER
        assert thought[-1]["done"] is True
        assert answer[-1]["done"] is True
        assert streamed.index(thought[-1]) < streamed.index(answer[0])  # it ends, then the answer
    result = json.loads(proc.stdout)
    assert {step["content"] for step in result["steps"].values()} == {ANSWER}

    plain = cadenza("run", path, "--json", cwd=tmp_path)  # no --thinking: the provider's default
    assert plain.returncode == 0, plain.stderr
    assert _thinking_by_agent([r.body for r in server.requests[2:]]) == {
        "You are deep.": None,
        "You are quick.": {"type": "enabled", "budget_tokens": 1024},
    }


TOOL_LOOP = """
name: looked-up
agents:
  scholar:
    model: "anthropic:claude-test"
    thinking: medium
    tools: ["HANDLERS:lookup"]
steps:
  - id: define
    agent: scholar
    instructions: "What is a cadenza?"
"""


async def test_an_agents_tool_loop_sends_its_signed_thinking_back(
    model_server: StartLLMServer, write_flow: WriteFlow, tmp_path: Path
) -> None:
    """The agent keeps the thinking block of the turn that called a tool and sends it back,
    signed, ahead of the tool call (Anthropic refuses the loop otherwise); the stored run
    has the answer, and no event the store keeps holds the reasoning."""
    server = model_server(
        [
            ServerRule(
                [
                    ServerReply(
                        tool_calls=[ServerToolCall("lookup", {"word": "cadenza"})],
                        reasoning=THOUGHT,
                    ),
                    ServerReply(content=ANSWER, reasoning="Now I know."),
                ]
            )
        ],
        wire="anthropic",
    )
    path = write_flow(
        TOOL_LOOP,
        handlers='''
        def lookup(word: str) -> str:
            """Looks a word up."""
            return "a solo passage"
        ''',
    )
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        handle = await runtime.start(path)
        result = await handle.result()
        stored = await runtime.store.events(handle.run_id)
    assert result.status == "completed", result.error
    assert result.output == ANSWER
    second = server.requests[1].body
    assert second["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert second["max_tokens"] == 4096 + 4096
    turn = second["messages"][1]
    assert turn["role"] == "assistant"
    assert turn["content"][0] == {
        "type": "thinking",
        "thinking": THOUGHT,
        "signature": thinking_signature(THOUGHT, 1),
    }
    assert turn["content"][1]["type"] == "tool_use"
    kept = msgspec.json.encode(stored).decode()
    assert "step0 of the argument" not in kept
    assert "Now I know" not in kept


SCRIPTED = """
name: scripted-thoughts
agents:
  oracle:
    model: "scripted:oracle"
    script:
      - {content: "42", reasoning: "Six sevens make forty-two."}
  mute:
    model: "scripted:mute"
    thinking: "off"
    script:
      - {content: "42", reasoning: "Never shown."}
steps:
  - id: ask
    agent: oracle
    instructions: "Six times seven?"
  - id: hush
    agent: mute
    instructions: "Six times seven?"
"""


def test_a_scripted_reply_streams_its_reasoning_offline(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """A script's ``reasoning`` shows as a reasoning model's would, with no network; an
    agent whose thinking is off shows none. Either way the output is the content."""
    proc = cadenza("run", str(write_flow(SCRIPTED)), "--events", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    thoughts = [(e["agent"], e["delta"]) for e in _lines(proc.stderr) if e.get("reasoning")]
    assert thoughts == [("oracle", "Six sevens make forty-two.")]
    steps = json.loads(proc.stdout)["steps"]
    assert steps["ask"]["content"] == steps["hush"]["content"] == "42"


def test_an_unknown_level_is_refused_with_what_was_meant(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """``thinking: extreme`` is no level; validate names the levels and the one meant."""
    flow = SCRIPTED.replace('thinking: "off"', "thinking: extreme")
    proc = cadenza("validate", str(write_flow(flow)), cwd=tmp_path)
    assert_refused(proc, "agents.mute.thinking", "'extreme' is not one of", "did you mean 'high'?")
    typo = cadenza("validate", str(write_flow(flow.replace("extreme", "meduim"))), cwd=tmp_path)
    assert_refused(typo, "did you mean 'medium'?")
    run = cadenza("run", str(write_flow(SCRIPTED)), "--thinking", "extreme", cwd=tmp_path)
    assert_refused(run, "--thinking", "invalid choice: 'extreme'")


ONE_AGENT = """
name: one
agents:
  writer: {model: "openai:o-test"}
steps:
  - id: write
    agent: writer
    instructions: "Say hello."
"""


async def test_a_run_with_a_default_level_replays_offline_at_that_level(
    model_server: StartLLMServer, write_flow: WriteFlow, tmp_path: Path
) -> None:
    """The level is part of what a model call asked: the replay finds the run's in its
    record and matches; told another level, it differs at the first call."""
    server = model_server([ServerRule([ServerReply(content=ANSWER, reasoning=THOUGHT)])])
    path = write_flow(ONE_AGENT)
    store = tmp_path / "runs.db"
    async with Runtime(store=store, default_thinking="high") as runtime:
        result = await (await runtime.start(path, run_id="r-1")).result()
    assert result.status == "completed", result.error
    assert server.requests[0].body["reasoning_effort"] == "high"
    server.stop()  # the replay reaches no network
    assert (await replay_run(store, "r-1")).difference is None
    differs = await replay_run(store, "r-1", default_thinking="low")
    assert differs.difference is not None
