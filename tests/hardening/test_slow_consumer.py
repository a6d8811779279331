"""A slow consumer back-pressures its producer; a poison item fails alone.

An actor whose handler takes 1 ms gets thousands of tells through a 100-message
inbox: the producer is held back (it is never more than the inbox ahead of the
consumer), resident memory stays flat, and every message arrives, in order, with
no dead letter. The full-size run (1,000,000 messages) is ``benchmarks/soak_inbox.py``.

A 1,000-item forEach with one item that always raises: that item fails after its
retries, the 999 others complete.
"""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path
from typing import Any

import pytest

from cadenza.kernel import Actor, DeadLetter, Supervisor
from tests._helpers import run_flow
from tests.conftest import WriteFlow

MESSAGES = 5_000
INBOX = 100
RSS_LIMIT = 64 * 1024 * 1024


def rss() -> int:
    """This process's resident set size in bytes (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


class SlowConsumer(Actor):
    """Takes 1 ms per message and remembers what it got."""

    def __init__(self, received: list[int], done: asyncio.Event) -> None:
        self.received = received
        self.done = done

    async def receive(self, message: Any) -> None:
        await asyncio.sleep(0.001)  # the work itself, not synchronisation
        self.received.append(message)
        if len(self.received) == MESSAGES:
            self.done.set()


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc")
async def test_a_slow_consumer_back_pressures_its_producer() -> None:
    """The producer waits for room; memory stays flat; nothing is dropped or reordered."""
    received: list[int] = []
    dead: list[DeadLetter] = []
    done = asyncio.Event()
    async with Supervisor(on_dead_letter=dead.append) as supervisor:
        supervisor.spawn("consumer", lambda: SlowConsumer(received, done), inbox_size=INBOX)
        baseline = rss()
        peak = baseline
        furthest_ahead = 0
        for sent in range(MESSAGES):
            await supervisor.tell("consumer", sent)
            furthest_ahead = max(furthest_ahead, sent + 1 - len(received))
            if sent % 500 == 0:
                peak = max(peak, rss())
        await done.wait()
        peak = max(peak, rss())
    assert dead == []
    assert received == list(range(MESSAGES))
    # In flight: the inbox plus the message being handled (plus one the producer holds).
    assert furthest_ahead <= INBOX + 2, furthest_ahead
    assert peak - baseline < RSS_LIMIT


POISON = """
name: poison
inputs:
  items: {type: array}
steps:
  - id: fan
    loop:
      forEach: "inputs.items"
      maxConcurrency: 50
      steps:
        - id: work
          handler: "HANDLERS:work"
          retries: 2
          onError: continue
"""

WORK = """
import collections

attempts = collections.Counter()

def work(ctx):
    attempts[ctx.item] += 1
    if ctx.item == 500:
        raise ValueError(f"poison item (attempt {ctx.attempt})")
    return f"ok {ctx.item}"
"""


async def test_a_poison_item_fails_after_its_retries_and_the_rest_complete(
    write_flow: WriteFlow,
) -> None:
    """Item 500 always raises: failed after 3 attempts; the 999 others completed, once each."""
    path = write_flow(POISON, handlers=WORK)
    result = await run_flow(path, inputs={"items": list(range(1000))})
    work = {address: record for address, record in result.steps.items() if address.endswith("work")}
    assert len(work) == 1000
    statuses = collections.Counter(record.status for record in work.values())
    assert statuses == {"completed": 999, "failed": 1}
    poisoned = work["fan[500].work"]
    assert poisoned.status == "failed"
    assert poisoned.attempts == 3
    assert poisoned.error is not None
    assert "poison item (attempt 3)" in poisoned.error.message
    assert all(r.attempts == 1 for a, r in work.items() if a != "fan[500].work")
    iterations = result.steps["fan"].result["iterations"]
    assert [it["content"] for it in iterations if it["index"] != 500] == [
        f"ok {i}" for i in range(1000) if i != 500
    ]
