"""cadenza.testing's helpers, as a user testing their own workflow would use them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio

from cadenza import RunResult
from cadenza.testing import FakeClock, MessageRecorder, run_workflow

WriteFlow = Callable[..., Path]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


async def test_run_workflow_and_record_the_negotiation_messages() -> None:
    """The main demo in a few lines: the result, who said what, and who read it."""
    messages = MessageRecorder()
    result = await run_workflow(EXAMPLES / "negotiation-messages.yaml", on_event=messages)
    assert result.status == "completed"
    assert messages.texts(sender="seller")[:2] == ["OFFER 1000", "OFFER 850"]
    assert "Buyer offers 600." in messages.texts(target="seller")
    assert any(address.endswith("buyer") for address, _ in messages.drained)
    assert all(message.dropped is None for message in messages.messages)


async def test_a_fake_clock_moves_only_when_the_test_says(write_flow: WriteFlow) -> None:
    """A loop with an hour between iterations ends after the test advances two hours."""
    flow = write_flow(
        """
        name: wait
        steps:
          - id: tick
            handler: "HANDLERS:tick"
            loop: {maxIterations: 3, delay: 1h}
        """,
        handlers="async def tick(ctx):\n    return 'tick'\n",
    )
    clock = FakeClock()
    results: list[RunResult] = []
    async with anyio.create_task_group() as group:

        async def run() -> None:
            results.append(await run_workflow(flow, clock=clock))

        group.start_soon(run)
        advanced = 0
        while not results:
            await clock.advance(3600)  # settles: the run is parked on its next delay
            advanced += 1
            assert advanced <= 3, "the loop did not end after its two delays"
    assert results[0].status == "completed"
    assert results[0].loops["tick"].iterations == 3
    assert clock.now() == advanced * 3600
