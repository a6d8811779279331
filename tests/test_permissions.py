"""Tool permissions: the sandbox, rules, a Python hook and a person at the terminal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cadenza import Event, Runtime, ToolPolicy, ToolRequest
from cadenza.workflow import WorkflowError, load_workflow
from tests._helpers import cadenza, run_flow
from tests._workflows import bash_then_read
from tests.conftest import WriteFlow

from ._terminal import Terminal

TOUCH = "echo changed > touched.txt"
"""The bash call of the agent's turn: it writes touched.txt."""


def flow(write_flow: WriteFlow, permissions: str = "") -> Path:
    path = write_flow(bash_then_read(TOUCH, permissions=permissions))
    (path.parent / "notes.txt").write_text("the notes\n")
    return path


def tool_results(events: list[Any]) -> dict[str, str]:
    """What the model was answered, per tool: the output of each call's end event."""
    return {
        e["data"]["tool_name"]: e["data"]["output"]
        for e in events
        if e["type"] == "tool_call" and e["data"]["phase"] == "end"
    }


def stored_events(tmp_path: Path, run_id: str) -> list[dict[str, Any]]:
    shown = cadenza("runs", "show", run_id, "--events", "--store", "runs.db", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line) for line in shown.stdout.splitlines()]


def test_the_sandbox_refuses_bash_and_the_model_is_told(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """``--sandbox``: bash does not run, the model hears why, read still works."""
    path = str(flow(write_flow))
    run = ("run", path, "--sandbox", "--store", "runs.db", "--run-id", "r-1")
    proc = cadenza(*run, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "touched.txt").exists()
    events = stored_events(tmp_path, "r-1")
    answered = tool_results(events)
    assert "permission denied: the run is sandboxed" in answered["bash"]
    assert "the notes" in answered["read"]
    decisions = [e["data"] for e in events if e["type"] == "tool_permission"]
    assert [(d["tool_name"], d["allowed"], d["by"]) for d in decisions] == [
        ("bash", False, "sandbox")
    ]


async def test_a_python_hook_sees_every_call_and_decides(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """``Runtime(permissions=hook)``: the hook gets each call's tool and arguments."""
    seen: list[ToolRequest] = []

    async def hook(request: ToolRequest) -> bool | str:
        seen.append(request)
        return "no shell today" if request.tool == "bash" else True

    async with Runtime(store=tmp_path / "runs.db", permissions=hook) as runtime:
        result = await runtime.run(flow(write_flow), run_id="r-2")
        events = [msgspec_dict(e) for e in await runtime.store.events("r-2")]
    assert result.status == "completed"
    assert [(r.tool, r.arguments, r.step, r.agent) for r in seen] == [
        ("bash", {"command": "echo changed > touched.txt"}, "fix", "fixer"),
        ("read", {"path": "notes.txt"}, "fix", "fixer"),
    ]
    assert seen[0].run_id == "r-2"
    assert tool_results(events)["bash"] == json.dumps(
        {"status": "error", "message": "permission denied: no shell today"}, separators=(",", ":")
    )
    assert not (tmp_path / "touched.txt").exists()
    decisions = [
        (e["data"]["tool_name"], e["data"]["allowed"])
        for e in events
        if e["type"] == "tool_permission"
    ]
    assert decisions == [("bash", False), ("read", True)]


def msgspec_dict(event: Event) -> dict[str, Any]:
    """An event as its NDJSON line reads."""
    decoded: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(event))
    return decoded


@pytest.mark.parametrize(
    ("permissions", "bash_ran"),
    [
        ('permissions: {deny: ["bash(echo *)"]}', False),
        ('permissions: {deny: ["bash(rm *)"]}', True),
        ('permissions: {allow: ["read"]}', False),
        ('permissions: {allow: ["read", "bash(echo *)"]}', True),
    ],
)
async def test_workflow_rules_allow_and_deny_by_tool_and_argument(
    write_flow: WriteFlow, tmp_path: Path, permissions: str, bash_ran: bool
) -> None:
    """A deny rule wins; once allow rules exist, what they do not match is refused."""
    result = await run_flow(flow(write_flow, permissions))
    assert result.status == "completed"
    assert (tmp_path / "touched.txt").exists() is bash_ran


async def test_an_agents_rules_add_to_the_runtimes(write_flow: WriteFlow, tmp_path: Path) -> None:
    """``agents.X.permissions`` and ``ToolPolicy(deny=...)`` both hold."""
    text = bash_then_read(TOUCH).replace(
        "    tools: [bash, read]", '    tools: [bash, read]\n    permissions: {deny: ["read"]}'
    )
    path = write_flow(text)
    (path.parent / "notes.txt").write_text("the notes\n")
    async with Runtime(permissions=ToolPolicy(deny=["bash"])) as runtime:
        handle = await runtime.start(path)
        events = [msgspec_dict(e) async for e in handle.events()]
    answered = tool_results(events)
    assert "denied by the rule bash" in answered["bash"]
    assert "denied by the rule read" in answered["read"]


def test_a_malformed_rule_is_refused_at_load(write_flow: WriteFlow) -> None:
    """``cadenza validate`` names the rule and where it is."""
    path = flow(write_flow, 'permissions: {deny: ["bash(rm *"]}')
    with pytest.raises(WorkflowError, match=r"permissions\.deny\[0\].*NAME or NAME\(PATTERN\)"):
        load_workflow(path)


def test_ask_puts_each_call_to_the_person_at_the_terminal(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """``--ask``: the person refuses bash and allows read; the run records both answers."""
    path = str(flow(write_flow))
    run = ("run", path, "--ask", "--store", "runs.db", "--run-id", "r-3")
    with Terminal(*run, cwd=tmp_path) as tty:
        tty.read_until(r"fix \(fixer\) wants to run bash: echo changed > touched.txt")
        tty.type("n\n")
        tty.read_until(r"wants to run read: notes.txt")
        tty.type("y\n")
        assert tty.wait() == 0
    assert not (tmp_path / "touched.txt").exists()
    events = stored_events(tmp_path, "r-3")
    decisions = [e["data"] for e in events if e["type"] == "tool_permission"]
    assert [(d["tool_name"], d["allowed"], d["by"]) for d in decisions] == [
        ("bash", False, "ask"),
        ("read", True, "ask"),
    ]


def test_ask_without_a_terminal_is_a_usage_error(write_flow: WriteFlow, tmp_path: Path) -> None:
    """Nobody could answer: the run does not start."""
    proc = cadenza("run", str(flow(write_flow)), "--ask", "--store", "runs.db", cwd=tmp_path)
    assert proc.returncode != 0
    assert "--ask needs a terminal" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_resume_takes_the_same_permission_flags(write_flow: WriteFlow, tmp_path: Path) -> None:
    """A run resumed after a person's answer, with ``--sandbox``: its agent's bash is refused."""
    text = bash_then_read(TOUCH, approve=True)
    path = write_flow(text)
    (path.parent / "notes.txt").write_text("the notes\n")
    first = cadenza("run", str(path), "--store", "runs.db", "--run-id", "r-4", cwd=tmp_path)
    assert first.returncode == 3, first.stderr  # waiting for the person
    answered = cadenza(
        "signal", "r-4", "approve", "--data", '"yes"', "--store", "runs.db", cwd=tmp_path
    )
    assert answered.returncode == 0, answered.stderr
    resumed = cadenza("resume", "r-4", "--sandbox", "--store", "runs.db", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert not (tmp_path / "touched.txt").exists()
    events = stored_events(tmp_path, "r-4")
    decisions = [e["data"] for e in events if e["type"] == "tool_permission"]
    assert [(d["tool_name"], d["allowed"], d["by"]) for d in decisions] == [
        ("bash", False, "sandbox")
    ]


def test_resume_checks_the_rule_flags_too(tmp_path: Path) -> None:
    """``resume --deny Bash`` is refused before any run is looked up, naming the flag."""
    proc = cadenza("resume", "r-9", "--deny", "Bash", "--store", "runs.db", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("cadenza: error: --deny 'Bash': permission rule 'Bash': ")
    assert "did you mean 'bash'?" in proc.stderr
    assert "Traceback" not in proc.stderr
