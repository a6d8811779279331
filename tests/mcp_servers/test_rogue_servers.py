"""MCP servers that misbehave (rogue_server.py, real processes) cannot take the run with them.

Every rogue server here is stubborn: it ignores SIGTERM, outlives its stdin,
and has a child that ignores SIGTERM too and holds its pipes. After the run,
none of them may be left.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cadenza
from cadenza import Runtime
from cadenza.testing import ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import run_flow
from tests._processes import running
from tests.conftest import WriteFlow

ROGUE = Path(__file__).with_name("rogue_server.py")

CALL_WAIT = ServerToolCall("rogue__wait", {})

NOT_MCP = "wrote a line that is not MCP (JSON-RPC) to stdout: "


def rogue_flow(directory: Path, mode: str, *extra: str, timeout: str = "5s") -> Path:
    """A workflow whose agent has the tools of a rogue server in ``mode``.

    Its model is an OpenAI-compatible one (point it at a ScriptedLLMServer);
    `scripted_flow` makes it answer offline instead.
    """
    args = [str(ROGUE), mode, str(directory / "pids"), *extra]
    flow = directory / "flow.yaml"
    flow.write_text(
        "name: rogue\n"
        "mcpServers:\n"
        f"  rogue: {{command: {json.dumps(sys.executable)}, args: {json.dumps(args)},"
        f" timeout: {timeout}}}\n"
        "agents:\n"
        "  clerk: {model: 'openai:m', tools: [rogue]}\n"
        "steps:\n"
        "  - {id: work, agent: clerk, instructions: Work.}\n"
    )
    return flow


def scripted_flow(flow: Path) -> Path:
    """``flow`` with a scripted model that calls ``rogue__wait``, then answers."""
    scripted = "{model: scripted, tools: [rogue], script: [{toolCalls: [{name: rogue__wait}]}, ok]}"
    flow.write_text(flow.read_text().replace("{model: 'openai:m', tools: [rogue]}", scripted))
    return flow


def rogue_processes(directory: Path) -> tuple[int, int, int]:
    """The rogue server's pid, its child's pid, and their process group."""
    server, child, group = (int(n) for n in (directory / "pids").read_text().split())
    return server, child, group


def assert_nothing_left(directory: Path) -> None:
    server, child, group = rogue_processes(directory)
    assert not running(server), "the MCP server outlived its run"
    assert not running(child), "a child of the MCP server outlived its run"
    assert not members(group), "a process of the MCP server's group outlived its run"


def members(group: int) -> list[int]:
    """The processes of ``group`` still running (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == group and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def tool_answer(body: dict[str, object]) -> str:
    """The message of the (error) answer the model was given for its tool call."""
    messages = body["messages"]
    assert isinstance(messages, list)
    answer = next(m["content"] for m in messages if m["role"] == "tool")
    message = json.loads(answer)["message"]
    assert isinstance(message, str)
    return message


MEASURED = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[1:])\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.exit(code)\n"
)
"""Runs a command, then prints the peak RSS (KiB) of the largest process it waited for."""

PEAK_LIMIT_KIB = 200 * 1024
"""What ``cadenza run`` may reach (about 90 MiB with the SDK loaded, 105 with a 16 MiB line)."""


@pytest.mark.parametrize(
    ("mode", "extra", "cause"),
    [
        (
            "garbage",
            (),
            "wrote a line that is not MCP (JSON-RPC) to stdout: 'this is not JSON-RPC'",
        ),
        ("long-line", (), "wrote a line longer than 16777216 bytes to stdout"),
        ("flood-stderr", ("500",), "exited with code 1; its stderr ends: '"),
    ],
)
def test_a_server_flooding_its_output_fails_the_step_and_memory_stays_bounded(
    tmp_path: Path, mode: str, extra: tuple[str, ...], cause: str
) -> None:
    """Endless garbage lines, a line that never ends, 500 MB of stderr: one clear error."""
    flow = scripted_flow(rogue_flow(tmp_path, mode, *extra, timeout="60s"))
    command = [sys.executable, "-m", "cadenza", "run", str(flow)]
    run = subprocess.run(
        [sys.executable, "-c", MEASURED, *command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    *printed, peak = run.stdout.splitlines()
    assert run.returncode == 1, run.stdout + run.stderr
    error = next(line for line in printed if line.startswith("error at work: "))
    assert error.startswith(f"error at work: McpUnavailable: MCP server 'rogue' ({sys.executable} ")
    assert f"): {cause}" in error
    if mode == "flood-stderr":  # the tail kept of 500 MB: a bounded quote ending in the last line
        quoted = error.split("its stderr ends: ", 1)[1]
        assert quoted.endswith("rogue: out of patience'")
        assert len(quoted) <= 125
    assert len(run.stderr) < 10_000, "the server's output reached the run's stderr"
    assert int(peak) < PEAK_LIMIT_KIB, f"cadenza run peaked at {int(peak) // 1024} MiB"
    assert_nothing_left(tmp_path)


async def test_garbage_in_answer_to_a_call_is_told_to_the_model_naming_the_line(
    tmp_path: Path, model_server: StartLLMServer
) -> None:
    rules = [ServerRule([ServerReply("", tool_calls=[CALL_WAIT]), "Noted."])]
    events: list[object] = []
    server = model_server(rules)
    async with Runtime() as runtime:
        handle = await runtime.start(rogue_flow(tmp_path, "garbage-call"), on_event=events.append)
        result = await handle.result()
    requests = server.requests
    assert result.status == "completed", result.error
    told = tool_answer(requests[1].body)
    assert told.startswith(f"MCP server 'rogue' ({sys.executable} ")
    assert told.endswith(f") failed on wait: {NOT_MCP}'this is not JSON-RPC either'")
    assert len([e for e in events if getattr(e, "type", "") == "mcp_tool_failed"]) == 1
    assert_nothing_left(tmp_path)


async def test_a_server_that_never_answers_initialize_fails_the_step_within_its_timeout(
    tmp_path: Path, model_server: StartLLMServer
) -> None:
    model_server([ServerRule(["never asked"])])
    result = await run_flow(rogue_flow(tmp_path, "hang-init"))
    assert result.status == "failed"
    error = result.steps["work"].error
    assert error is not None
    assert error.type == "McpUnavailable"
    assert error.message.startswith(f"MCP server 'rogue' ({sys.executable} ")
    assert error.message.endswith("): no answer to initialize within 5s")
    assert_nothing_left(tmp_path)


async def test_a_call_that_never_ends_is_answered_within_the_timeout_and_the_server_killed(
    tmp_path: Path, model_server: StartLLMServer
) -> None:
    rules = [ServerRule([ServerReply("", tool_calls=[CALL_WAIT]), "Noted."])]
    server = model_server(rules)
    result = await run_flow(rogue_flow(tmp_path, "hang-call"))
    requests = server.requests
    assert result.status == "completed", result.error
    assert tool_answer(requests[1].body).endswith(") failed on wait: no answer within 5s")
    assert_nothing_left(tmp_path)


def test_kill_9_of_the_run_kills_a_hung_server_and_its_child(tmp_path: Path) -> None:
    """The server ignores SIGTERM and its stdin closing; it dies all the same."""
    flow = scripted_flow(rogue_flow(tmp_path, "hang-call", timeout="600s"))
    run = subprocess.Popen(
        [sys.executable, "-m", "cadenza", "run", str(flow)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    called = tmp_path / "pids.called"
    try:
        deadline = time.monotonic() + 60
        while not called.exists():  # the server holds the run in its tool call
            assert run.poll() is None, "the run ended early"
            assert time.monotonic() < deadline, "the tool call never reached the server"
            time.sleep(0.05)
        server, child, _ = rogue_processes(tmp_path)
        assert running(server)
        assert running(child)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    deadline = time.monotonic() + 30
    while (running(server) or running(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert_nothing_left(tmp_path)


async def test_an_unreachable_url_server_is_named_with_its_url_and_cause(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    flow = write_flow(
        f"name: u\nmcpServers:\n  github: {{url: '{url}'}}\n"
        "agents:\n  a: {model: 'openai:m', tools: [github]}\n"
        "steps:\n  - {id: s, agent: a, instructions: hi}\n"
    )
    model_server([ServerRule(["never asked"])])
    result = await run_flow(flow)
    error = result.steps["s"].error
    assert error is not None
    assert error.message == f"MCP server 'github' ({url}): connection refused"
    assert not re.search("TaskGroup|sub-exception", error.message)


GUARD = Path(cadenza.__file__).parent / "actors" / "run" / "_mcp_guard.py"

STARTER = """
import os, subprocess, sys, threading
guard, stubborn, pids = sys.argv[1:]
def start():
    global started
    started = subprocess.Popen([sys.executable, "-I", "-S", guard, str(os.getpid()),
                                sys.executable, "-c", stubborn, pids])
    while not os.path.exists(pids):
        pass
thread = threading.Thread(target=start)
thread.start()
tid = thread.native_id
thread.join()
while os.path.exists(f"/proc/self/task/{tid}"):  # until Linux has let the thread go
    pass
print(started.pid, flush=True)
sys.stdin.read()
"""
"""Starts a stubborn server under the guard from a thread, which then ends."""

STUBBORN = (
    "import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\n"
    "os.replace(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(3600)\n"
)


def settled(pid: int) -> bool:
    """Whether ``pid`` waits in ``waitpid`` with no signal pending: it has handled every
    signal sent to it so far."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        waiting = Path(f"/proc/{pid}/wchan").read_text() == "do_wait"
    except OSError:
        return False
    pending = [line.split()[1] for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    return waiting and all(int(mask, 16) == 0 for mask in pending)


def test_the_guard_outlives_the_thread_that_started_it_but_not_the_process(
    tmp_path: Path,
) -> None:
    """Linux sends the parent-death signal when the forking *thread* ends: the guard
    must tell that apart from the death of the run's process."""
    pids = tmp_path / "pid"
    with subprocess.Popen(
        [sys.executable, "-c", STARTER, str(GUARD), STUBBORN, str(pids)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as starter:
        try:
            assert starter.stdout is not None
            guard = int(starter.stdout.readline())  # printed once the thread is gone
            server = int(pids.read_text())
            deadline = time.monotonic() + 30
            while running(guard) and not settled(guard) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert running(guard), "the guard took the thread's end for the run's"
            assert running(server)
        finally:
            starter.kill()
    deadline = time.monotonic() + 30
    while running(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(server), "the server outlived the process that started it"
