"""The cadenza command as a user runs it: real subprocesses, exit codes, stdout/stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._helpers import EXAMPLES, assert_clean_failure, cadenza
from tests.conftest import WriteFlow

from ._terminal import Terminal


def test_run_json_prints_only_the_result(tmp_path: Path) -> None:
    """--json: stdout is exactly one JSON document of the SPEC section 8 shape."""
    proc = cadenza(
        "run",
        str(EXAMPLES / "build-test-ship.yaml"),
        "--json",
        "--store",
        "runs.db",
        "--input",
        "version=2.1",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) == {
        "runId",
        "workflow",
        "status",
        "output",
        "steps",
        "loops",
        "graphs",
        "messages",
        "messagesOmitted",  # an extension key: how many older messages a flood left out
        "undelivered",  # messages no instance of their step took (SPEC section 5)
        "usage",
        "error",
    }
    assert result["status"] == "completed"
    assert result["output"].startswith("shipped 2.1")
    fields = {"status", "content", "result", "attempts", "durationMs"}
    assert set(result["steps"]["build"]) >= fields


def test_events_go_to_stderr_as_ndjson(write_flow: WriteFlow, tmp_path: Path) -> None:
    """--events: one JSON event per stderr line, zenflow envelope, namespaced stepId."""
    path = write_flow("name: ev\nsteps:\n  - id: a\n    command: 'echo a'\n")
    proc = cadenza("run", str(path), "--events", "--json", "--store", "runs.db", cwd=tmp_path)
    events = [json.loads(line) for line in proc.stderr.splitlines()]
    types = [e["type"] for e in events]
    assert types == ["workflow_start", "step_start", "step_end", "workflow_end"]
    assert all({"type", "timestamp", "runId"} <= set(e) for e in events)
    assert events[1]["stepId"] == "a"


def test_failed_run_exits_1(write_flow: WriteFlow, tmp_path: Path) -> None:
    """A run whose step fails exits 1 and says which step and why."""
    path = write_flow("name: bad\nsteps:\n  - id: a\n    command: 'echo nope >&2; exit 4'\n")
    proc = cadenza("run", str(path), "--store", "runs.db", cwd=tmp_path)
    assert_clean_failure(proc, 1, "failed", "a", "exit code 4: nope")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["run"], ["file"]),
        (["run", "missing.yaml"], ["missing.yaml"]),
        (["run", "flow.yaml", "--input", "novalue"], ["NAME=VALUE"]),
        (["run", "flow.yaml", "--input", "nam=1"], ["unknown input 'nam'", "mean 'name'"]),
        (["run", "flow.yaml", "--max-concurrency", "0"], ["at least 1"]),
        (["run", "flow.yaml", "--inputs-file", "absent.json"], ["absent.json"]),
        (["runs", "show"], ["RUN_ID"]),
        (["runs", "show", "r-none", "--store", "runs.db"], ["r-none"]),
        (["frobnicate"], ["invalid choice"]),
        (["graph", "flow.yaml", "--format", "svg"], ["invalid choice"]),
    ],
)
def test_bad_command_lines_exit_2_without_traceback(
    write_flow: WriteFlow, tmp_path: Path, args: list[str], words: list[str]
) -> None:
    """Every kind of bad CLI input gets one clear message and exit code 2."""
    write_flow(
        "name: ok\ninputs:\n  name: {type: string, default: x}\n"
        "steps:\n  - id: a\n    command: 'echo'\n"
    )
    cadenza("run", "flow.yaml", "--store", "runs.db", cwd=tmp_path)  # so the store exists
    assert_clean_failure(cadenza(*args, cwd=tmp_path), 2, *words)


def test_runs_list_and_show(write_flow: WriteFlow, tmp_path: Path) -> None:
    """runs list names the run; runs show prints the stored result; --events its stream."""
    path = write_flow("name: shown\nsteps:\n  - id: a\n    command: 'echo shown'\n")
    cadenza("run", str(path), "--store", "runs.db", "--run-id", "r-1", cwd=tmp_path)
    listing = cadenza("runs", "list", "--store", "runs.db", cwd=tmp_path)
    assert "r-1  completed" in listing.stdout
    shown = json.loads(cadenza("runs", "show", "r-1", "--store", "runs.db", cwd=tmp_path).stdout)
    assert shown["steps"]["a"]["content"] == "shown\n"
    events = cadenza("runs", "show", "r-1", "--events", "--store", "runs.db", cwd=tmp_path)
    assert json.loads(events.stdout.splitlines()[-1])["type"] == "workflow_end"


def test_run_id_cannot_be_reused(write_flow: WriteFlow, tmp_path: Path) -> None:
    """--run-id of an existing run is refused (exit 2) and the old run is untouched."""
    path = write_flow("name: once\nsteps:\n  - id: a\n    command: 'echo'\n")
    cadenza("run", str(path), "--store", "runs.db", "--run-id", "r-1", cwd=tmp_path)
    again = cadenza("run", str(path), "--store", "runs.db", "--run-id", "r-1", cwd=tmp_path)
    assert_clean_failure(again, 2, "r-1", "already taken")


def test_graph_prints_mermaid_and_json(write_flow: WriteFlow, tmp_path: Path) -> None:
    """graph: a mermaid flowchart by default, the structure as JSON on request."""
    path = write_flow(
        "name: g\nsteps:\n  - id: a\n    command: 'echo'\n  - id: b\n    dependsOn: [a]\n"
        "    command: 'echo'\n"
    )
    mermaid = cadenza("graph", str(path), cwd=tmp_path).stdout
    assert mermaid.startswith("flowchart TD")
    assert "n_a --> n_b" in mermaid
    data = json.loads(cadenza("graph", str(path), "--format", "json", cwd=tmp_path).stdout)
    assert [s["id"] for s in data["steps"]] == ["a", "b"]


def test_validate_examples() -> None:
    """Every shipped example validates."""
    for example in sorted(EXAMPLES.glob("*.yaml")):
        proc = cadenza("validate", str(example), cwd=EXAMPLES)
        assert proc.returncode == 0, (example, proc.stderr)


def test_a_terminal_gets_live_progress(tmp_path: Path) -> None:
    """On a TTY, stderr shows each step, iteration and graph move as it happens."""
    tool_router = str(EXAMPLES / "tool-router.yaml")
    with Terminal("run", tool_router, "--store", "runs.db", cwd=tmp_path) as tty:
        assert tty.wait() == 0
    assert "✓ router.0.analyze" in tty.text
    assert "→ router  analyze → search" in tty.text
