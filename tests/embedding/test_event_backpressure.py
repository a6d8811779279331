"""A slow event consumer neither blocks the run nor grows memory past its buffer.

A 1,000-item forEach of no-op handlers emits about 6,000 events. Its only
subscriber takes one event and then reads nothing until the run has ended:
the run ends all the same (the journal never waits for a subscriber), the
subscription held at most ``buffer`` live events, counted what it dropped, and
the consumer sees exactly that gap in `Event.seq`. tracemalloc shows what the
subscriber held at the end, which is its high-water mark: about ``buffer``
events (the 6,000 would be some 2.5 MB).
"""

from __future__ import annotations

import gc
import itertools
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from cadenza import Runtime
from tests.conftest import WriteFlow

ITEMS = 1_000
BUFFER = 100
EVENT_BYTES = 4096  # generous: an event with its data takes well under 1 KiB

FLOW = """
name: many-events
inputs:
  items: {type: array}
steps:
  - id: each
    loop:
      forEach: "inputs.items"
      maxConcurrency: 8
      steps:
        - {id: work, handler: "HANDLERS:nothing"}
"""

NOTHING = """
async def nothing(ctx):
    return None
"""


@pytest.fixture
def traced() -> Iterator[None]:
    """tracemalloc on for the test (and off again after it)."""
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def traced_memory() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def test_a_stalled_subscriber_neither_blocks_the_run_nor_holds_more_than_its_buffer(
    write_flow: WriteFlow, tmp_path: Path, traced: None
) -> None:
    """The run completes; the subscriber kept the newest BUFFER events; the gap is in seq."""
    path = write_flow(FLOW, handlers=NOTHING)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        handle = await runtime.start(path, inputs={"items": list(range(ITEMS))})
        events = handle.events(buffer=BUFFER)
        first = await anext(events)  # subscribed, and reading; then it stalls
        result = await handle.result()  # not blocked by the stalled subscriber
        total = len(await runtime.stored_events(handle.run_id))
        stalled = events.statistics()
        holding = traced_memory()
        seqs, types = [first.seq], [first.type]  # not the events: they are to be freed
        async for event in events:
            seqs.append(event.seq)
            types.append(event.type)
        drained = events.statistics()
        await events.aclose()
        held = holding - traced_memory()  # what the subscriber's buffer held, now freed

    assert result.status == "completed", result.error
    assert total > 5 * ITEMS  # thousands of events went by the subscriber
    assert stalled.buffer == BUFFER
    assert stalled.buffered == stalled.peak == BUFFER  # full, and never fuller
    assert stalled.dropped == drained.dropped > 0
    assert drained.buffered == 0

    # The consumer sees every event up to where it stalled, one gap, then the newest BUFFER.
    assert (seqs[0], types[0]) == (1, "workflow_start")
    assert (seqs[-1], types[-1]) == (total, "workflow_end")
    assert seqs == sorted(set(seqs))
    gaps = [(a, b) for a, b in itertools.pairwise(seqs) if b != a + 1]
    assert len(gaps) == 1
    assert gaps[0][1] - gaps[0][0] - 1 == stalled.dropped
    assert seqs[-BUFFER:] == list(range(total - BUFFER + 1, total + 1))
    assert len(seqs) + stalled.dropped == total

    assert BUFFER * 100 < held < BUFFER * EVENT_BYTES, held
