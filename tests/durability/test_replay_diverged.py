"""A resumed agent step whose journal no longer matches what it asks goes live there.

The application builds its workflow in Python (its agent's prompt includes a
context file, read when the step starts), starts the run on a SQLite file and
leaves its runtime while the agent's third tool call is parked (as a crash
would cut it off). It then resumes the run: unchanged, the agent replays its
recorded calls and sends the model nothing it had sent; with the context file
changed underneath, the prompt of the first call is not the recorded one, a
``replay_diverged`` event says so, and the agent calls the model live from its
first turn.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from cadenza import Runtime
from cadenza import build as b
from cadenza.events import ReplayDiverged, payload
from cadenza.protocols import Event
from cadenza.testing import ScriptedLLMServer, ServerReply, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from cadenza.workflow import LoadedWorkflow
from tests._helpers import import_source, opened_store

TOOLS = """
import asyncio

hold_at = 0  # the call that parks, in the application's process (0: none)
calls = 0
parked = asyncio.Event()


async def note(n: int) -> str:
    global calls
    calls += 1
    if calls == hold_at:
        parked.set()
        await asyncio.Event().wait()
    return f"noted {n}"
"""


def replies() -> list[ServerReply]:
    notes = [ServerReply(tool_calls=[ServerToolCall("note", {"n": n})]) for n in (1, 2, 3, 4)]
    return [*notes, ServerReply(content="all noted")]


def flow(tools: ModuleType, directory: Path) -> LoadedWorkflow:
    return b.workflow(
        "noter",
        steps=[
            b.agent(
                "take",
                "Take notes.",
                prompt="You take notes.",
                model="openai:gpt-test",
                tools=[f"{tools.__name__}:note"],
                context_files=["brief.md"],
            )
        ],
        base_dir=directory,
    )


async def interrupted(tools: ModuleType, store: Path, server: ScriptedLLMServer) -> None:
    """Starts run r-1 and leaves the runtime while the third ``note`` is parked."""
    tools.__dict__["hold_at"] = 3  # a module made from text: mypy cannot see its names
    (store.parent / "brief.md").write_text("Notes on the first meeting.\n")
    async with Runtime(store=store, shutdown_deadline=0) as runtime:
        await runtime.start(flow(tools, store.parent), run_id="r-1")
        await tools.__dict__["parked"].wait()
    tools.__dict__["hold_at"] = 0
    assert server.request_count == 3


async def resumed(store: Path) -> list[Event]:
    events: list[Event] = []
    async with Runtime(store=store) as runtime:
        handle = await runtime.resume("r-1", on_event=events.append)
        result = await handle.result()
    assert result.status == "completed", result.error
    assert result.steps["take"].content == "all noted"
    return events


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return import_source(tmp_path, TOOLS, monkeypatch, prefix="noting")


async def test_unchanged_it_replays_and_sends_nothing_twice(
    model_server: StartLLMServer, tools: ModuleType, tmp_path: Path
) -> None:
    server = model_server([ServerRule(replies())])
    store = tmp_path / "runs.db"
    await interrupted(tools, store, server)
    events = await resumed(store)
    assert server.request_count == 5  # 3 before, 2 after: none sent again
    assert tools.__dict__["calls"] == 3 + 2  # notes 1-2 replayed; 3 (cut off) and 4 run
    assert not [e for e in events if e.type == "replay_diverged"]


async def test_a_changed_prompt_diverges_at_the_first_call_and_goes_live(
    model_server: StartLLMServer, tools: ModuleType, tmp_path: Path
) -> None:
    notes = replies()
    server = model_server([ServerRule(notes[:3] + notes)])  # the first 3, then all 5
    store = tmp_path / "runs.db"
    await interrupted(tools, store, server)
    (tmp_path / "brief.md").write_text("Notes on the second meeting.\n")
    events = await resumed(store)
    diverged = [
        (e.step_id, payload(e, ReplayDiverged)) for e in events if e.type == "replay_diverged"
    ]
    assert [(where, data.seq, data.kind) for where, data in diverged] == [("take", 1, "model")]
    assert "asks otherwise" in diverged[0][1].reason
    assert server.request_count == 3 + 5  # the whole visit again, live
    assert "second meeting" in str(server.requests[3].body)
    async with opened_store(store) as opened:
        stored = await opened.events("r-1")
    assert [e.type for e in stored].count("replay_diverged") == 1
