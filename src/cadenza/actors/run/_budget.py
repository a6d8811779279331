"""The run's token budget (``options.maxTokens``): a gate before every model call.

Checking "spent < budget" before each call is not enough when agents run in
parallel: ten agents start together, all see nothing spent, and all call. So a
call *reserves* before it starts. Each call in flight counts as costing as much
as the largest call the run has seen so far; a new call starts only while the
tokens spent plus those reserved stay below the budget, and waits for calls in
flight otherwise. Before any call has finished its cost is unknown, so the
run's first call goes alone.

What that guarantees: a run ends at most one call past its budget, as long as
no call costs more than the largest one before it (prompts grow, so a call can
cost somewhat more; never a whole extra round of parallel calls).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from cadenza.errors import CadenzaError

from ._journal import RunJournal

__all__ = ["BudgetExceeded", "TokenBudget"]


class BudgetExceeded(CadenzaError):
    """The run's token budget (``options.maxTokens``) is spent; the run ends ``failed``."""


class TokenBudget:
    """Admits model calls while the run's budget allows (see the module docstring)."""

    def __init__(self, limit: int, journal: RunJournal) -> None:
        self.limit = limit
        self._journal = journal
        self._largest = 0  # tokens of the costliest call so far: what a call reserves
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @asynccontextmanager
    async def call(self) -> AsyncIterator[None]:
        """Holds a reservation for one model call; raises `BudgetExceeded` instead of starting.

        The body makes the call and counts its usage in the journal; leaving it
        frees the reservation and lets waiting calls decide again.
        """
        before = self._spent()
        await self._admit()
        try:
            yield
        finally:
            self._in_flight -= 1
            self._largest = max(self._largest, self._spent() - before)
            self._wake()

    async def _admit(self) -> None:
        while True:
            spent = self._spent()
            if spent >= self.limit:
                raise BudgetExceeded(
                    f"the run's token budget is spent: {spent} of {self.limit} tokens used "
                    "(options.maxTokens)"
                )
            if self._in_flight == 0 or (
                self._largest and spent + self._in_flight * self._largest < self.limit
            ):
                self._in_flight += 1
                return
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():  # cancelled while waiting
                    self._waiters.remove(waiter)

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _spent(self) -> int:
        return self._journal.prompt_tokens + self._journal.completion_tokens
