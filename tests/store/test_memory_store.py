"""The memory store keeps a window of a run's newest events and every step record, compactly."""

from __future__ import annotations

from cadenza import Event, Runtime
from cadenza.store import MemoryRunStore
from tests.conftest import WriteFlow

FAN = """
name: fan
steps:
  - id: each
    handler: "HANDLERS:echo"
    loop: {forEach: "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]", maxConcurrency: 2}
"""
ECHO = "def echo(ctx):\n    return {'item': ctx.item}\n"


async def test_a_long_run_keeps_its_newest_events_and_every_record(
    write_flow: WriteFlow,
) -> None:
    """Past ``max_events`` the oldest events go; a subscriber saw every one live, and
    every step record is still there, equal to the run's own."""
    store = MemoryRunStore(max_events=20)
    seen: list[Event] = []
    async with Runtime(store=store) as runtime:
        handle = await runtime.start(write_flow(FAN, handlers=ECHO), on_event=seen.append)
        result = await handle.result()
        kept = await runtime.stored_events(handle.run_id)
        records = await store.steps(handle.run_id)
    assert result.status == "completed", result.error
    numbered = [event.seq for event in seen if event.type != "output"]
    assert numbered == list(range(1, len(numbered) + 1))
    assert len(numbered) > 20
    assert [event.seq for event in kept] == numbered[-20:]
    assert kept[-1].type == "workflow_end"
    assert records == result.steps
    assert records["each[15]"].result == {"item": 15}


async def test_a_run_of_normal_size_keeps_every_event(write_flow: WriteFlow) -> None:
    store = MemoryRunStore()
    seen: list[Event] = []
    async with Runtime(store=store) as runtime:
        handle = await runtime.start(write_flow(FAN, handlers=ECHO), on_event=seen.append)
        await handle.result()
        kept = await runtime.stored_events(handle.run_id)
    assert [e.seq for e in kept] == [e.seq for e in seen if e.type != "output"]
    assert kept[0].type == "workflow_start"


async def test_without_a_window_every_event_is_kept(write_flow: WriteFlow) -> None:
    store = MemoryRunStore(max_events=None)
    async with Runtime(store=store) as runtime:
        handle = await runtime.start(write_flow(FAN, handlers=ECHO))
        await handle.result()
        kept = await runtime.stored_events(handle.run_id)
    assert kept[0].seq == 1
    assert kept[-1].type == "workflow_end"
