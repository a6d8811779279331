"""One consumer's view of a run's events: `RunHandle.events` returns an `EventSubscription`.

A subscription joins the run's journal the moment it is made, so what it
delivers is exact: the events the store held at that moment (read when the
consumer first asks), then every later one, in ``seq`` order, ending after the
run's ``workflow_end`` (or ``run_interrupted``: its runtime shut down). That
last event is handed over only once the run's handle is done: by then the
store says the run has ended and its lease is released. Model replies being
streamed when it is made come as one ``output`` event each, its data ``whole``,
with their text so far, before their next ones: a consumer that joins
mid-reply misses none of it.

The run never waits for a consumer. Live events wait in a buffer of at most
``buffer`` events; when it is full the oldest waiting event is dropped and
counted (`EventSubscription.statistics`), and the consumer sees the gap in
`Event.seq`. The memory a slow consumer costs is therefore bounded by its
``buffer``, however long the run.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Self

from cadenza.actors import RunJournal
from cadenza.protocols import Event, EventType
from cadenza.store import RunStore

__all__ = ["ENDINGS", "EventSubscription", "SubscriptionStatistics"]

ENDINGS: Final = frozenset((EventType.WORKFLOW_END, EventType.RUN_INTERRUPTED))
"""Event types after which a run's drive by this process is over."""


@dataclass(frozen=True, slots=True)
class SubscriptionStatistics:
    """How an `EventSubscription`'s buffer has fared so far (a snapshot).

    Attributes:
        buffer: The most live events the subscription keeps for its consumer.
        buffered: Live events waiting for the consumer now.
        peak: The most live events that ever waited at once (never above ``buffer``).
        dropped: Live events dropped, oldest first, because ``buffer`` were waiting.
    """

    buffer: int
    buffered: int
    peak: int
    dropped: int


class EventSubscription:
    """A run's events for one consumer, as an async iterator (``async for``).

    Made by `RunHandle.events`; see the module docstring for what it delivers
    and what it drops. A consumer that stops early calls `aclose` (or uses
    ``contextlib.aclosing``); one that reads to the end needs nothing.
    """

    def __init__(
        self,
        run_id: str,
        journal: RunJournal,
        store: RunStore,
        ended: asyncio.Future[Any],
        *,
        resumed_after: int,
        buffer: int,
    ) -> None:
        if buffer < 1:
            raise ValueError(f"an event buffer holds at least one event, not {buffer}")
        self._run_id = run_id
        self._store = store
        self._ended = ended
        self._resumed_after = resumed_after
        self._buffer = buffer
        self._pending: deque[Event] = deque()
        self._history: deque[Event] | None = None
        self._peak = 0
        self._dropped = 0
        self._last = 0
        self._closed = False
        self._wakeup: asyncio.Future[None] | None = None
        self._unsubscribe: Callable[[], None] | None = None
        # Read from the store: what was emitted before now (all of it, once the run ended).
        self._horizon: int | None = None
        self._live = not ended.done()
        if self._live:
            self._horizon = journal.last_seq
            # Replies being streamed now: their text so far comes before their next deltas.
            self._pending.extend(journal.streaming())
            self._unsubscribe = journal.subscribe(self._receive)
            ended.add_done_callback(self._run_ended)

    def statistics(self) -> SubscriptionStatistics:
        """The buffer's size, fill, high-water mark and drops so far."""
        return SubscriptionStatistics(
            buffer=self._buffer,
            buffered=len(self._pending),
            peak=self._peak,
            dropped=self._dropped,
        )

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Event:
        if self._closed:
            raise StopAsyncIteration
        if self._history is None:
            await self._store.flush()  # everything emitted so far is in the store
            stored = await self._store.events(self._run_id)
            if self._horizon is not None:
                stored = [event for event in stored if event.seq <= self._horizon]
            self._history = deque(stored)
        while (event := await self._next()) is not None:
            if event.type == EventType.OUTPUT:
                return event  # shown live, never stored, not numbered
            if event.seq <= self._last:
                continue
            self._last = event.seq
            # A resumed run's log holds the ends of its earlier drives: not this one's.
            if self._live and event.type in ENDINGS and event.seq > self._resumed_after:
                self._close()
                if not self._ended.done():  # delivered once the end is durable, lease released
                    await asyncio.wait((self._ended,))
            return event
        self._close()  # closed meanwhile (`aclose`), or nothing (more) to wait for
        raise StopAsyncIteration

    async def _next(self) -> Event | None:
        """The next stored event, else the next live one, waiting for it if the run goes on.

        None: the subscription was closed, or nothing (more) live is to come.
        """
        while not self._closed:
            if self._history:
                return self._history.popleft()
            if self._pending:
                return self._pending.popleft()
            if not self._live or self._ended.done():
                return None
            self._wakeup = asyncio.get_running_loop().create_future()
            await self._wakeup
        return None

    async def aclose(self) -> None:
        """Stops the subscription: nothing more is buffered, iteration ends."""
        self._close()

    def _receive(self, event: Event) -> None:
        pending = self._pending
        if len(pending) == self._buffer:
            pending.popleft()
            self._dropped += 1
        pending.append(event)
        if len(pending) > self._peak:
            self._peak = len(pending)
        self._wake()

    def _run_ended(self, _: asyncio.Future[Any]) -> None:
        self._wake()

    def _wake(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    def _close(self) -> None:
        self._closed = True
        self._pending.clear()
        self._history = deque()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._wake()
