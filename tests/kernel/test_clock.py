"""FakeClock and SystemClock: sleeping, timers, fail_after and move_on_after."""

from __future__ import annotations

import asyncio

import pytest

from cadenza.kernel import Clock, FakeClock, SystemClock


async def test_fake_time_moves_only_with_advance() -> None:
    """now() starts where told and changes only through advance()."""
    clock = FakeClock(start=100.0)
    assert clock.now() == 100.0
    await clock.advance(2.5)
    assert clock.now() == 102.5
    with pytest.raises(ValueError, match="back"):
        await clock.advance(-1)


async def test_fake_sleep_wakes_when_time_reaches_it() -> None:
    """A sleeper wakes exactly when advance() reaches its deadline."""
    clock = FakeClock()
    sleeper = asyncio.create_task(clock.sleep(30))
    await clock.advance(29)
    assert not sleeper.done()
    await clock.advance(1)
    assert sleeper.done()
    assert clock.now() == 30


async def test_call_later_runs_in_due_order_at_due_time() -> None:
    """Callbacks run in due order, each seeing now() at its due time; cancel() stops one."""
    clock = FakeClock()
    seen: list[tuple[str, float]] = []
    clock.call_later(3, lambda: seen.append(("c", clock.now())))
    clock.call_later(1, lambda: seen.append(("a", clock.now())))
    clock.call_later(2, lambda name: seen.append((name, clock.now())), "b")
    clock.call_later(2.5, lambda: seen.append(("never", clock.now()))).cancel()
    assert clock.pending == 3
    await clock.advance(10)
    assert seen == [("a", 1), ("b", 2), ("c", 3)]
    assert clock.now() == 10
    assert clock.pending == 0


async def test_advance_lets_woken_tasks_sleep_again_within_the_span() -> None:
    """A task woken by advance() that sleeps again inside the span is woken in the same call."""
    clock = FakeClock()
    ticks: list[float] = []

    async def ticker() -> None:
        for _ in range(3):
            await clock.sleep(1)
            ticks.append(clock.now())

    task = asyncio.create_task(ticker())
    await clock.advance(3)
    assert task.done()
    assert ticks == [1, 2, 3]


async def test_fake_fail_after_raises_timeout_when_time_runs_out() -> None:
    """fail_after cancels the block and raises TimeoutError once advance() passes it."""
    clock = FakeClock()
    blocked = asyncio.Event()

    async def slow() -> None:
        with clock.fail_after(30):
            await blocked.wait()

    task = asyncio.create_task(slow())
    await clock.advance(29.9)
    assert not task.done()
    await clock.advance(0.1)
    with pytest.raises(TimeoutError):
        await task


async def test_fail_after_passes_when_block_finishes_in_time() -> None:
    """A block that finishes in time is untouched and its timer is cancelled."""
    clock = FakeClock()
    with clock.fail_after(5) as scope:
        await asyncio.sleep(0)
    assert not scope.cancelled_caught
    assert clock.pending == 0


async def test_move_on_after_carries_on_and_reports() -> None:
    """move_on_after cancels the block quietly and sets cancelled_caught."""
    clock = FakeClock()
    blocked = asyncio.Event()
    result: list[bool] = []

    async def slow() -> None:
        with clock.move_on_after(1) as scope:
            await blocked.wait()
        result.append(scope.cancelled_caught)

    task = asyncio.create_task(slow())
    await clock.advance(1)
    await task
    assert result == [True]


async def test_own_cancel_inside_fail_after_is_not_a_timeout() -> None:
    """Cancelling the yielded scope by hand ends the block without TimeoutError."""
    clock = FakeClock()
    with clock.fail_after(5) as scope:
        scope.cancel()
        await asyncio.Event().wait()
    assert scope.cancelled_caught


@pytest.mark.parametrize("clock", [SystemClock(), FakeClock()])
async def test_zero_timeout_expires_at_first_checkpoint(clock: Clock) -> None:
    """fail_after(0) raises at the first await, on either clock."""
    with pytest.raises(TimeoutError), clock.fail_after(0):
        await asyncio.Event().wait()


async def test_system_clock_uses_the_event_loop() -> None:
    """SystemClock reads loop.time() and schedules with loop.call_later."""
    clock = SystemClock()
    loop = asyncio.get_running_loop()
    before = loop.time()
    assert before <= clock.now() <= loop.time()
    fired: asyncio.Future[str] = loop.create_future()
    clock.call_later(0, fired.set_result, "fired")
    assert await fired == "fired"
    cancelled = clock.call_later(0, fired.set_result, "again")
    cancelled.cancel()
    await clock.sleep(0)
    assert repr(clock) == "SystemClock()"


async def test_zero_sleep_just_yields() -> None:
    """FakeClock.sleep(0) returns without advancing time."""
    clock = FakeClock()
    await clock.sleep(0)
    assert clock.now() == 0
    assert "FakeClock(now=0" in repr(clock)
