"""Time as a dependency: the ``Clock`` interface and the event loop's clock.

Everything in the runtime that waits or measures (ask timeouts, restart
intensity) asks a ``Clock``, so a test can swap in ``FakeClock`` and check a
30-second timeout without waiting 30 seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVarTuple, Unpack

from anyio import CancelScope

__all__ = ["Clock", "SystemClock", "Timer"]

Ts = TypeVarTuple("Ts")


class Timer(Protocol):
    """A scheduled callback that can be called off (``asyncio.TimerHandle`` is one)."""

    def cancel(self) -> None:
        """Stop the callback from running; no effect once it ran."""


class Clock(Protocol):
    """Monotonic time, sleeping and timers.

    Implementations provide ``now``, ``sleep`` and ``call_later``; subclassing
    ``Clock`` explicitly inherits ``fail_after`` and ``move_on_after``, which
    are built from those.
    """

    def now(self) -> float:
        """Monotonic seconds; only differences are meaningful."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        ...

    def call_later(
        self, seconds: float, callback: Callable[[Unpack[Ts]], object], *args: *Ts
    ) -> Timer:
        """Run ``callback(*args)`` in the event loop after ``seconds``."""
        ...

    @contextmanager
    def fail_after(self, seconds: float) -> Iterator[CancelScope]:
        """Cancel the block after ``seconds`` and raise ``TimeoutError``, like ``anyio.fail_after``.

        Raises:
            TimeoutError: The block was cancelled because the time ran out.
        """
        with _timeout_scope(self, seconds, fail=True) as scope:
            yield scope

    @contextmanager
    def move_on_after(self, seconds: float) -> Iterator[CancelScope]:
        """Cancel the block after ``seconds`` and carry on, like ``anyio.move_on_after``.

        ``scope.cancelled_caught`` tells whether the time ran out.
        """
        with _timeout_scope(self, seconds, fail=False) as scope:
            yield scope


@contextmanager
def _timeout_scope(clock: Clock, seconds: float, *, fail: bool) -> Iterator[CancelScope]:
    scope = CancelScope()
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        scope.cancel()

    if seconds <= 0:
        expire()
        handle: Timer | None = None
    else:
        handle = clock.call_later(seconds, expire)
    try:
        with scope:
            yield scope
    finally:
        if handle is not None:
            handle.cancel()
    # Only our own timer makes a TimeoutError; a caller's scope.cancel() does not.
    if fail and expired and scope.cancelled_caught:
        raise TimeoutError(f"timed out after {seconds}s")


class SystemClock(Clock):
    """The running event loop's clock: ``time.monotonic`` and ``loop.call_later``."""

    __slots__ = ()

    # asyncio's own loops tell time with ``time.monotonic`` (``BaseEventLoop.time``);
    # calling it directly spares two calls on a path every step takes twice.
    now = staticmethod(time.monotonic)

    async def sleep(self, seconds: float) -> None:
        """``asyncio.sleep``."""
        await asyncio.sleep(seconds)

    def call_later(
        self, seconds: float, callback: Callable[[Unpack[Ts]], object], *args: *Ts
    ) -> Timer:
        """``loop.call_later``: one timer handle, cancelled cheaply when no longer needed."""
        return asyncio.get_running_loop().call_later(seconds, callback, *args)

    def __repr__(self) -> str:
        return "SystemClock()"
