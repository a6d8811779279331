"""A clock for tests: time moves only when the test says so."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any, Final, TypeVarTuple, Unpack

from ._clock import Clock, Timer

__all__ = ["AUTOJUMP_THRESHOLD", "FakeClock"]

AUTOJUMP_THRESHOLD: Final = 0.05
"""Real seconds the loop must be idle before `FakeClock.autojump` moves time."""

Ts = TypeVarTuple("Ts")

# How many loop iterations ``advance`` yields at most while waiting for the
# tasks it woke to settle; a loop that never empties its ready queue (say, a
# task spinning on sleep(0)) must not hang the test.
_MAX_SETTLE_ROUNDS: Final = 1000
# Without a private ready queue to inspect (not a stock asyncio loop), yield
# this many times instead.
_BLIND_SETTLE_ROUNDS: Final = 50


class _Timer:
    __slots__ = ("args", "callback", "cancelled")

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock(Clock):
    """A ``Clock`` whose time advances only through ``await clock.advance(seconds)``.

    ``advance`` runs the callbacks that fall due in time order, setting
    ``now()`` to each one's due time as it runs, and lets the tasks they woke
    run until the event loop is idle before going on, so a task that sleeps
    again within the same span is woken in the same call.

    Example::

        clock = FakeClock()
        async with Supervisor(clock=clock) as sup:
            ask = asyncio.create_task(sup.ask("slow", Ping(), timeout=30))
            await clock.advance(30)  # no real waiting
            with pytest.raises(AskTimeout):
                await ask

    Or let it move by itself, as trio's ``MockClock(autojump_threshold=...)``
    does: `autojump` jumps to the next timer whenever the event loop has been
    idle for a moment of real time (``cadenza.testing.run_workflow`` runs it
    for you, so a loop's ``delay: 1h`` takes no time).

    Args:
        start: The initial value of ``now()``.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _Timer]] = []
        self._order = itertools.count()
        self._timer_added: asyncio.Event | None = None  # made by autojump, on its loop

    def now(self) -> float:
        """The fake time in seconds."""
        return self._now

    def call_later(
        self, seconds: float, callback: Callable[[Unpack[Ts]], object], *args: *Ts
    ) -> Timer:
        """Schedule ``callback(*args)`` for ``now() + seconds`` of fake time."""
        timer = _Timer(callback, args)
        due = self._now + max(seconds, 0.0)
        heapq.heappush(self._timers, (due, next(self._order), timer))
        if self._timer_added is not None:
            self._timer_added.set()
        return timer

    async def sleep(self, seconds: float) -> None:
        """Wait until ``advance`` moves time past ``now() + seconds``."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_later(seconds, _resolve, woken)
        try:
            await woken
        finally:
            timer.cancel()

    @property
    def pending(self) -> int:
        """How many scheduled callbacks have not run or been cancelled."""
        return sum(not timer.cancelled for _, _, timer in self._timers)

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, running what falls due on the way.

        Raises:
            ValueError: ``seconds`` is negative; time does not go back.
        """
        if seconds < 0:
            raise ValueError(f"cannot move a clock back ({seconds}s)")
        target = self._now + seconds
        await _settle()
        while self._timers and self._timers[0][0] <= target:
            due, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, due)
            timer.cancelled = True  # run once; a later cancel() is a no-op
            timer.callback(*timer.args)
            await _settle()
        # max(): a concurrent advance() may already have gone further.
        self._now = max(self._now, target)
        await _settle()

    async def autojump(self, threshold: float = AUTOJUMP_THRESHOLD) -> None:
        """Jump to the next timer whenever the loop has been idle for ``threshold`` real seconds.

        Runs until cancelled. "Idle" means no callback ready to run: every task
        waits on this clock or on real I/O. Real I/O that takes longer than
        ``threshold`` (a command, a real HTTP call) therefore sees time jump,
        and a timeout armed around it can fire early, as with trio's
        ``autojump_threshold``; advance by hand to test such steps.
        """
        added = self._timer_added = asyncio.Event()
        try:
            while True:
                if self.pending == 0:
                    added.clear()
                    await added.wait()
                await _settle()
                await asyncio.sleep(threshold)  # real time: let real I/O answer first
                await _settle()
                due = self._next_due()
                if due is not None:
                    await self.advance(max(0.0, due - self._now))
        finally:
            self._timer_added = None

    def _next_due(self) -> float | None:
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now}, pending={self.pending})"


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _settle() -> None:
    """Yield until no other callback is ready to run, so woken tasks have run."""
    loop = asyncio.get_running_loop()
    # The stock loops keep runnable callbacks in ``_ready``; peeking at it is
    # the only way asyncio offers to tell "idle" from "busy".
    ready = getattr(loop, "_ready", None)
    rounds = _MAX_SETTLE_ROUNDS if ready is not None else _BLIND_SETTLE_ROUNDS
    for _ in range(rounds):
        await asyncio.sleep(0)
        if ready is not None and not ready:
            return
