"""cadenza.testing's helpers, as a user testing their own workflow would use them."""

from __future__ import annotations

import anyio

from cadenza.testing import FakeClock, MessageRecorder, run_workflow
from tests._helpers import EXAMPLES, started
from tests.conftest import WriteFlow


async def test_run_workflow_and_record_the_negotiation_messages() -> None:
    """The main demo in a few lines: the result, who said what, and who read it."""
    messages = MessageRecorder()
    result = await run_workflow(EXAMPLES / "negotiation-messages.yaml", on_event=messages)
    assert result.status == "completed"
    assert messages.texts(sender="seller")[:2] == ["OFFER 1000", "OFFER 850"]
    assert "Buyer offers 600." in messages.texts(target="seller")
    assert any(address.endswith("buyer") for address, _ in messages.drained)
    assert all(message.dropped is None for message in messages.messages)


HOURLY = """
name: wait
steps:
  - id: tick
    handler: "HANDLERS:tick"
    loop: {maxIterations: 3, delay: 1h}
"""
TICK = "async def tick(ctx):\n    return 'tick'\n"


async def test_run_workflow_with_a_fake_clock_makes_delays_instant(write_flow: WriteFlow) -> None:
    """As promised: an hour between iterations costs no real time; the clock moved 2 h."""
    clock = FakeClock()
    with anyio.fail_after(10):  # a hang fails here, not at the suite's timeout
        result = await run_workflow(write_flow(HOURLY, handlers=TICK), clock=clock)
    assert result.status == "completed"
    assert result.loops["tick"].iterations == 3
    assert clock.now() == 2 * 3600


async def test_a_fake_clock_moves_only_when_the_test_says(write_flow: WriteFlow) -> None:
    """On a Runtime of its own, the loop ends only after the test advances two hours."""
    clock = FakeClock()
    async with started(write_flow(HOURLY, handlers=TICK), clock=clock) as (handle, _):
        advanced = 0
        while not handle.done:
            await clock.advance(3600)  # settles: the run is parked on its next delay
            advanced += 1
            assert advanced <= 3, "the loop did not end after its two delays"
        result = await handle.result()
    assert result.status == "completed"
    assert result.loops["tick"].iterations == 3
    assert clock.now() == advanced * 3600
