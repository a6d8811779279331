"""The loop watchdog: a thread that interrupts a task holding the event loop past its deadline.

The blocking is the adversary here (``time.sleep`` or a busy loop inside a
coroutine), so these tests block on purpose; the bounds are far above the
deadlines under test.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from cadenza.kernel import LoopBlocked, LoopWatchdog


@contextmanager
def guarded(seconds: float) -> Iterator[LoopWatchdog]:
    """The current task under its loop's watchdog for ``seconds``; released after the block."""
    watchdog = LoopWatchdog.for_running_loop()
    task = asyncio.current_task()
    assert task is not None
    guard = watchdog.guard(task, seconds)
    try:
        yield watchdog
    finally:
        guard.release()


def test_the_watchdog_is_one_per_loop() -> None:
    """The same loop gets the same watchdog; a new loop gets a new one."""

    async def get() -> LoopWatchdog:
        first = LoopWatchdog.for_running_loop()
        assert LoopWatchdog.for_running_loop() is first
        return first

    assert asyncio.run(get()) is not asyncio.run(get())


async def test_a_guarded_task_that_sleeps_is_interrupted() -> None:
    """``time.sleep`` past the deadline ends in `LoopBlocked`, raised inside the task."""
    watchdog = LoopWatchdog.for_running_loop()
    before = watchdog.interruptions

    async def blocker() -> str:
        try:
            with guarded(0.3):
                time.sleep(60)  # noqa: ASYNC251 - the adversary under test
        except LoopBlocked as blocked:
            return str(blocked)
        return "not interrupted"

    started = time.monotonic()
    message = await blocker()
    assert time.monotonic() - started < 30
    assert "blocked the event loop" in message
    assert watchdog.interruptions == before + 1


async def test_a_guarded_busy_loop_is_interrupted_and_except_exception_does_not_stop_it() -> None:
    """Pure-Python spinning is interrupted too, and a blanket ``except Exception`` misses it."""
    swallowed = []

    async def spinner() -> None:
        with guarded(0.3):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    sum(range(1000))
                except Exception:  # the adversary's own blanket handler
                    swallowed.append(True)

    with pytest.raises(LoopBlocked):
        await spinner()
    assert swallowed == []


async def test_an_unguarded_or_released_task_is_left_alone() -> None:
    """Blocking with no live guard is not interrupted (the watchdog acts on deadlines only)."""
    watchdog = LoopWatchdog.for_running_loop()
    before = watchdog.interruptions
    task = asyncio.current_task()
    assert task is not None
    watchdog.guard(task, 0.1).release()
    time.sleep(0.6)  # noqa: ASYNC251 - the adversary: holds the loop past the deadline
    await asyncio.sleep(0)
    assert watchdog.interruptions == before


def test_a_loop_on_another_thread_is_interrupted_too() -> None:
    """Off the main thread the watchdog raises in the loop's thread (pure-Python code)."""
    outcome: list[str] = []

    async def spinner() -> None:
        try:
            with guarded(0.3):
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    pass
            outcome.append("not interrupted")
        except LoopBlocked:
            outcome.append("interrupted")

    thread = threading.Thread(target=asyncio.run, args=(spinner(),))
    thread.start()
    thread.join(60)
    assert outcome == ["interrupted"]


async def test_a_task_within_its_own_timeout_is_not_interrupted() -> None:
    """Another guard's deadline passing does not make the watchdog interrupt this task."""
    watchdog = LoopWatchdog.for_running_loop()
    before = watchdog.interruptions
    waiting = asyncio.ensure_future(asyncio.Event().wait())
    await asyncio.sleep(0)
    other = watchdog.guard(waiting, 0.05)  # expires while this task holds the loop
    task = asyncio.current_task()
    assert task is not None
    mine = watchdog.guard(task, 60)
    try:
        time.sleep(0.6)  # noqa: ASYNC251 - holds the loop, well within its own 60 s
    finally:
        mine.release()
        other.release()
        waiting.cancel()
    await asyncio.sleep(0)
    assert watchdog.interruptions == before
