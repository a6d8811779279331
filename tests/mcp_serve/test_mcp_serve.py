"""`cadenza mcp serve` as MCP clients use it: the official SDK's client, a real server process.

Each test spawns the command as a user's MCP client would (stdio), or starts it on
HTTP and connects with the token; the run store is a real SQLite file the tests
read back. A client "killed mid-run" is a process of its own (call_client.py)
killed with SIGKILL: nothing of it says goodbye.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitRequestParams, ElicitResult

from cadenza.store import RunRow
from tests._helpers import DEADLINE, EXAMPLES, assert_refused, cadenza, opened_store
from tests._processes import running

CLIENT = Path(__file__).with_name("call_client.py")
SERVE = ("-m", "cadenza", "mcp", "serve")
ENV = {k: v for k, v in os.environ.items() if k != "CADENZA_MCP_TOKEN"}

SLOW = """\
name: slow
description: Naps until it is cancelled.
steps:
  - id: nap
    command: "echo $$ > {pid}; exec sleep 30"
"""


@dataclass(frozen=True)
class Slow:
    """A root holding the slow workflow, and where its command writes its pid."""

    root: Path
    pid: Path


@pytest.fixture
def slow(tmp_path: Path) -> Slow:
    root = tmp_path / "flows"
    root.mkdir()
    pid = tmp_path / "nap.pid"
    (root / "slow.yaml").write_text(SLOW.format(pid=pid))
    return Slow(root, pid)


@asynccontextmanager
async def stdio_session(
    *args: str, cwd: Path, errlog: Path | None = None, **kwargs: Any
) -> AsyncIterator[ClientSession]:
    """A session with ``cadenza mcp serve ARGS``, spawned by the SDK as any client would."""
    server = StdioServerParameters(command=sys.executable, args=[*SERVE, *args], env=ENV, cwd=cwd)
    with open(errlog or os.devnull, "w") as err:  # noqa: ASYNC230 (opened once, not read)
        async with (
            stdio_client(server, errlog=err) as (read, write),
            ClientSession(read, write, **kwargs) as session,
        ):
            await session.initialize()
            yield session


async def runs(store: Path) -> list[RunRow]:
    async with opened_store(store) as opened:
        return await opened.list_runs()


async def until_status(store: Path, status: str) -> RunRow:
    """The store's one run once it has ``status``; fails the test after `DEADLINE`."""
    rows: list[RunRow] = []
    with anyio.move_on_after(DEADLINE):
        # Another process's store: nothing here is told when it changes.
        while not (rows := await runs(store)) or rows[0].status != status:  # noqa: ASYNC110
            await anyio.sleep(0.05)
        return rows[0]
    pytest.fail(f"waited {DEADLINE:g} s for a run {status}: {rows}")


class Progress:
    """A progress callback that keeps what it is told; `until` waits for a message."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str]] = []
        self._changed = anyio.Event()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, message or ""))
        self._changed.set()
        self._changed = anyio.Event()

    async def until(self, words: str) -> None:
        with anyio.fail_after(DEADLINE):
            while not any(words in message for _, message in self.seen):
                await self._changed.wait()


# -- stdio -----------------------------------------------------------------------------


async def test_lists_the_examples_as_tools_with_their_inputs_as_schemas(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    async with stdio_session("--root", str(EXAMPLES), "--store", str(store), cwd=tmp_path) as s:
        tools = {tool.name: tool for tool in (await s.list_tools()).tools}
    files = list(EXAMPLES.rglob("*.yaml"))
    assert len(tools) == len(files)  # every example loads, each its own tool
    assert {"negotiation-messages", "control-signoff", "build-test-ship"} <= set(tools)
    negotiation = tools["negotiation-messages"]
    assert negotiation.description == (
        "Buyer and seller trade offers through a coordinator until they agree."
    )
    assert negotiation.input_schema == {
        "type": "object",
        "properties": {"item": {"type": "string", "default": "a vintage synthesizer"}},
        "additionalProperties": False,
    }
    assert tools["ticket-desk"].input_schema["required"] == ["ticket"]
    assert tools["control-impossible"].input_schema["properties"]["keywords"]["type"] == "array"


async def test_a_call_runs_the_workflow_reports_progress_and_answers_its_output(
    tmp_path: Path,
) -> None:
    store = tmp_path / "runs.db"
    progress = Progress()
    async with stdio_session("--root", str(EXAMPLES), "--store", str(store), cwd=tmp_path) as s:
        result = await s.call_tool(
            "negotiation-messages", {"item": "a piano"}, progress_callback=progress
        )
        refused = await s.call_tool("negotiation-messages", {"itm": "a piano"})
        with pytest.raises(MCPError, match="no workflow tool 'no-such-flow'"):
            await s.call_tool("no-such-flow", {})
    assert not result.is_error
    assert [block.text for block in result.content if block.type == "text"] == ["DEAL at 800."]
    summary = result.structured_content
    assert summary is not None
    assert (summary["status"], summary["output"]) == ("completed", "DEAL at 800.")
    [row] = await runs(store)
    assert (row.run_id, row.status, row.inputs) == (
        summary["runId"],
        "completed",
        {"item": "a piano"},
    )
    messages = [message for _, message in progress.seen]
    assert "0/1 steps: rounds.0.seller started" in messages
    assert messages[-1] == "1/1 steps: rounds done"
    numbers = [number for number, _ in progress.seen]
    assert numbers == sorted(set(numbers))  # MCP: progress grows with every notification
    assert refused.is_error
    assert "unknown input 'itm'" in refused.content[0].text  # type: ignore[union-attr]


async def test_a_failed_run_is_a_tool_error_naming_the_step(tmp_path: Path) -> None:
    root = tmp_path / "flows"
    root.mkdir()
    (root / "broken.yaml").write_text(
        "name: broken\nsteps:\n  - id: fine\n    command: 'true'\n"
        "  - id: boom\n    dependsOn: [fine]\n    command: 'echo nope >&2; exit 3'\n"
    )
    store = tmp_path / "runs.db"
    async with stdio_session("--root", str(root), "--store", str(store), cwd=tmp_path) as s:
        result = await s.call_tool("broken", {})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.startswith(f"run {(await runs(store))[0].run_id} failed at step boom: "), text
    assert result.structured_content is not None
    assert result.structured_content["error"]["address"] == "boom"


async def test_files_that_do_not_load_are_skipped_with_a_warning_on_stderr(tmp_path: Path) -> None:
    root = tmp_path / "flows"
    (root / "more").mkdir(parents=True)
    (root / "good.yaml").write_text("name: my flow!\nsteps:\n  - id: a\n    command: 'true'\n")
    (root / "more" / "twin.yaml").write_text(
        "name: my flow!\nsteps:\n  - id: a\n    command: 'true'\n"
    )
    (root / "bad.yaml").write_text("name: bad\nsteps:\n  - id: a\n    nothing: here\n")
    errlog = tmp_path / "stderr.txt"
    store = tmp_path / "runs.db"
    async with stdio_session(
        "--root", str(root), "--store", str(store), cwd=tmp_path, errlog=errlog
    ) as session:
        # The warnings went to stderr, not into the protocol: the session works.
        names = [tool.name for tool in (await session.list_tools()).tools]
    assert names == ["my_flow_"]  # MCP's tool-name characters only
    said = errlog.read_text()
    assert "skipped bad.yaml: it does not load" in said
    assert "skipped more/twin.yaml: the tool name 'my_flow_' is good.yaml's" in said


async def test_a_cancelled_call_cancels_its_run_and_its_command(tmp_path: Path, slow: Slow) -> None:
    store = tmp_path / "runs.db"
    progress = Progress()
    async with stdio_session("--root", str(slow.root), "--store", str(store), cwd=tmp_path) as s:
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: s.call_tool("slow", {}, progress_callback=progress))
            await progress.until("nap started")
            await until_file(slow.pid)
            group.cancel_scope.cancel()  # the SDK sends notifications/cancelled
        row = await until_status(store, "cancelled")
        assert (await s.list_tools()).tools  # the session goes on
    assert row.result is not None
    assert row.result.error is not None
    assert row.result.error.message == "the MCP client cancelled the call"
    assert not running(slow.pid)


async def until_file(path: Path) -> None:
    """Returns once another process has written ``path``; fails the test after `DEADLINE`."""

    def written() -> bool:
        return path.exists() and bool(path.read_text().strip())

    with anyio.fail_after(DEADLINE):
        while not await anyio.to_thread.run_sync(written):  # noqa: ASYNC110 (another process's)
            await anyio.sleep(0.05)


@asynccontextmanager
async def client_process(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[Client]:
    """``call_client.py ARGS`` as a process; killed (SIGKILL) when the block ends."""
    process = await anyio.open_process(
        [sys.executable, str(CLIENT), *args], env={**ENV, **(env or {})}, stderr=subprocess.PIPE
    )
    try:
        yield Client(process)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        await process.aclose()


class Client:
    """What the client process printed, line by line."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._buffer = b""

    async def until(self, line: str) -> None:
        """Reads its output until it prints ``line``; fails the test after `DEADLINE`."""
        assert self.process.stdout is not None
        with anyio.fail_after(DEADLINE):
            while line not in self.lines:
                chunk = await self.process.stdout.receive()
                self._buffer += chunk
                *done, rest = self._buffer.split(b"\n")
                self._buffer = rest
                self.lines.extend(part.decode() for part in done)


async def test_killing_a_stdio_client_mid_run_cancels_the_run(tmp_path: Path, slow: Slow) -> None:
    store = tmp_path / "runs.db"
    serve = ("--root", str(slow.root), "--store", str(store))
    async with client_process("stdio", "slow", *serve) as client:
        await client.until("0/1 steps: nap started")
        await until_file(slow.pid)
        assert (await runs(store))[0].status == "running"
        client.process.send_signal(signal.SIGKILL)
    row = await until_status(store, "cancelled")
    assert row.result is not None
    assert row.result.error is not None
    assert row.result.error.message == "the MCP client cancelled the call"
    assert not running(slow.pid)


def parent_of(pid: Path) -> int:
    """The parent process of the process whose id ``pid`` holds."""
    stat = Path(f"/proc/{int(pid.read_text())}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


async def test_sigterm_stops_a_stdio_server_after_cancelling_its_calls_runs(
    tmp_path: Path, slow: Slow
) -> None:
    store = tmp_path / "runs.db"
    serve = ("--root", str(slow.root), "--store", str(store))
    async with client_process("stdio", "slow", *serve) as client:
        await client.until("0/1 steps: nap started")
        await until_file(slow.pid)
        server = parent_of(slow.pid)  # the command step's shell is the server's child
        os.kill(server, signal.SIGTERM)
        row = await until_status(store, "cancelled")
        with anyio.fail_after(DEADLINE):
            await client.process.wait()  # its server is gone: the call fails
    assert row.result is not None
    assert row.result.error is not None
    assert row.result.error.message == "the MCP client cancelled the call"
    assert not running(slow.pid)
    assert not running(server)


# -- a person's answer -----------------------------------------------------------------


async def test_a_human_step_asks_the_client_and_the_run_goes_on_with_the_answer(
    tmp_path: Path,
) -> None:
    store = tmp_path / "runs.db"
    asked: list[ElicitRequestParams] = []

    async def answer(context: Any, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params)
        if len(asked) == 1:  # not one of the decisions: asked again, told why
            return ElicitResult(action="accept", content={"decision": "maybe"})
        return ElicitResult(action="accept", content={"decision": "accept"})

    async with stdio_session(
        "--root", str(EXAMPLES), "--store", str(store), cwd=tmp_path, elicitation_callback=answer
    ) as session:
        result = await session.call_tool("control-signoff", {})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["status"] == "completed"
    assert "durable" in result.structured_content["output"]
    first, second = asked
    schema = first.requested_schema  # type: ignore[union-attr]
    assert schema["properties"]["decision"] == {
        "type": "string",
        "enum": ["accept", "retry", "stop"],
    }
    assert schema["required"] == ["decision"]
    assert "Not recorded" in second.message
    assert "maybe" in second.message
    [row] = await runs(store)
    assert row.status == "completed"


async def test_without_elicitation_the_call_says_how_to_answer_and_the_run_waits(
    tmp_path: Path,
) -> None:
    store = tmp_path / "runs.db"
    async with stdio_session("--root", str(EXAMPLES), "--store", str(store), cwd=tmp_path) as s:
        result = await s.call_tool("control-signoff", {})
    assert not result.is_error
    assert result.structured_content is not None
    run_id = result.structured_content["runId"]
    assert result.structured_content["status"] == "waiting"
    assert result.structured_content["waitingFor"] == ["signoff.0.human"]
    text = result.content[0].text  # type: ignore[union-attr]
    hint = f"cadenza signal {run_id} signoff.0.human --data 'JSON' --store {store}"
    assert hint in text, text
    assert (await until_status(store, "waiting")).run_id == run_id
    # The commands it names answer the run.
    answered = cadenza(
        "signal", run_id, "signoff.0.human", "--data", '{"decision": "accept"}',
        "--store", str(store), cwd=tmp_path,
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    resumed = cadenza("resume", run_id, "--store", str(store), "--json", cwd=EXAMPLES)
    assert json.loads(resumed.stdout)["status"] == "completed", resumed.stderr


# -- streamable HTTP -------------------------------------------------------------------


@dataclass(frozen=True)
class Http:
    url: str
    token: str
    said: list[str]
    """What the server wrote on stderr, once it has stopped."""


@contextmanager
def http_server(*args: str, cwd: Path, token: str) -> Iterator[Http]:
    """``cadenza mcp serve --http 127.0.0.1:0 --token-file F ARGS`` until the block ends."""
    token_file = cwd / "token"
    token_file.write_text(f"{token}\n")
    process = subprocess.Popen(
        [sys.executable, *SERVE, "--http", "127.0.0.1:0", "--token-file", str(token_file), *args],
        cwd=cwd,
        env=ENV,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    said: list[str] = []
    try:
        line = process.stderr.readline()
        said.append(line)
        assert "listening on http://127.0.0.1:" in line, line
        assert token not in line  # the user's own token is never echoed
        url = line.split("listening on ", 1)[1].split(" ", 1)[0]
        yield Http(url, token, said)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=DEADLINE)
        finally:
            process.kill()
            said.extend(process.stderr)
            process.stderr.close()
    assert process.returncode == 0, said


@asynccontextmanager
async def http_session(url: str, token: str, **kwargs: Any) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as streams,
        ClientSession(streams[0], streams[1], **kwargs) as session,
    ):
        await session.initialize()
        yield session


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}
TOKEN = "the-token-of-these-tests"


def test_over_http_every_request_needs_the_token(tmp_path: Path) -> None:
    token = "s3cret-token-of-the-test"
    store = tmp_path / "runs.db"
    serve = ("--root", str(EXAMPLES), "--store", str(store))
    with http_server(*serve, cwd=tmp_path, token=token) as h:
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": f"Bearer {token.upper()}"},  # another case is another token
            {"Authorization": f"Basic {token}"},
            {"Authorization": f"Bearer {token}x"},
        ):
            refused = httpx.post(h.url, json=INITIALIZE, headers={**ACCEPT, **headers})
            assert refused.status_code == 401, (headers, refused.text)
            assert token not in refused.text
        wrong_host = httpx.post(
            h.url,
            json=INITIALIZE,
            headers={**ACCEPT, "Authorization": f"Bearer {token}", "Host": "evil.example"},
        )
        assert wrong_host.status_code == 403  # DNS rebinding: loopback names only
        accepted = httpx.post(
            h.url, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {token}"}
        )
        assert accepted.status_code == 200, accepted.text
    assert h.said
    assert token not in "".join(h.said)


async def test_over_http_a_call_answers_with_progress_and_output(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    progress = Progress()
    serve = ("--root", str(EXAMPLES), "--store", str(store))
    with http_server(*serve, cwd=tmp_path, token=TOKEN) as h:
        async with http_session(h.url, h.token) as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            result = await session.call_tool("negotiation-messages", {}, progress_callback=progress)
    assert "negotiation-messages" in names
    assert not result.is_error
    assert result.structured_content is not None
    assert result.structured_content["output"] == "DEAL at 800."
    assert progress.seen[-1][1] == "1/1 steps: rounds done"
    assert [row.status for row in await runs(store)] == ["completed"]


async def test_over_http_a_human_step_is_asked_too(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"

    async def answer(context: Any, params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content={"decision": "accept"})

    serve = ("--root", str(EXAMPLES), "--store", str(store))
    with http_server(*serve, cwd=tmp_path, token=TOKEN) as h:
        async with http_session(h.url, h.token, elicitation_callback=answer) as session:
            result = await session.call_tool("control-signoff", {})
    assert result.structured_content is not None
    assert result.structured_content["status"] == "completed", result.content


async def test_killing_an_http_client_mid_run_cancels_the_run(tmp_path: Path, slow: Slow) -> None:
    store = tmp_path / "runs.db"
    serve = ("--root", str(slow.root), "--store", str(store))
    with http_server(*serve, cwd=tmp_path, token=TOKEN) as h:
        async with client_process("http", "slow", h.url, env={"MCP_TOKEN": h.token}) as client:
            await client.until("0/1 steps: nap started")
            await until_file(slow.pid)
            client.process.send_signal(signal.SIGKILL)
        row = await until_status(store, "cancelled")
    assert row.result is not None
    assert row.result.error is not None
    assert row.result.error.message == "the MCP client cancelled the call"
    assert not running(slow.pid)


# -- the command line ------------------------------------------------------------------


def test_the_command_refuses_what_cannot_work(tmp_path: Path) -> None:
    missing = cadenza("mcp", "serve", "--root", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert_refused(missing, "--root", "is not a directory")
    stray = cadenza("mcp", "serve", "--token-file", str(tmp_path / "t"), cwd=tmp_path)
    assert_refused(stray, "--token-file goes with --http")
    (tmp_path / "empty").write_text("\n")
    empty = cadenza(
        "mcp", "serve", "--http", "127.0.0.1:0", "--token-file", str(tmp_path / "empty"),
        cwd=tmp_path,
    )  # fmt: skip
    assert_refused(empty, "is empty")
    address = cadenza("mcp", "serve", "--http", "127.0.0.1:http", cwd=tmp_path)
    assert_refused(address, "is not HOST:PORT")
