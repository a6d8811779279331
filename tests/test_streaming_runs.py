"""A run whose model streams: text shown as it arrives, coalesced, never stored."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import anyio
import pytest

from cadenza import Event, Runtime
from cadenza.testing import ScriptedLLMServer, ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import cadenza, started
from tests.conftest import WriteFlow

from ._terminal import Terminal

STORY = " ".join(f"word{n}" for n in range(400))  # 2,389 characters
FLOW = """
name: streamed
agents:
  writer: {model: "openai:m-test", prompt: "Write."}
steps:
  - id: write
    agent: writer
    instructions: "Tell the story."
"""


@pytest.fixture
def server(model_server: StartLLMServer) -> ScriptedLLMServer:
    """An OpenAI-compatible server that streams STORY one character a delta."""
    return model_server([ServerRule([ServerReply(content=STORY, chunk=1)])])


async def test_deltas_reach_the_events_coalesced_and_the_store_keeps_none(
    server: ScriptedLLMServer, write_flow: WriteFlow, tmp_path: Path
) -> None:
    """2,389 one-character deltas arrive as a few ``output`` events whose text is the reply."""
    path = write_flow(FLOW)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        started = time.monotonic()
        handle = await runtime.start(path)
        events = [event async for event in handle.events()]
        took = time.monotonic() - started
        stored = await runtime.store.events(handle.run_id)
    result = await handle.result()
    deltas = [e for e in events if e.type == "output"]
    assert result.status == "completed"
    assert result.output == STORY
    assert "".join(e.delta or "" for e in deltas) == STORY
    assert {(e.step_id, e.agent, e.agent_id) for e in deltas} == {("write", "writer", "writer")}
    # zenflow's end of a stream: the last one only says the reply's text is done.
    assert [e.done for e in deltas] == [False] * (len(deltas) - 1) + [True]
    # The stated bound: one event per 100 ms, or per 1,024 characters, plus the last.
    assert 1 <= len(deltas) <= took / 0.1 + len(STORY) / 1024 + 2
    assert server.requests[0].body["stream"] is True
    assert "output" not in {e.type for e in stored}
    assert {e.seq for e in deltas} == {0}  # not numbered: the record's seqs have no gaps
    recorded = [e.seq for e in events if e.type != "output"]
    assert recorded == list(range(1, len(recorded) + 1))


def test_the_events_flag_prints_deltas_and_runs_show_does_not(
    server: ScriptedLLMServer, write_flow: WriteFlow, tmp_path: Path
) -> None:
    """``--events`` shows the deltas live; the stored stream is the run's record without them."""
    path = str(write_flow(FLOW))
    proc = cadenza("run", path, "--events", "--store", "runs.db", "--run-id", "r-s", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    live = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    text = "".join(e["delta"] for e in live if e["type"] == "output")
    assert text == STORY
    assert [e["done"] for e in live if e["type"] == "output"][-1] is True
    shown = cadenza("runs", "show", "r-s", "--events", "--store", "runs.db", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert '"type":"output"' not in shown.stdout
    assert '"type":"step_end"' in shown.stdout


def test_a_terminal_shows_what_the_agent_is_writing(
    server: ScriptedLLMServer, write_flow: WriteFlow, tmp_path: Path
) -> None:
    """On a TTY the running step's line ends with the newest words its model streamed."""
    path = str(write_flow(FLOW))
    with Terminal("run", path, "--store", "runs.db", cwd=tmp_path) as tty:
        tty.read_until(r"⋯ write\s+running \d+s\s+│ .*word\d+")
        assert tty.wait() == 0
    assert "✓ write" in tty.text


async def test_a_subscriber_joining_mid_reply_gets_the_text_so_far_first(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """Half the reply streamed, then a new subscriber: one `whole` output, then the rest."""
    pause = threading.Event()
    reply = ServerReply(content=STORY, chunk=1, pause=pause)
    model_server([ServerRule([reply])])
    async with Runtime() as runtime:
        early: list[str] = []
        streaming = anyio.Event()

        def watch(event: Event) -> None:
            if event.type == "output":
                early.append(event.delta or "")
                streaming.set()

        handle = await runtime.start(write_flow(FLOW), on_event=watch)
        await streaming.wait()  # the server holds the second half back
        late = handle.events()
        so_far = "".join(early)
        pause.set()
        deltas = [e async for e in late if e.type == "output"]
        result = await handle.result()
    assert result.output == STORY
    first, *rest = deltas
    assert first.data == {"whole": True}
    assert first.delta == so_far
    assert first.done is False
    assert STORY.startswith(so_far)
    assert so_far + "".join(d.delta or "" for d in rest) == STORY
    assert all(d.data is None for d in rest)
    assert rest[-1].done is True


TURNS = """
name: turns
agents:
  seller: {model: "openai:m-test", prompt: "Sell.", tools: [glob]}
steps:
  - id: sell
    agent: seller
    instructions: "Sell the bike."
"""
LOOK = ServerToolCall(name="glob", arguments={"pattern": "*.none"})


def _turns(last: ServerReply) -> list[ServerRule]:
    """Two replies that each say something and call a tool, then ``last``."""
    replies = [
        ServerReply(content="It is in mint condition.", tool_calls=[LOOK], chunk=4),
        ServerReply(content="Offer sent.", tool_calls=[LOOK], chunk=4),
        last,
    ]
    return [ServerRule(replies)]


async def test_each_replys_text_ends_with_done(
    write_flow: WriteFlow, model_server: StartLLMServer
) -> None:
    """zenflow's ``done``: the last ``output`` of every model call says its text ends."""
    model_server(_turns(ServerReply(content="Deal.")))
    async with started(write_flow(TURNS)) as (handle, _):
        events = [event async for event in handle.events()]
    replies: list[str] = [""]
    for event in events:
        if event.type == "output":
            replies[-1] += event.delta or ""
            if event.done:
                replies.append("")
    assert replies == ["It is in mint condition.", "Offer sent.", "Deal.", ""]


def test_a_terminal_does_not_run_one_replys_words_into_the_next(
    write_flow: WriteFlow, tmp_path: Path, model_server: StartLLMServer
) -> None:
    """The line of a running agent shows its newest words: a turn's end is a break."""
    held = threading.Event()
    model_server(_turns(ServerReply(content="Deal.", hold=held)))
    path = str(write_flow(TURNS))
    with Terminal("run", path, "--store", "runs.db", cwd=tmp_path) as tty:
        tty.read_until(r"│ It is in mint condition\. Offer sent\.")  # the third call waits
        held.set()
        assert tty.wait() == 0
    assert "condition.Offer" not in tty.text
