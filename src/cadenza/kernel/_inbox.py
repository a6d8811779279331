"""A bounded single-consumer FIFO with the semantics of anyio memory streams.

``send`` waits while the inbox is full, ``send_nowait`` raises ``InboxFull``,
``receive`` waits while it is empty, ``close`` ends it. Unlike an anyio stream
(every call a checkpoint; measured 5-14x slower) or an ``asyncio.Queue`` (4.9
KiB idle), it is one deque, at most one wake-up future for the consumer, and a
FIFO of waiting senders created only when a sender has to wait. The deque
itself (760 B, even empty) is made by the first push, and dropped by
``drain`` and by an actor going idle (``_consumer.run_busy_period``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from anyio import BusyResourceError, WouldBlock

from cadenza.errors import ActorStopped, InboxFull

__all__ = ["Inbox"]

T = TypeVar("T")


class Inbox(Generic[T]):
    """A bounded FIFO for one consumer and any number of senders.

    Senders that wait are served in arrival order, and a waiting sender keeps
    its place: a newcomer cannot take the slot freed for it.

    Cancellation is safe at every await: a cancelled ``send`` has not
    delivered its item and leaves no waiter behind (a wake-up meant for it
    passes to the next sender); a cancelled ``receive`` has not taken an item.

    Args:
        maxsize: How many items it holds before ``send`` waits; at least 1.
        owner: Who reads it, for error messages (an actor's address).
    """

    __slots__ = ("_closed", "_getter", "_items", "_maxsize", "_owner", "_putters", "_waker")

    def __init__(self, maxsize: int, *, owner: str = "inbox") -> None:
        if maxsize < 1:
            raise ValueError(f"inbox size must be at least 1, not {maxsize}")
        self._items: deque[T] | None = None  # made by the first push
        self._maxsize = maxsize
        self._owner = owner
        self._closed = False
        # The consumer's wake-up future; a done one is stale and simply replaced.
        self._getter: asyncio.Future[None] | None = None
        # Futures of waiting senders, oldest first; a done one was woken and
        # holds a reserved slot until its sender runs.
        self._putters: deque[asyncio.Future[None]] | None = None
        # Called once, then forgotten, at the next push or close: how an idle
        # actor, which has no task waiting here, is scheduled by its ready queue.
        self._waker: Callable[[], None] | None = None

    @property
    def maxsize(self) -> int:
        """The capacity."""
        return self._maxsize

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._closed

    def __len__(self) -> int:
        items = self._items
        return 0 if items is None else len(items)

    def send_nowait(self, item: T) -> None:
        """Append ``item`` now.

        Raises:
            ActorStopped: The inbox is closed.
            InboxFull: The inbox is full, or senders are already waiting.
        """
        if self._closed:
            raise ActorStopped(f"inbox of {self._owner!r} is closed")
        items = self._items
        if self._putters or (items is not None and len(items) >= self._maxsize):
            raise InboxFull(f"inbox of {self._owner!r} is full ({self._maxsize} messages)")
        self._push(item)

    async def send(self, item: T) -> None:
        """Append ``item``, waiting for room while the inbox is full.

        Raises:
            ActorStopped: The inbox is closed, before or while waiting.
        """
        if self._closed:
            raise ActorStopped(f"inbox of {self._owner!r} is closed")
        items = self._items
        if self._putters or (items is not None and len(items) >= self._maxsize):
            await self._wait_for_room()  # returns holding a reserved slot
        self._push(item)

    def _push(self, item: T) -> None:
        items = self._items
        if items is None:
            items = self._items = deque()
        items.append(item)
        waker = self._waker
        if waker is not None:
            self._waker = None
            waker()
        getter = self._getter
        if getter is not None and not getter.done():
            getter.set_result(None)

    async def _wait_for_room(self) -> None:
        putters = self._putters
        if putters is None:
            putters = self._putters = deque()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        putters.append(waiter)
        try:
            await waiter
        except BaseException:
            putters.remove(waiter)
            if waiter.done() and not waiter.cancelled():
                # Woken, then cancelled before running: hand the slot on.
                self._wake_putter()
            raise
        putters.remove(waiter)
        if self._closed:
            raise ActorStopped(f"inbox of {self._owner!r} closed while waiting to send")

    def _wake_putter(self) -> None:
        for waiter in self._putters or ():
            if not waiter.done():
                waiter.set_result(None)
                return

    async def receive(self) -> T:
        """Take the oldest item, waiting while the inbox is empty.

        A closed inbox still yields the items it holds.

        Raises:
            ActorStopped: The inbox is closed and empty.
            anyio.BusyResourceError: Another task is already waiting in ``receive``.
        """
        while not self._items:
            if self._closed:
                raise ActorStopped(f"inbox of {self._owner!r} is closed")
            if self._getter is not None and not self._getter.done():
                raise BusyResourceError("receiving from")
            await self.wait_readable()
        return self.receive_nowait()

    def receive_nowait(self) -> T:
        """Take the oldest item now.

        Raises:
            anyio.WouldBlock: The inbox is empty (and open).
            ActorStopped: The inbox is closed and empty.
        """
        items = self._items
        if not items:
            if self._closed:
                raise ActorStopped(f"inbox of {self._owner!r} is closed")
            raise WouldBlock
        item = items.popleft()
        if self._putters:
            self._wake_putter()
        return item

    def wait_readable(self) -> asyncio.Future[None]:
        """A future that resolves once the inbox holds an item or is closed.

        For a consumer that runs its own loop (``receive_nowait`` when
        non-empty, else await this): awaiting a bare future keeps an idle
        consumer to one frame. Cancelling the wait (or the future) is safe: it
        takes nothing, and the next call makes a fresh future.
        """
        getter = self._getter
        if getter is None or getter.done():
            getter = self._getter = asyncio.get_running_loop().create_future()
            if self._items or self._closed:
                getter.set_result(None)
        return getter

    def close(self) -> None:
        """Refuse further sends and wake every waiter.

        Waiting senders raise ``ActorStopped``; the consumer may still take the
        items held, then ``receive`` raises ``ActorStopped``. Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        waker = self._waker
        if waker is not None:
            self._waker = None
            waker()
        getter = self._getter
        if getter is not None and not getter.done():
            getter.set_result(None)
        for waiter in self._putters or ():
            if not waiter.done():
                waiter.set_result(None)

    def drain(self) -> list[T]:
        """Remove and return every item held, oldest first (for a closed inbox's owner)."""
        held = self._items
        if not held:
            return []
        items = list(held)
        self._items = None
        for _ in range(min(len(items), len(self._putters or ()))):
            self._wake_putter()
        return items
