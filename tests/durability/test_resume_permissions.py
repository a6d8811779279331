"""A run keeps its tool permission policy for life: every resume applies it.

The policy a run was started with (``--deny``, ``--allow``, ``--sandbox``,
``--ask``, ``ToolPolicy``) is stored with the run. ``cadenza resume`` (one run or
``--all``), ``cadenza supervise`` and ``Runtime.resume`` apply it whatever they
were given; what they were given may refuse more, never less. A run started
with a Python hook is left untouched by a process without one.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest

from cadenza import RunResult, Runtime, ToolPolicy, ToolRequest
from cadenza._logging import FIELDS
from cadenza.actors.run import PermissionHook, StoredPolicy, decode_document, encode_document
from cadenza.errors import CorruptRecord, PolicyRefused
from cadenza.protocols import ToolPermission, payload
from cadenza.workflow import load_workflow
from tests._helpers import cadenza
from tests._terminal import Terminal
from tests._workflows import bash_then_read
from tests.conftest import WriteFlow

# The agent's one tool call deletes the notes; a deny rule on rm must keep them.
CLEAN = bash_then_read("rm -f notes.txt")
# The same, after a person's go-ahead: the run stops cleanly, waiting, before the agent.
APPROVED = bash_then_read("rm -f notes.txt", approve=True)


KILLED_AT_THE_AGENT = {**os.environ, "CADENZA_FAILPOINT": "step.before_work:1"}


def notes(write_flow: WriteFlow, text: str = CLEAN) -> Path:
    path = write_flow(text)
    (path.parent / "notes.txt").write_text("keep me\n")
    return path


def stored_events(tmp_path: Path, run_id: str) -> list[dict[str, Any]]:
    shown = cadenza("runs", "show", run_id, "--events", "--store", "runs.db", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line) for line in shown.stdout.splitlines()]


def decisions(events: list[dict[str, Any]]) -> list[tuple[str, bool, str, str]]:
    return [
        (e["data"]["tool_name"], e["data"]["allowed"], e["data"]["by"], e["data"]["reason"])
        for e in events
        if e["type"] == "tool_permission"
    ]


def killed_run(tmp_path: Path, flow: Path, *flags: str) -> None:
    """``cadenza run FLAGS`` killed with SIGKILL as its agent step starts: run r-1, running."""
    run = ("run", str(flow), *flags, "--store", "runs.db", "--run-id", "r-1")
    proc = cadenza(*run, cwd=tmp_path, env=KILLED_AT_THE_AGENT)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    listed = cadenza("runs", "list", "--store", "runs.db", cwd=tmp_path)
    assert "r-1 " in listed.stdout, listed.stdout
    assert "running" in listed.stdout, listed.stdout


def test_resume_all_without_flags_keeps_the_runs_deny_rule(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """The issue's case: ``run --deny 'bash(rm *)'`` killed, ``resume --all``: rm is refused."""
    killed_run(tmp_path, notes(write_flow), "--deny", "bash(rm *)")
    assert (tmp_path / "notes.txt").exists()  # killed before the agent's call
    resumed = cadenza("resume", "--all", "--store", "runs.db", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "notes.txt").read_text() == "keep me\n"
    assert decisions(stored_events(tmp_path, "r-1")) == [
        ("bash", False, "rule", "denied by the rule bash(rm *): rm -f notes.txt")
    ]


def test_resume_may_add_a_deny_rule(write_flow: WriteFlow, tmp_path: Path) -> None:
    """``resume --deny read``: the run's own rule still refuses rm, the added one read."""
    killed_run(tmp_path, notes(write_flow), "--deny", "bash(rm *)")
    resumed = cadenza("resume", "r-1", "--deny", "read", "--store", "runs.db", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "notes.txt").exists()
    assert decisions(stored_events(tmp_path, "r-1")) == [
        ("bash", False, "rule", "denied by the rule bash(rm *): rm -f notes.txt"),
        ("read", False, "rule", "denied by the rule read"),
    ]


def test_resume_refuses_an_allow_rule_the_run_was_not_started_with(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """``resume --allow bash`` on a ``--allow read`` run: exit 2, one line, the run untouched."""
    killed_run(tmp_path, notes(write_flow), "--allow", "read")
    before = stored_events(tmp_path, "r-1")
    widened = cadenza("resume", "r-1", "--allow", "bash", "--store", "runs.db", cwd=tmp_path)
    assert widened.returncode == 2, widened.stderr
    assert widened.stderr.count("\n") == 1, widened.stderr  # one line, no traceback
    assert widened.stderr.startswith("cadenza: error: run 'r-1' is left as it is: ")
    assert "the allow rule 'bash' is not one the run was started with" in widened.stderr
    assert stored_events(tmp_path, "r-1") == before
    # Every run resume --all meets is refused the same way, and named.
    every = cadenza("resume", "--all", "--allow", "bash", "--store", "runs.db", cwd=tmp_path)
    assert every.returncode == 2
    assert every.stderr.startswith("cadenza: r-1: run 'r-1' is left as it is: "), every.stderr
    assert stored_events(tmp_path, "r-1") == before
    assert (tmp_path / "notes.txt").exists()
    # Repeating the rule the run was started with is no widening: it resumes, bash refused.
    same = cadenza("resume", "r-1", "--allow", "read", "--store", "runs.db", cwd=tmp_path)
    assert same.returncode == 0, same.stderr
    assert (tmp_path / "notes.txt").exists()
    said = [
        (tool, allowed, by) for tool, allowed, by, _ in decisions(stored_events(tmp_path, "r-1"))
    ]
    assert said == [("bash", False, "rule"), ("read", True, "rule")]


def test_supervise_takes_a_run_over_with_its_deny_rule(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """A waiting run answered, then taken over by ``cadenza supervise``: rm is refused."""
    flow = notes(write_flow, APPROVED)
    run = ("run", str(flow), "--deny", "bash(rm *)", "--store", "runs.db", "--run-id", "r-1")
    first = cadenza(*run, cwd=tmp_path)
    assert first.returncode == 3, first.stderr  # waiting for the person
    answer = ("signal", "r-1", "approve", "--data", '"go"', "--store", "runs.db")
    assert cadenza(*answer, cwd=tmp_path).returncode == 0
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "cadenza", "supervise", "--store", "runs.db", "--lease-ttl", "1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        give_up = time.monotonic() + 60
        while "completed" not in cadenza("runs", "list", "--store", "runs.db", cwd=tmp_path).stdout:
            assert supervisor.poll() is None, "the supervisor ended"
            assert time.monotonic() < give_up, "the run was not taken over"
    finally:
        supervisor.send_signal(signal.SIGTERM)
        _, errors = supervisor.communicate(timeout=30)
    assert supervisor.returncode == 0, errors
    assert (tmp_path / "notes.txt").read_text() == "keep me\n"
    said = decisions(stored_events(tmp_path, "r-1"))
    assert said[0] == ("bash", False, "rule", "denied by the rule bash(rm *): rm -f notes.txt")


def test_a_malformed_rule_exits_2_with_one_line_and_records_nothing(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """The rule is refused before the store is touched: no run row, no file, no traceback."""
    flow = notes(write_flow)
    bad = ("run", str(flow), "--deny", "bash(rm *", "--store", "runs.db", "--run-id", "r-2")
    proc = cadenza(*bad, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr  # one line, no traceback
    assert proc.stderr.startswith("cadenza: error: --deny 'bash(rm *': permission rule ")
    assert not (tmp_path / "runs.db").exists()
    # With a store that holds runs already: still nothing of r-2, and resume --all finds none.
    killed_run(tmp_path, flow, "--deny", "bash(rm *)")
    again = cadenza(*bad, cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr == proc.stderr
    listed = cadenza("runs", "list", "--store", "runs.db", cwd=tmp_path)
    assert "r-1 " in listed.stdout
    assert "r-2" not in listed.stdout
    shown = cadenza("runs", "show", "r-2", "--store", "runs.db", cwd=tmp_path)
    assert shown.returncode == 2
    assert "no run 'r-2'" in shown.stderr


def test_an_ask_run_resumed_with_ask_puts_its_calls_to_the_person(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """``run --ask`` waits for a go-ahead; ``resume --ask`` at a terminal asks, as the run did."""
    flow = notes(write_flow, APPROVED)
    run = ("run", str(flow), "--ask", "--store", "runs.db", "--run-id", "r-1")
    with Terminal(*run, cwd=tmp_path) as tty:
        assert tty.wait() == 3  # waiting for the person's go-ahead
    answer = ("signal", "r-1", "approve", "--data", '"go"', "--store", "runs.db")
    assert cadenza(*answer, cwd=tmp_path).returncode == 0
    with Terminal("resume", "r-1", "--ask", "--store", "runs.db", cwd=tmp_path) as tty:
        tty.read_until(r"fix \(fixer\) wants to run bash: rm -f notes.txt")
        tty.type("n\n")
        tty.read_until(r"wants to run read: notes.txt")
        tty.type("y\n")
        assert tty.wait() == 0
    assert (tmp_path / "notes.txt").exists()
    assert decisions(stored_events(tmp_path, "r-1")) == [
        ("bash", False, "ask", "denied at the terminal"),
        ("read", True, "ask", "allowed at the terminal"),
    ]


# -- the Python API: hooks, a person, what a resuming runtime adds ------------------


async def waiting_run(write_flow: WriteFlow, policy: ToolPolicy | None) -> Path:
    """Starts run r-1 of APPROVED under ``policy``, on runs.db beside it; the run stops
    waiting for the person, who then says go. Returns the store."""
    flow = notes(write_flow, APPROVED)
    store = flow.parent / "runs.db"
    async with Runtime(store=store, permissions=policy) as runtime:
        result = await runtime.run(flow, run_id="r-1")
        assert result.status == "waiting"
        await runtime.signal("r-1", "approve", "go")
    return store


async def resumed(store: Path, permissions: PermissionHook | None = None) -> RunResult:
    """Run r-1 resumed to its end by a runtime with ``permissions``; the notes were kept."""
    async with Runtime(store=store, permissions=permissions) as runtime:
        result = await (await runtime.resume("r-1")).result()
    assert result.status == "completed"
    assert store.with_name("notes.txt").exists()
    return result


async def permission_events(store: Path) -> list[tuple[str, bool, str, str]]:
    """Each permission decision of run r-1: the tool, allowed or not, by whom, why."""
    async with Runtime(store=store) as runtime:
        events = await runtime.stored_events("r-1")
    said = [payload(e, ToolPermission) for e in events if e.type == "tool_permission"]
    return [(d.tool_name, d.allowed, d.by, d.reason) for d in said]


def refuse_rm(request: ToolRequest) -> bool | str | None:
    if "rm " in str(request.arguments.get("command", "")):
        return "no deleting"
    return None


async def waiting_hook_run(write_flow: WriteFlow, tmp_path: Path) -> tuple[Path, int]:
    """Run r-1 started under the ``refuse_rm`` hook, waiting for the person: its store,
    and how many events that holds of it."""
    store = await waiting_run(write_flow, ToolPolicy(hook=refuse_rm))
    async with Runtime(store=store) as runtime:
        return store, len(await runtime.stored_events("r-1"))


async def test_a_hook_run_is_left_untouched_by_a_process_without_the_hook(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """Resume and recover both leave it, saying why; a runtime with the hook resumes it."""
    store, events = await waiting_hook_run(write_flow, tmp_path)
    async with Runtime(store=store) as runtime:
        with pytest.raises(PolicyRefused, match="started with a permission hook") as refused:
            await runtime.resume("r-1")
        assert str(refused.value).startswith("run 'r-1' is left as it is: ")
        assert (await runtime.get_run("r-1")).status == "waiting"
        assert len(await runtime.stored_events("r-1")) == events
    await resumed(store, refuse_rm)
    assert (await permission_events(store))[0] == ("bash", False, "hook", "no deleting")


class Refusals(logging.Handler):
    """Keeps the fields of each ``cannot take the run over`` record; ``seen`` once one is."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[dict[str, Any]] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("cannot take the run over"):
            self.fields.append(getattr(record, FIELDS))
            self.seen.set()


async def test_recovery_leaves_a_hook_run_and_logs_why(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """``Runtime(recover=True)`` (supervise, serve --recover) without the hook: untouched."""
    store, events = await waiting_hook_run(write_flow, tmp_path)
    refusals = Refusals()
    logging.getLogger("cadenza").addHandler(refusals)
    try:
        async with Runtime(store=store, recover=True) as runtime:
            assert await anyio.to_thread.run_sync(refusals.seen.wait, 60)
            assert runtime.handle("r-1") is None
            assert (await runtime.get_run("r-1")).status == "waiting"
            assert len(await runtime.stored_events("r-1")) == events
    finally:
        logging.getLogger("cadenza").removeHandler(refusals)
    assert len(refusals.fields) == 1
    assert refusals.fields[0]["run_id"] == "r-1"
    assert "started with a permission hook" in refusals.fields[0]["error"]
    assert (tmp_path / "notes.txt").exists()


async def test_an_ask_run_resumed_where_nobody_can_answer_refuses_what_it_would_ask(
    write_flow: WriteFlow,
) -> None:
    """A run started with a person to ask, resumed without one: the calls are refused."""

    async def person(request: ToolRequest) -> Literal["yes", "no", "always"]:
        raise AssertionError("the person of the first process is not asked on resume")

    store = await waiting_run(write_flow, ToolPolicy(ask=person))
    await resumed(store)
    nobody = "the run asks a person about this call (--ask), and nobody is here to answer"
    assert await permission_events(store) == [
        ("bash", False, "ask", nobody),
        ("read", False, "ask", nobody),
    ]


async def test_a_resuming_hook_may_refuse_more_but_not_allow_what_the_run_refuses(
    write_flow: WriteFlow,
) -> None:
    """The run allows only read; a resuming runtime's hook says yes to all: bash stays refused."""
    store = await waiting_run(write_flow, ToolPolicy(allow=["read"], sandbox=False))
    asked: list[str] = []

    def yes_to_all(request: ToolRequest) -> bool:
        asked.append(request.tool)
        return request.tool != "read"  # says yes to bash, no to read

    await resumed(store, yes_to_all)
    assert asked == ["read"]  # bash was refused by the run's rules before the hook
    said = [(tool, allowed, by) for tool, allowed, by, _ in await permission_events(store)]
    assert said == [("bash", False, "rule"), ("read", False, "hook")]


async def test_a_sandboxed_run_stays_sandboxed_whatever_the_resume_is_given(
    write_flow: WriteFlow,
) -> None:
    store = await waiting_run(write_flow, ToolPolicy(sandbox=True))
    await resumed(store, lambda request: True)
    said = [(tool, allowed, by) for tool, allowed, by, _ in await permission_events(store)]
    assert said == [("bash", False, "sandbox"), ("read", True, "hook")]


async def test_a_runtime_with_remote_workers_leaves_a_run_with_permissions(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """Workers run agents' tools unchecked: a run with a stored deny rule is not theirs."""
    from cadenza.remote import Dispatcher  # pyzmq, only here

    store = await waiting_run(write_flow, ToolPolicy(deny=["bash(rm *)"]))
    dispatcher = Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)
    async with Runtime(store=store, workers=dispatcher) as runtime:
        with pytest.raises(PolicyRefused, match="remote workers run agents' tools without"):
            await runtime.resume("r-1")
        assert (await runtime.get_run("r-1")).status == "waiting"
    assert (tmp_path / "notes.txt").exists()


# -- the stored form ----------------------------------------------------------------


def test_the_document_keeps_the_policy_and_older_documents_still_load(
    write_flow: WriteFlow,
) -> None:
    loaded = load_workflow(notes(write_flow))
    policy = StoredPolicy(deny=("bash(rm *)",), ask=True)
    body = encode_document(loaded, {"x": 1}, policy)
    assert json.loads(body)["version"] == 2  # a Cadenza without policies refuses it
    assert decode_document(body, "r").policy == policy
    unrestricted = encode_document(loaded, {}, StoredPolicy())
    assert json.loads(unrestricted)["version"] == 1  # readable as before
    assert decode_document(unrestricted, "r").policy == StoredPolicy()
    # Written before policies were stored: no policy, so a resume's flags are all it has.
    old = json.loads(unrestricted)
    del old["policy"]
    assert decode_document(json.dumps(old).encode(), "r").policy is None
    with pytest.raises(CorruptRecord, match="version 3 is not one this Cadenza reads"):
        decode_document(json.dumps({**old, "version": 3}).encode(), "r")
