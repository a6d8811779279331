"""Shutting a runtime down interrupts its runs (resumable); cancelling one ends it.

Leaving ``async with Runtime()`` while runs are going leaves each as after a
crash: status ``running``, finished steps kept, lease released, so a new
runtime on the same store resumes it without redoing finished steps. An
explicit `RunHandle.cancel` is final; its ``deadline`` bounds how long steps
may take to stop.

The handlers live in a module the test imports itself, so it can hold a step
(``gate``), know when it is parked there (``parked``) and count executions.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from cadenza import Event, EventSubscription, RunHandle, Runtime
from cadenza.kernel import FakeClock
from tests._helpers import import_source

HANDLERS = """
import asyncio
import collections

executions = collections.Counter()
gate = asyncio.Event()
parked = asyncio.Event()
cleaning = asyncio.Event()


async def first(ctx):
    executions[ctx.address] += 1
    return "first done"


async def held(ctx):
    executions[ctx.address] += 1
    parked.set()
    await gate.wait()
    return f"held done (attempt {ctx.attempt})"


async def stubborn(ctx):
    executions[ctx.address] += 1
    parked.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cleaning.set()
        await asyncio.Event().wait()  # a clean-up that never ends on its own
        raise
"""

FLOW = """
name: two-steps
steps:
  - {id: first, handler: "MODULE:first"}
  - {id: second, handler: "MODULE:SECOND", dependsOn: [first]}
output: "steps.second.content"
"""


def handlers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Writes the handler module under a unique name and imports it."""
    return import_source(tmp_path, HANDLERS, monkeypatch, prefix="shutdown_steps")


async def collect(events: EventSubscription) -> list[Event]:
    return [event async for event in events]


def flow(tmp_path: Path, module: ModuleType, second: str = "held") -> Path:
    path = tmp_path / "flow.yaml"
    text = FLOW.replace("MODULE", module.__name__).replace("SECOND", second)
    path.write_text(textwrap.dedent(text))
    return path


async def test_shutdown_leaves_a_run_resumable_and_resume_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted at shutdown: running, listed resumable; resumed: completed, first not rerun."""
    steps = handlers(tmp_path, monkeypatch)
    path, store = flow(tmp_path, steps), tmp_path / "runs.db"
    async with Runtime(store=store) as runtime:
        handle = await runtime.start(path, run_id="r1")
        watcher = asyncio.create_task(collect(handle.events()))
        await steps.parked.wait()
    interrupted = await handle.result()
    assert interrupted.status == "running"
    assert interrupted.error is not None
    assert interrupted.error.type == "Interrupted"
    seen = [event.type for event in await watcher]  # the subscriber is told, and ends
    assert seen[0] == "workflow_start"
    assert seen[-1] == "run_interrupted"
    assert "workflow_end" not in seen

    steps.gate.set()
    async with Runtime(store=store) as runtime:
        row = await runtime.get_run("r1")
        assert row.status == "running"
        assert [r.run_id for r in await runtime.resumable()] == ["r1"]
        resumed = await runtime.resume("r1")  # no LeaseHeld: the lease was released
        result = await resumed.result()
        stored = [event.type for event in await runtime.stored_events("r1")]
    assert result.status == "completed", result.error
    assert result.output == "held done (attempt 2)"
    assert result.steps["first"].attempts == 1
    assert steps.executions == {"first": 1, "second": 2}
    assert stored.index("run_interrupted") < stored.index("run_resumed")
    assert stored[-1] == "workflow_end"


async def test_an_explicit_cancel_is_final(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelled by the caller: cancelled in the store, not resumable, never rerun."""
    steps = handlers(tmp_path, monkeypatch)
    path, store = flow(tmp_path, steps), tmp_path / "runs.db"
    async with Runtime(store=store) as runtime:
        handle = await runtime.start(path, run_id="r1")
        await steps.parked.wait()
        handle.cancel("not needed any more")
        result = await handle.result()
    assert result.status == "cancelled"
    assert result.steps["second"].status == "cancelled"
    steps.gate.set()
    async with Runtime(store=store) as runtime:
        assert (await runtime.get_run("r1")).status == "cancelled"
        assert await runtime.resumable() == []
        again = await (await runtime.resume("r1")).result()
    assert again.status == "cancelled"
    assert steps.executions == {"first": 1, "second": 1}


async def test_cancel_deadline_stops_a_step_that_will_not_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step whose clean-up never ends holds the run until the deadline, then it is cancelled."""
    steps = handlers(tmp_path, monkeypatch)
    path, clock = flow(tmp_path, steps, "stubborn"), FakeClock()
    async with Runtime(store=tmp_path / "runs.db", clock=clock) as runtime:
        handle = await runtime.start(path, run_id="r1")
        await steps.parked.wait()
        handle.cancel("enough", deadline=30)
        await steps.cleaning.wait()  # the step was asked, and is cleaning up...
        assert not handle.done  # ...for as long as it likes, until the deadline
        await clock.advance(30)
        result = await handle.result()
        row = await runtime.get_run("r1")
        events = [event async for event in handle.events()]
    assert result.status == "cancelled"
    assert result.steps["second"].status == "cancelled"
    assert row.status == "cancelled"
    assert events[-1].type == "workflow_end"
    assert events[-1].data == {"status": "cancelled"}


async def test_shutdown_deadline_bounds_a_stubborn_step_and_still_leaves_the_run_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step that ignores cancellation cannot hold a shutdown past its deadline."""
    steps = handlers(tmp_path, monkeypatch)
    path, store = flow(tmp_path, steps, "stubborn"), tmp_path / "runs.db"
    async with Runtime(store=store, shutdown_deadline=0) as runtime:
        handle = await runtime.start(path, run_id="r1")
        await steps.parked.wait()
    assert steps.cleaning.is_set()
    assert (await handle.result()).status == "running"
    async with Runtime(store=store) as runtime:
        assert [r.run_id for r in await runtime.resumable()] == ["r1"]
        records = await runtime.store.steps("r1")
    assert records["first"].status == "completed"
    assert records["second"].status != "completed"


async def test_a_service_that_fails_still_leaves_its_runs_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's own error leaves the block at once; the run is left as after a crash."""
    steps = handlers(tmp_path, monkeypatch)
    path, store = flow(tmp_path, steps), tmp_path / "runs.db"
    handles: list[RunHandle] = []

    async def failing_service() -> None:
        async with Runtime(store=store) as runtime:
            handles.append(await runtime.start(path, run_id="r1"))
            await steps.parked.wait()
            raise RuntimeError("the service broke")

    with pytest.raises(RuntimeError, match="the service broke"):
        await failing_service()
    result = await handles[0].result()
    assert result.status == "running"
    steps.gate.set()
    async with Runtime(store=store) as runtime:
        stored = [event.type for event in await runtime.stored_events("r1")]
        resumed = await (await runtime.resume("r1")).result()
    assert stored[-1] == "run_interrupted"
    assert resumed.status == "completed"
    assert steps.executions == {"first": 1, "second": 2}
