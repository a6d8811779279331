"""Exact resume inside an agent step: no recorded model or tool call is made again.

An agent makes ten model calls; each asks the built-in ``bash`` tool to append
its number to a file, and the tenth submits the result too. The run is killed
with SIGKILL at a call boundary (just after a tool call's record, and the model
call's before it, are durable: ``call.after_record``) and resumed: the model
server sees exactly ten requests in all, and the file holds each line once.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cadenza.testing import ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import cadenza
from tests.conftest import WriteFlow

pytestmark = pytest.mark.timeout(240)

CALLS = 10

FLOW = """
name: appender
agents:
  appender:
    model: openai:gpt-test
    tools: [bash]
    resultSchema: {type: object}
steps:
  - id: append
    agent: appender
    instructions: "Append the numbers."
"""


def replies() -> list[ServerReply]:
    """Call k asks bash to append k; the last one submits the result as well."""
    scripted = []
    for k in range(1, CALLS + 1):
        calls = [ServerToolCall("bash", {"command": f"echo {k} >> lines.txt"})]
        if k == CALLS:
            calls.append(ServerToolCall("submit_result", {"done": True}))
        scripted.append(ServerReply(content=f"call {k}", tool_calls=calls))
    return scripted


def killed_at(
    tmp_path: Path, write_flow: WriteFlow, boundary: int, *, store: str = "runs.db"
) -> None:
    """Runs the flow as run r-1 and kills it at its ``boundary``-th recorded call."""
    write_flow(FLOW)
    env = {**os.environ, "CADENZA_FAILPOINT": f"call.after_record:{boundary}"}
    run = ("run", "flow.yaml", "--store", store, "--run-id", "r-1")
    proc = cadenza(*run, cwd=tmp_path, env=env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def lines(tmp_path: Path) -> list[str]:
    path = tmp_path / "lines.txt"
    return path.read_text().split() if path.exists() else []


def stored_events(tmp_path: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(tmp_path / "runs.db") as connection:
        rows = connection.execute("SELECT body FROM events WHERE run_id = 'r-1' ORDER BY seq")
        stored = [json.loads(body) for (body,) in rows]
    # A row holds one event, or a pack of a commit's events (a JSON array).
    return [event for row in stored for event in (row if isinstance(row, list) else [row])]


@pytest.mark.parametrize("boundary", range(1, CALLS + 1))
def test_a_kill_at_each_call_boundary_repeats_no_call(
    model_server: StartLLMServer, write_flow: WriteFlow, tmp_path: Path, boundary: int
) -> None:
    """Killed once the ``boundary``-th model call and the tool it asked for were
    recorded, then resumed: ten model requests in all, ten lines, each once."""
    server = model_server([ServerRule(replies())])
    killed_at(tmp_path, write_flow, boundary)
    assert server.request_count == boundary
    assert lines(tmp_path) == [str(k) for k in range(1, boundary + 1)]

    resumed = cadenza("resume", "r-1", "--store", "runs.db", cwd=tmp_path)

    assert resumed.returncode == 0, resumed.stderr
    assert server.request_count == CALLS  # CALLS - boundary more, none sent twice
    assert lines(tmp_path) == [str(k) for k in range(1, CALLS + 1)]
    replayed = [e["data"] for e in stored_events(tmp_path) if e["type"] == "calls_replayed"]
    assert replayed == [{"calls": 2 * boundary, "model": boundary, "tools": boundary}]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_issues_case_five_calls_then_five_more(
    model_server: StartLLMServer,
    write_flow: WriteFlow,
    tmp_path: Path,
    backend: str,
    request: pytest.FixtureRequest,
) -> None:
    """Killed just after its 5th model call (and the tool it asked for): the resume makes
    exactly 5 more, on SQLite and on PostgreSQL."""
    store = "runs.db" if backend == "sqlite" else request.getfixturevalue("postgres_url")
    server = model_server([ServerRule(replies())])
    killed_at(tmp_path, write_flow, 5, store=store)  # m1 t1 ... m5 t5 recorded
    assert server.request_count == 5
    resumed = cadenza("resume", "r-1", "--store", store, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert server.request_count - 5 == 5
    assert lines(tmp_path) == [str(k) for k in range(1, CALLS + 1)]
    shown = cadenza("runs", "show", "r-1", "--store", store, cwd=tmp_path)
    assert "completed" in shown.stdout


JUDGED = """
name: judged
agents:
  worker: {model: openai:gpt-test, prompt: "You work.", tools: [bash]}
  judge:
    model: openai:gpt-test
    prompt: "You judge."
    resultSchema:
      type: object
      properties: {done: {type: boolean}, reason: {type: string}}
      required: [done]
steps:
  - id: work
    loop: {maxIterations: 3, untilAgent: judge}
    agent: worker
    instructions: "Work."
"""


def judged_rules() -> list[ServerRule]:
    """Each iteration the worker appends its number, then answers; the judge says done at 3."""
    work: list[ServerReply] = []
    for k in (1, 2, 3):
        appended = ServerToolCall("bash", {"command": f"echo {k} >> lines.txt"})
        work += [ServerReply(tool_calls=[appended]), ServerReply(content=f"worked {k}")]
    verdicts = [
        ServerReply(tool_calls=[ServerToolCall("submit_result", {"done": done, "reason": "r"})])
        for done in (False, False, True)
    ]
    return [
        ServerRule(verdicts, match={"system": "You judge."}, name="judge"),
        ServerRule(work, name="worker"),
    ]


@pytest.mark.parametrize("boundary", [1, 2, 3])
def test_a_judged_loop_killed_inside_an_iteration_repeats_no_call(
    model_server: StartLLMServer, write_flow: WriteFlow, tmp_path: Path, boundary: int
) -> None:
    """Killed inside iteration N's worker, once its tool call is recorded: 9 model requests
    in all (the worker's 2 and the judge's 1 per iteration), 3 lines."""
    server = model_server(judged_rules())
    write_flow(JUDGED)
    env = {**os.environ, "CADENZA_FAILPOINT": f"call.after_record:{boundary}"}
    run = ("run", "flow.yaml", "--store", "runs.db", "--run-id", "r-1")
    assert cadenza(*run, cwd=tmp_path, env=env).returncode == -signal.SIGKILL

    resumed = cadenza("resume", "r-1", "--store", "runs.db", cwd=tmp_path)

    assert resumed.returncode == 0, resumed.stderr
    assert server.request_count == 3 * 2 + 3
    assert lines(tmp_path) == ["1", "2", "3"]


COORDINATED = """
name: coordinated
coordinator: {agent: broker}
agents:
  broker: {model: openai:gpt-test, prompt: "You are the broker.", tools: [bash]}
  teller: {model: openai:gpt-test, prompt: "You tell."}
steps:
  - id: tell
    agent: teller
    instructions: "Tell the broker."
"""


def coordinated_rules() -> list[ServerRule]:
    """The teller sends one message; the broker's wake appends 1 and 2, then answers."""
    told = ServerToolCall("send_message", {"text": "the price is 42"})
    tell = [ServerReply(tool_calls=[told]), ServerReply(content="told")]
    wake = [
        ServerReply(tool_calls=[ServerToolCall("bash", {"command": f"echo {k} >> lines.txt"})])
        for k in (1, 2)
    ]
    return [
        ServerRule(
            [*wake, ServerReply(content="noted")], match={"system": "broker"}, name="broker"
        ),
        ServerRule(tell, name="teller"),
    ]


@pytest.mark.parametrize("boundary", [1, 2])
def test_a_coordinator_turn_killed_between_calls_repeats_no_call(
    model_server: StartLLMServer, write_flow: WriteFlow, tmp_path: Path, boundary: int
) -> None:
    """The broker's wake records m, t, m, t, m: killed after either tool call, the resumed
    run sends 3 broker requests in all, and each line is appended once."""
    server = model_server(coordinated_rules())
    write_flow(COORDINATED)
    env = {**os.environ, "CADENZA_FAILPOINT": f"call.after_record:{boundary}"}
    run = ("run", "flow.yaml", "--store", "runs.db", "--run-id", "r-1")
    assert cadenza(*run, cwd=tmp_path, env=env).returncode == -signal.SIGKILL

    resumed = cadenza("resume", "r-1", "--store", "runs.db", cwd=tmp_path)

    assert resumed.returncode == 0, resumed.stderr
    broker = [r for r in server.requests if r.rule == "broker"]
    assert len(broker) == 3
    assert lines(tmp_path) == ["1", "2"]
