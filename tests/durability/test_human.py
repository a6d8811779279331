"""Human input (SPEC 2.6): a run waits for a person, takes a checked answer, and goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cadenza import RunNotFound, Runtime
from cadenza.errors import SignalRejected
from cadenza.testing import RequestMatch, ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import cadenza, run_flow, run_on
from tests.conftest import StoreFactory, WriteFlow, assert_no_password

APPROVAL = """
name: approval
steps:
  - id: draft
    command: "printf v1"
  - id: approve
    dependsOn: [draft]
    human:
      prompt: "Ship {{ steps.draft.content }}?"
      schema:
        type: object
        properties: {ok: {type: boolean}, note: {type: string}}
        required: [ok]
  - id: ship
    dependsOn: [approve]
    condition: "steps.approve.result.ok"
    command: "echo shipped"
"""

ROUNDS = """
name: rounds
steps:
  - id: rounds
    loop:
      maxIterations: 2
      steps:
        - id: ask
          human: {prompt: "Number for round {{ iteration }}?", schema: {type: integer}}
        - id: double
          dependsOn: [ask]
          handler: "HANDLERS:double"
"""

DOUBLE = """
def double(context):
    return {"value": context.steps["ask"].result * 2}
"""


def test_a_person_answers_through_the_command_line(
    tmp_path: Path, write_flow: WriteFlow, durable_store_factory: StoreFactory
) -> None:
    """run exits 3 saying how to answer; a bad answer exits 2, recording nothing; resume ends it.

    On SQLite and on PostgreSQL, whose URL's password is never printed.
    """
    flow = write_flow(APPROVAL)
    spec = durable_store_factory.spec
    assert spec is not None
    store = ("--store", spec)
    waiting = cadenza("run", str(flow), "--run-id", "r", *store, cwd=tmp_path)
    assert waiting.returncode == 3, waiting.stderr
    assert "waiting at approve: Ship v1?" in waiting.stdout
    assert "cadenza signal r approve --data JSON" in waiting.stdout
    assert_no_password(spec, waiting.stdout, waiting.stderr)

    bad = cadenza("signal", "r", "approve", "--data", '{"ok": "yes"}', *store, cwd=tmp_path)
    assert bad.returncode == 2
    assert "ok: 'yes' is not of type 'boolean'" in bad.stderr
    assert "Traceback" not in bad.stderr
    shown = json.loads(cadenza("runs", "show", "r", *store, cwd=tmp_path).stdout)
    assert shown["status"] == "waiting"
    assert shown["steps"]["approve"]["status"] == "waiting"

    answer = '{"ok": true, "note": "fine"}'
    good = cadenza("signal", "r", "approve", "--data", answer, *store, cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    resumed = cadenza("resume", "r", "--json", *store, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert result["status"] == "completed"
    assert result["steps"]["approve"]["result"] == {"ok": True, "note": "fine"}
    assert json.loads(result["steps"]["approve"]["content"]) == {"ok": True, "note": "fine"}
    assert result["steps"]["ship"]["content"] == "shipped\n"

    late = cadenza("signal", "r", "approve", "--data", answer, *store, cwd=tmp_path)
    assert late.returncode == 2
    assert "has finished" in late.stderr
    listed = cadenza("runs", "list", *store, cwd=tmp_path)
    assert listed.stdout.split()[0] == "r"
    for said in (good, resumed, late, listed):
        assert_no_password(spec, said.stdout, said.stderr)


async def test_each_iteration_of_a_loop_waits_for_its_own_answer(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """One question per address: round 0 is answered, resumed, then round 1 waits."""
    flow = write_flow(ROUNDS, handlers=DOUBLE)
    async with run_on(tmp_path / "runs.db", flow) as (runtime, first):
        assert first.status == "waiting"
        assert first.output is None
        questions = await runtime.pending_inputs("r")
        assert questions == {
            "rounds.0.ask": {"prompt": "Number for round 0?", "schema": {"type": "integer"}}
        }
        await runtime.signal("r", "rounds.0.ask", 3)
        second = await runtime.resume("r")
        assert (await second.result()).status == "waiting"
        assert list(await runtime.pending_inputs("r")) == ["rounds.1.ask"]
        await second.signal("rounds.1.ask", 4)
        third = await runtime.resume("r")
        types = [event.type async for event in third.events()]
        result = await third.result()
    assert result.status == "completed"
    assert result.steps["rounds.0.double"].result == {"value": 6}
    assert result.steps["rounds.1.double"].result == {"value": 8}
    # One stream from the first event to the last, through both pauses.
    assert types.count("workflow_end") == 3
    assert types[-1] == "workflow_end"
    assert types.count("signal_received") == 2


async def test_other_branches_finish_before_the_run_waits(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """A waiting step holds back only what depends on it."""
    flow = write_flow(
        """
        name: branches
        steps:
          - id: ask
            human: {prompt: "Proceed?"}
          - id: other
            command: "echo independent"
          - id: after
            dependsOn: [ask]
            command: "echo after"
        """
    )
    result = await run_flow(flow, run_id="r", store=tmp_path / "runs.db")
    assert result.status == "waiting"
    assert result.steps["other"].status == "completed"
    assert result.steps["ask"].status == "waiting"
    assert "after" not in result.steps


async def test_an_answer_nobody_asked_for_is_refused(tmp_path: Path, write_flow: WriteFlow) -> None:
    """Signalling an address with no pending question, or an unknown run, records nothing."""
    flow = write_flow(APPROVAL)
    async with run_on(tmp_path / "runs.db", flow) as (runtime, _):
        with pytest.raises(
            SignalRejected, match="no input pending at 'draft'; it waits at approve"
        ):
            await runtime.signal("r", "draft", {"ok": True})
        with pytest.raises(RunNotFound):
            await runtime.signal("missing", "approve", {"ok": True})
        assert list(await runtime.pending_inputs("r")) == ["approve"]


async def test_a_message_for_a_step_not_yet_started_survives_the_pause(
    tmp_path: Path,
    write_flow: WriteFlow,
    model_server: StartLLMServer,
) -> None:
    """A message the coordinator forwarded while the run waited reaches the step after resume."""
    server = model_server(
        [
            ServerRule(["noted"], match=RequestMatch(last_role="tool")),
            ServerRule(
                [
                    ServerReply(
                        content="said hello",
                        tool_calls=[ServerToolCall("send_message", {"text": "hello from a"})],
                    )
                ],
                match=RequestMatch(user="Say hello."),
            ),
            ServerRule(
                [
                    ServerReply(
                        tool_calls=[
                            ServerToolCall(
                                "forward_to_agent",
                                {"target_step_id": "reader", "text": "psst, reader"},
                            )
                        ]
                    )
                ],
                match=RequestMatch(user="Message from hello"),
            ),
            ServerRule(["read it"], match=RequestMatch(user="Read your inbox.")),
        ]
    )
    flow = write_flow(
        """
        name: mail
        coordinator: {agent: narrator}
        agents:
          narrator: {model: "openai:gpt-test"}
          writer: {model: "openai:gpt-test", tools: [send_message]}
        steps:
          - id: hello
            agent: writer
            instructions: "Say hello."
          - id: gate
            dependsOn: [hello]
            human: {prompt: "Go on?"}
          - id: reader
            dependsOn: [gate]
            agent: writer
            instructions: "Read your inbox."
        """
    )
    paused = await run_flow(flow, run_id="r", store=tmp_path / "runs.db")
    assert paused.status == "waiting"
    asked = len(server.requests)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        await runtime.signal("r", "gate", None)
        result = await (await runtime.resume("r")).result()
    assert result.status == "completed"
    later = server.requests[asked:]
    assert len(later) == 1  # the reader's one turn: nobody before it is asked again
    assert "- from coordinator (info): psst, reader" in json.dumps(later[0].messages)
    assert [(m.from_, m.to, m.text) for m in result.messages] == [
        ("hello", "coordinator", "hello from a"),
        ("coordinator", "reader", "psst, reader"),
    ]
