"""Agents use the tools of real MCP servers (``mcpServers:``), through the official SDK."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from cadenza import RunResult, Runtime, ToolPolicy
from cadenza.testing import RecordedRequest, ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import assert_refused, cadenza, run_flow
from tests._processes import running
from tests.conftest import WriteFlow

TIME_FLOW = """
name: clock
mcpServers:
  time: {command: mcp-server-time, args: [--local-timezone, UTC]}
agents:
  teller:
    model: "openai:m"
    tools: [time]
steps:
  - id: tell
    agent: teller
    instructions: "What time is it in Tokyo?"
"""


async def ask_the_time(
    zone: str, then: str, write_flow: WriteFlow, model_server: StartLLMServer
) -> tuple[RunResult, list[RecordedRequest]]:
    """TIME_FLOW, its model asking the time server for the time in ``zone``, then saying
    ``then``; the result, and the requests the model got."""
    call = ServerToolCall("time__get_current_time", {"timezone": zone})
    server = model_server([ServerRule([ServerReply("", tool_calls=[call]), ServerReply(then)])])
    return await run_flow(write_flow(TIME_FLOW)), server.requests


async def test_an_agent_calls_a_tool_of_a_real_mcp_server(
    write_flow: WriteFlow, mcp_path: str, model_server: StartLLMServer
) -> None:
    result, requests = await ask_the_time("Asia/Tokyo", "It is late.", write_flow, model_server)
    assert result.status == "completed", result.error
    offered = {tool["function"]["name"] for tool in requests[0].body["tools"]}
    assert {"time__get_current_time", "time__convert_time"} <= offered
    answer = tool_answers(requests[1].body)[0]
    assert json.loads(answer)["timezone"] == "Asia/Tokyo"  # the server's real answer
    assert result.steps["tell"].content == "It is late."


async def test_a_tool_that_fails_is_told_to_the_model_and_the_step_goes_on(
    write_flow: WriteFlow, mcp_path: str, model_server: StartLLMServer
) -> None:
    result, requests = await ask_the_time(
        "Nowhere/Atlantis", "No such place.", write_flow, model_server
    )
    assert result.status == "completed", result.error
    assert "Nowhere/Atlantis" in tool_answers(requests[1].body)[0]


@pytest.mark.parametrize(
    ("policy", "refusal"),
    [
        (ToolPolicy(sandbox=True), "the run is sandboxed"),
        (ToolPolicy(deny=["time.get_*"]), "denied by the rule time.get_*"),
        (ToolPolicy(allow=["time.convert_time"]), "not allowed: the allow rules are"),
    ],
)
async def test_permissions_name_mcp_tools_as_tools_does(
    write_flow: WriteFlow,
    mcp_path: str,
    model_server: StartLLMServer,
    policy: ToolPolicy,
    refusal: str,
) -> None:
    """Rules say ``SERVER.TOOL`` (globs too); the model hears the refusal as the tool's answer."""
    call = ServerToolCall("time__get_current_time", {"timezone": "Asia/Tokyo"})
    rules = [ServerRule([ServerReply("", tool_calls=[call]), ServerReply("Refused.")])]
    server = model_server(rules)
    async with Runtime(permissions=policy) as runtime:
        result = await runtime.run(write_flow(TIME_FLOW))
    requests = server.requests
    assert result.status == "completed", result.error
    answer = json.loads(tool_answers(requests[1].body)[0])
    assert answer["status"] == "error"
    assert answer["message"].startswith("permission denied: ")
    assert refusal in answer["message"]


async def test_a_server_that_does_not_start_fails_the_step_naming_it(
    write_flow: WriteFlow, mcp_path: str, model_server: StartLLMServer
) -> None:
    flow = TIME_FLOW.replace("command: mcp-server-time", "command: no-such-mcp-server-here")
    model_server([ServerRule(["never asked"])])
    result = await run_flow(write_flow(flow))
    assert result.status == "failed"
    error = result.steps["tell"].error
    assert error is not None
    assert error.type == "McpUnavailable"
    assert error.message == (
        "MCP server 'time' (no-such-mcp-server-here --local-timezone UTC): command not found"
    )


def test_killing_the_run_leaves_no_mcp_server_behind(tmp_path: Path, mcp_path: str) -> None:
    hold = tmp_path / "hold"
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        TIME_FLOW.replace('model: "openai:m"', "model: scripted").replace(
            "tools: [time]",
            "tools: [time, bash]\n    script:\n"
            "      - toolCalls: [{name: time__get_current_time, arguments: {timezone: UTC}}]\n"
            "      - toolCalls: [{name: bash, arguments: "
            f"{{command: 'touch {hold}.on; sleep 60'}}}}]",
        )
    )
    env = {**os.environ, "PATH": mcp_path}
    run = subprocess.Popen(
        [sys.executable, "-m", "cadenza", "run", str(flow)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not Path(f"{hold}.on").exists():  # the server answered; bash holds the run
            assert run.poll() is None, "the run ended early"
            assert time.monotonic() < deadline, "the run never reached its second tool call"
            time.sleep(0.05)
        servers = _children_named(run.pid, "mcp-server-time")  # its guard, and below it:
        servers += [pid for guard in servers for pid in _children_named(guard, "mcp-server-time")]
        assert len(servers) == 2, "no MCP server process was found under the run"
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in servers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in servers if running(pid)]


def _children_named(parent: int, name: str) -> list[int]:
    """Processes below ``parent`` whose command line mentions ``name``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat[1]) == parent and name in command:
            found.append(int(entry.name))
    return found


DESK = Path(__file__).with_name("desk_server.py")

DESK_FLOW = """
name: desk
mcpServers:
  desk:
    command: {python}
    args: [{server}]
    env: {{DESK_TOKEN: "${{DESK_TOKEN}}"}}
    timeout: 10s  # initialize included: the SDK alone takes 1-3 s to import here
agents:
  clerk:
    model: "openai:m"
    tools: [desk.shout, desk.reveal, desk.crash, desk.hang]
steps:
  - id: work
    agent: clerk
    instructions: "Work."
"""


def desk_flow(write_flow: WriteFlow) -> Path:
    return write_flow(DESK_FLOW.format(python=sys.executable, server=DESK))


def tool_answers(request_body: dict[str, object]) -> list[str]:
    messages = request_body["messages"]
    assert isinstance(messages, list)
    return [m["content"] for m in messages if m["role"] == "tool"]


@pytest.mark.parametrize(
    ("tool", "heard"),
    [
        ("desk__hang", "failed on hang: no answer within 10s"),
        ("desk__crash", "failed on crash: exited with code 3"),
    ],
)
async def test_a_server_that_hangs_or_crashes_fails_the_call_not_the_run(
    write_flow: WriteFlow,
    monkeypatch: pytest.MonkeyPatch,
    tool: str,
    heard: str,
    model_server: StartLLMServer,
) -> None:
    monkeypatch.setenv("DESK_TOKEN", "unused-token-value-1234")
    rules = [ServerRule([ServerReply("", tool_calls=[ServerToolCall(tool, {})]), "Noted."])]
    events: list[object] = []
    server = model_server(rules)
    async with Runtime() as runtime:
        handle = await runtime.start(desk_flow(write_flow), on_event=events.append)
        result = await handle.result()
    requests = server.requests
    assert result.status == "completed", result.error
    answer = json.loads(tool_answers(requests[1].body)[0])["message"]
    assert answer.startswith(f"MCP server 'desk' ({sys.executable} ")  # named, with its command
    assert answer.endswith(f") {heard}")
    failed = [e for e in events if getattr(e, "type", "") == "mcp_tool_failed"]
    assert len(failed) == 1


async def test_a_token_given_to_a_server_is_never_recorded(
    write_flow: WriteFlow,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    model_server: StartLLMServer,
) -> None:
    token = "desk-canary-7f3a9c21e5b84d06"
    monkeypatch.setenv("DESK_TOKEN", token)
    reveal = ServerToolCall("desk__reveal", {"variable": "DESK_TOKEN"})
    rules = [ServerRule([ServerReply("", tool_calls=[reveal]), f"The token is {token}."])]
    store = tmp_path / "runs.db"
    server = model_server(rules)
    async with Runtime(store=store) as runtime:
        handle = await runtime.start(desk_flow(write_flow))
        result = await handle.result()
        events = await runtime.stored_events(handle.run_id)
    requests = server.requests
    assert result.status == "completed", result.error
    # The server handed it back; the model provider gets it masked, like every record.
    answer = tool_answers(requests[1].body)[0]
    assert token not in answer
    assert "***" in answer
    assert token.encode() not in msgspec.json.encode(result)
    assert token.encode() not in msgspec.json.encode(events)
    assert token.encode() not in _store_bytes(tmp_path)


def _store_bytes(directory: Path) -> bytes:
    """Every byte of the SQLite store (and its WAL) in ``directory``."""
    return b"".join(path.read_bytes() for path in directory.glob("runs.db*"))


@pytest.fixture
def desk_url(tmp_path: Path) -> Iterator[str]:
    """Our server over streamable HTTP on 127.0.0.1; it stops when its stdin closes."""
    port_file = tmp_path / "port"
    desk = subprocess.Popen(
        [sys.executable, str(DESK), "http", str(port_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert desk.poll() is None, "the HTTP server ended"
            assert time.monotonic() < deadline, "the HTTP server never started"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text()}/mcp"
    finally:
        assert desk.stdin is not None
        desk.stdin.close()
        desk.wait(timeout=30)


async def test_a_streamable_http_server_serves_an_agent(
    write_flow: WriteFlow,
    monkeypatch: pytest.MonkeyPatch,
    desk_url: str,
    model_server: StartLLMServer,
) -> None:
    flow = f"""
name: http
mcpServers:
  desk: {{url: "{desk_url}", headers: {{Authorization: "Bearer ${{DESK_TOKEN}}"}}}}
agents:
  clerk: {{model: "openai:m", tools: [desk.shout]}}
steps:
  - id: work
    agent: clerk
    instructions: "Work."
"""
    monkeypatch.setenv("DESK_TOKEN", "http-token-value-5678")
    shout = ServerToolCall("desk__shout", {"text": "hello"})
    rules = [ServerRule([ServerReply("", tool_calls=[shout]), "Done."])]
    server = model_server(rules)
    result = await run_flow(write_flow(flow))
    requests = server.requests
    assert result.status == "completed", result.error
    assert tool_answers(requests[1].body)[0] == "HELLO"


def test_the_example_runs_offline_against_mcp_server_time(mcp_path: str) -> None:
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [sys.executable, "-m", "cadenza", "run", "examples/mcp-time.yaml", "--events", "--json"],
        cwd=root,
        env={**os.environ, "PATH": mcp_path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    ends = [e["data"] for e in events if e["type"] == "tool_call" and e["data"]["phase"] == "end"]
    assert json.loads(ends[0]["output"])["timezone"] == "Asia/Tokyo"
    assert json.loads(run.stdout)["status"] == "completed"


@pytest.mark.parametrize(
    ("server", "tools", "problem"),
    [
        ("{command: x, url: 'http://h'}", "[desk]", "either command (stdio) or url"),
        ("{}", "[desk]", "either command (stdio) or url"),
        ("{command: x, timeout: soon}", "[desk]", "'soon' is not a duration"),
        ("{url: 'ftp://h'}", "[desk]", "'ftp://h' is not an http(s) URL"),
        ("{command: x}", "[dsk]", "unknown tool 'dsk'"),
        ("{command: x}", "[desk.shout, other.tool]", "'other' is no MCP server"),
    ],
)
def test_validate_refuses_mcp_mistakes_at_load(
    tmp_path: Path, server: str, tools: str, problem: str
) -> None:
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        f"name: m\nmcpServers:\n  desk: {server}\n"
        f"agents:\n  a: {{model: 'openai:m', tools: {tools}}}\n"
        "steps:\n  - id: s\n    agent: a\n    instructions: hi\n"
    )
    checked = cadenza("validate", str(flow), cwd=tmp_path)
    assert_refused(checked, problem, f"{flow}:")  # located


def test_a_bare_unknown_tool_name_stays_zenflow_legal_without_mcp_servers(tmp_path: Path) -> None:
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "name: z\nagents:\n  a: {model: 'openai:m', tools: [read_file, search]}\n"
        "steps:\n  - id: s\n    agent: a\n    instructions: hi\n"
    )
    checked = subprocess.run(
        [sys.executable, "-m", "cadenza", "validate", str(flow)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stderr
