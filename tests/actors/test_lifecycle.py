"""Container life cycle on an injected clock: delay, timeout, retries and cancellation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from cadenza.kernel import FakeClock
from tests._helpers import Started, started
from tests._workflows import HANG
from tests.conftest import WriteFlow

HANDLERS = (
    HANG
    + """
def tick(ctx):
    return f"tick {ctx.iteration}"
"""
)


@asynccontextmanager
async def delayed(write_flow: WriteFlow, loop: str) -> AsyncIterator[tuple[FakeClock, Started]]:
    """A loop ``wait`` of ``tick`` (``loop``: its options) started on a fake clock; the
    block begins once iteration 0 has ended, and the delay is to be waited out."""
    path = write_flow(
        f"name: paced\nsteps:\n  - {{id: wait, handler: 'HANDLERS:tick', loop: {loop}}}\n",
        handlers=HANDLERS,
    )
    clock = FakeClock()
    async with started(path, clock=clock) as (handle, watch):
        await watch.wait_for("iteration_end", "wait.0")
        yield clock, (handle, watch)


async def test_delay_waits_on_the_clock_between_iterations(write_flow: WriteFlow) -> None:
    """delay: the next iteration starts only once the injected clock has moved past it."""
    async with delayed(write_flow, "{maxIterations: 2, delay: 30s}") as (clock, (run, watch)):
        await clock.advance(29)
        assert not watch.seen("iteration_start", "wait.1")
        await clock.advance(1)
        result = await run.result()
    assert result.status == "completed", result.error
    assert result.steps["wait.1"].content == "tick 1"


async def test_a_loop_timeout_bounds_all_iterations_and_retries_restart_it(
    write_flow: WriteFlow,
) -> None:
    """timeout on a loop fails it as Timeout; retries: 1 runs the whole loop again first."""
    path = write_flow(
        """
        name: slow
        steps:
          - id: slow
            handler: "HANDLERS:hang"
            timeout: 10s
            retries: 1
            loop: {maxIterations: 3}
        """,
        handlers=HANDLERS,
    )
    clock = FakeClock()
    async with started(path, clock=clock) as (handle, watch):
        await watch.wait_for("step_start", "slow.0")
        await clock.advance(10)
        await watch.wait_for("step_retry", "slow")
        await clock.advance(10)
        result = await handle.result()
    record = result.steps["slow"]
    assert result.status == "failed"
    assert record.status == "failed"
    assert record.attempts == 2
    assert record.error is not None
    assert record.error.type == "Timeout"
    assert result.steps["slow.0"].status == "cancelled"
    assert "slow.1" not in result.steps


async def test_cancelling_a_run_interrupts_a_loop_waiting_out_its_delay(
    write_flow: WriteFlow,
) -> None:
    """A loop parked in its delay is cancelled at once: the run and the loop end cancelled."""
    async with delayed(write_flow, "{maxIterations: 5, delay: 1h}") as (_, (run, _)):
        run.cancel("enough")
        result = await run.result()
    assert result.status == "cancelled"
    assert result.steps["wait"].status == "cancelled"
    assert result.loops["wait"].termination_reason == "cancelled"
    assert "wait.1" not in result.steps


async def test_cancelling_a_run_cancels_running_foreach_items_and_graph_states(
    write_flow: WriteFlow,
) -> None:
    """Cancellation reaches every running child of a forEach and of a graph."""
    path = write_flow(
        """
        name: busy
        steps:
          - id: fan
            handler: "HANDLERS:hang"
            loop: {forEach: [1, 2, 3]}
          - id: machine
            graph:
              start: wait
              states:
                wait: {handler: "HANDLERS:hang"}
              edges:
                - {from: wait, to: END}
        """,
        handlers=HANDLERS,
    )
    async with started(path) as (handle, watch):
        for address in ("fan[0]", "fan[1]", "fan[2]", "machine.0.wait"):
            await watch.wait_for("step_start", address)
        handle.cancel("stop")
        result = await handle.result()
    assert result.status == "cancelled"
    assert result.steps["fan"].status == "cancelled"
    assert result.steps["fan[2]"].status == "cancelled"
    assert result.steps["machine"].status == "cancelled"
    assert result.graphs["machine"].path == ["wait"]
