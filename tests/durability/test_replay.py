"""Offline replay: a recorded run, run again against its record, with no model and no key.

A release workflow is recorded against a real local model server: an agent
checks (calling the built-in ``bash`` tool, which appends to ``checked.txt``),
a ``command`` step deploys if the check's result says so (appending to
``deployed.txt``), and a writer agent drafts notes in a repeat-until loop until
a draft says FINAL (three iterations). The server is then stopped and the
provider's key taken away: ``cadenza replay`` must come to a result equal to the
record without calling anything or repeating a side effect, and an edited copy
of the workflow must be reported at its first differing decision.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cadenza import Runtime, load_workflow
from cadenza.errors import ReplayRefused, RunNotFound
from cadenza.protocols import CallRecord, RunResult
from cadenza.store import MemoryRunStore
from cadenza.testing import (
    ScriptedLLMServer,
    ServerReply,
    ServerRule,
    ServerToolCall,
    compare_results,
    replay_run,
)
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import assert_refused, cadenza
from tests.conftest import WriteFlow

pytestmark = pytest.mark.timeout(180)

FLOW = """
name: release
agents:
  checker:
    model: openai:gpt-test
    prompt: "You check releases."
    tools: [bash]
    resultSchema: {type: object}
  writer:
    model: openai:gpt-test
    prompt: "You write release notes."
steps:
  - id: check
    agent: checker
    instructions: "Check the release."
  - id: deploy
    dependsOn: [check]
    condition: "steps.check.result.ok == true"
    command: "echo deployed >> deployed.txt"
  - id: notes
    dependsOn: [deploy]
    agent: writer
    instructions: "Write the release notes."
    loop:
      maxIterations: 5
      until: "content.contains('FINAL')"
output: "steps.notes.content"
"""

MODEL_CALLS = 5  # the checker's two, the writer's three


def rules() -> list[ServerRule]:
    check = [
        ServerReply(
            content="checking",
            tool_calls=[ServerToolCall("bash", {"command": "echo checked >> checked.txt"})],
        ),
        ServerReply(content="fine", tool_calls=[ServerToolCall("submit_result", {"ok": True})]),
    ]
    return [
        ServerRule(check, match={"system": "check releases"}),
        ServerRule(["draft 1", "draft 2", "FINAL notes"], match={"system": "release notes"}),
    ]


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.fixture
def recorded(model_server: StartLLMServer, write_flow: WriteFlow, tmp_path: Path) -> dict[str, str]:
    """Run r-1, recorded on SQLite against the local server, which is then stopped; returns
    the environment to replay in: no key, and the dead server's URL (a live call fails)."""
    server = model_server(rules())
    write_flow(FLOW)
    run = cadenza("run", "flow.yaml", "--store", "runs.db", "--run-id", "r-1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert server.request_count == MODEL_CALLS
    base_url = server.base_url
    server.stop()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CADENZA_"))}
    return {**environ, "OPENAI_BASE_URL": base_url}


def replay(tmp_path: Path, env: Mapping[str, str], *args: str) -> Any:
    return cadenza("replay", "r-1", "--store", "runs.db", *args, cwd=tmp_path, env=env)


def shown(tmp_path: Path) -> RunResult:
    """The recorded run's result as ``runs show --json`` prints it."""
    proc = cadenza("runs", "show", "r-1", "--store", "runs.db", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return msgspec.json.decode(proc.stdout, type=RunResult)


def test_a_replay_with_the_server_stopped_comes_to_the_recorded_result(
    recorded: dict[str, str], tmp_path: Path
) -> None:
    """No model, no key: every call answered by the journal, no side effect repeated,
    the result equal to the record's, and the record unchanged."""
    before = shown(tmp_path)
    proc = replay(tmp_path, recorded)
    assert proc.returncode == 0, proc.stderr
    assert "completed" in proc.stdout
    assert "every decision and the result match the record" in proc.stdout
    assert "5 model call(s), 1 tool call(s), 1 other step(s)" in proc.stdout

    as_json = replay(tmp_path, recorded, "--json")
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert report["matches"] is True
    assert report["difference"] is None
    result = msgspec.convert(report["result"], RunResult)
    assert compare_results(before, result) == []
    assert result.output == "FINAL notes"
    assert result.usage.llm_calls == before.usage.llm_calls == MODEL_CALLS

    assert lines(tmp_path / "checked.txt") == ["checked"]  # the bash call: not run again
    assert lines(tmp_path / "deployed.txt") == ["deployed"]  # the command: not run again
    assert msgspec.to_builtins(shown(tmp_path)) == msgspec.to_builtins(before)


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        pytest.param(
            ("steps.check.result.ok == true", "steps.check.result.ok == false"),
            "deploy: the record started it (command), the replay skipped it"
            " (condition 'steps.check.result.ok == false' is false)",
            id="a CEL condition",
        ),
        pytest.param(
            ("Write the release notes.", "Write short release notes."),
            "notes.0: the prompt of model call 1 differs from the record",
            id="an agent's instructions",
        ),
        pytest.param(
            ("content.contains('FINAL')", "content.contains('draft 2')"),
            "notes: the record ended the loop after 3 iteration(s) (until),"
            " the replay ended the loop after 2 iteration(s) (until)",
            id="a loop's until",
        ),
    ],
)
def test_an_edited_workflow_is_reported_at_its_first_differing_decision(
    recorded: dict[str, str], tmp_path: Path, edit: tuple[str, str], said: str
) -> None:
    """One edit in a copy of the workflow: exit 1, one line naming the address and what
    differs, no traceback; still no side effect repeated."""
    edited = tmp_path / "edited.yaml"
    text = (tmp_path / "flow.yaml").read_text()
    assert edit[0] in text
    edited.write_text(text.replace(*edit))

    proc = replay(tmp_path, recorded, "--workflow", "edited.yaml")

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr == f"cadenza: the replay differs from the record: {said}\n"
    assert proc.stdout == ""
    assert lines(tmp_path / "checked.txt") == ["checked"]
    assert lines(tmp_path / "deployed.txt") == ["deployed"]


def test_a_run_that_cannot_be_replayed_is_refused_cleanly(
    recorded: dict[str, str], tmp_path: Path
) -> None:
    """Unusable input is exit 2 with one line: an unknown run, no store, a bad workflow."""
    unknown = cadenza("replay", "nope", "--store", "runs.db", cwd=tmp_path, env=recorded)
    assert_refused(unknown, "no run 'nope'")
    nowhere = cadenza("replay", "r-1", "--store", "none.db", cwd=tmp_path, env=recorded)
    assert_refused(nowhere, "no run store at 'none.db'")
    (tmp_path / "bad.yaml").write_text("name: bad\nsteps: []\nagents: 3\n")
    bad = replay(tmp_path, recorded, "--workflow", "bad.yaml")
    assert_refused(bad, "bad.yaml")


def test_a_resumed_run_replays_like_one_never_interrupted(
    model_server: StartLLMServer, write_flow: WriteFlow, tmp_path: Path
) -> None:
    """Killed inside the checker's visit (its tool call recorded) and resumed: the
    replay takes the calls of the attempt that ended, and matches."""
    server = model_server(rules())
    write_flow(FLOW)
    killed = cadenza(
        "run",
        "flow.yaml",
        "--store",
        "runs.db",
        "--run-id",
        "r-1",
        cwd=tmp_path,
        env={**os.environ, "CADENZA_FAILPOINT": "call.after_record:1"},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = cadenza("resume", "r-1", "--store", "runs.db", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert server.request_count == MODEL_CALLS
    server.stop()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}

    proc = replay(tmp_path, environ)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every decision and the result match the record" in proc.stdout


# -- the Python API (cadenza.testing.replay_run) ------------------------------------------


async def record(store: MemoryRunStore, flow: Path, server: ScriptedLLMServer) -> RunResult:
    """Runs ``flow`` as r-1 on ``store`` against ``server``."""
    async with Runtime(store=store) as runtime:
        return await runtime.run(flow, run_id="r-1")


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands run where the process is: in the test's directory, not the project's."""
    monkeypatch.chdir(tmp_path)


async def test_replay_run_reports_a_match_and_a_difference(
    model_server: StartLLMServer,
    write_flow: WriteFlow,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """`replay_run` on an open store: a `ReplayReport` that matches, with the replayed
    result; then, given an edited workflow, the difference."""
    server = model_server(rules())
    flow = write_flow(FLOW)
    store = MemoryRunStore()
    recorded = await record(store, flow, server)
    server.stop()
    monkeypatch.delenv("OPENAI_API_KEY")

    report = await replay_run(store, "r-1")

    assert report.matches, report.difference
    assert compare_results(recorded, report.result) == []
    assert report.recorded == recorded
    assert report.answered == {"model": MODEL_CALLS, "tool": 1, "steps": 1}
    assert lines(tmp_path / "checked.txt") == ["checked"]  # run once, by the recording
    assert lines(tmp_path / "deployed.txt") == ["deployed"]

    edited = load_workflow(flow)
    notes = edited.workflow.steps[2]
    assert notes.instructions is not None
    changed = msgspec.structs.replace(notes, instructions="Write better notes.")
    steps = [*edited.workflow.steps[:2], changed]
    workflow = msgspec.structs.replace(edited.workflow, steps=steps)
    report = await replay_run(store, "r-1", workflow=workflow)

    assert not report.matches
    assert report.difference == "notes.0: the prompt of model call 1 differs from the record"


async def test_replay_run_refuses_what_it_cannot_replay(
    model_server: StartLLMServer, write_flow: WriteFlow
) -> None:
    """An unknown run, and a run recorded without a journal of its calls (as by a Cadenza
    from before the journal): refused before anything runs."""

    class BeforeTheJournal(MemoryRunStore):
        def put_call(self, run_id: str, call: CallRecord) -> None:
            """Kept nothing: this store's Cadenza had no journal."""

    server = model_server(rules())
    store = BeforeTheJournal()
    await record(store, write_flow(FLOW), server)

    with pytest.raises(RunNotFound, match="no run 'nope'"):
        await replay_run(store, "nope")
    with pytest.raises(ReplayRefused, match="without a journal of its model and tool calls"):
        await replay_run(store, "r-1")


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    "example",
    [
        "reflection.yaml",  # a loop with a judge (untilAgent)
        "negotiation.yaml",  # a graph of agents
        "negotiation-messages.yaml",  # the coordinator agent's wakes and forwards
        "control-tagline.yaml",  # a control loop: rulings, and tokens counted by the loop
        "control-signoff.yaml",  # a control loop that waits for a person
        "foreach-deploy.yaml",  # a forEach of handlers and commands
        "tool-router.yaml",  # tool steps and agents
    ],
)
async def test_every_kind_of_container_replays_to_a_match(example: str) -> None:
    """Each example, run on its scripted models, replays to a match: judges, graphs,
    coordinator wakes, control loops, forEach, tool steps decide again as they did."""
    store = MemoryRunStore()
    async with Runtime(store=store) as runtime:
        recorded = await runtime.run(EXAMPLES / example, run_id="r-1")

    report = await replay_run(store, "r-1")

    assert report.matches, report.difference
    assert compare_results(recorded, report.result) == []
    assert report.result.usage == recorded.usage
