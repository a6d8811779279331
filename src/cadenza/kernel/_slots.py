"""``Slots``: a counting semaphore whose uncontended acquire is one method call.

A run takes a slot around every step attempt. ``asyncio.Semaphore`` costs two
coroutine frames and a waiter scan per ``async with`` even when slots are free
(about 3 us of a 25 us step budget, measured); here the free case is a
synchronous ``take()`` and ``give()``, and only a caller that must wait awaits.
Waiters are served first come, first served, and a newcomer cannot take a slot
freed for a waiter.
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["Slots"]


class Slots:
    """``size`` slots; ``take()`` one when free, else ``await wait()`` for one; ``give()`` back.

    Use as::

        if not slots.take():
            await slots.wait()
        try:
            ...
        finally:
            slots.give()

    A cancelled ``wait`` holds no slot: a slot handed to it passes to the next waiter.
    """

    __slots__ = ("_free", "_size", "_waiters")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, not {size}")
        self._size = size
        self._free = size
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def size(self) -> int:
        """How many slots there are."""
        return self._size

    @property
    def free(self) -> int:
        """How many slots nobody holds (none while anyone waits)."""
        return self._free

    def take(self) -> bool:
        """Takes a free slot now; False when none is free or others wait first."""
        if self._free and not self._waiters:
            self._free -= 1
            return True
        return False

    async def wait(self) -> None:
        """Waits in line for a slot and returns holding it."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed a slot, then cancelled before running: pass it on
            elif waiter in self._waiters:  # give() may have dropped it already
                self._waiters.remove(waiter)
            raise

    async def __aenter__(self) -> None:
        if not self.take():
            await self.wait()

    async def __aexit__(self, *exc_info: object) -> None:
        self.give()

    def give(self) -> None:
        """Returns a slot: to the first waiter in line, else to the free pool."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes straight to it
                return
        self._free += 1
