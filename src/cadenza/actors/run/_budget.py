"""The run's budgets: ``maxTokens``, and ``maxCost`` of the run, an agent or a step.

Each budget is a gate before every model call it covers. Checking "spent <
budget" before each call is not enough when agents run in parallel: ten agents
start together, all see nothing spent, and all call. So a call *reserves*
before it starts. Each call in flight counts as costing as much as the largest
call the budget has seen so far; a new call starts only while what is spent
plus what is reserved stays below the budget, and waits for calls in flight
otherwise. Before any call has finished its cost is unknown, so a budget's
first call goes alone.

What that guarantees: a budget ends at most one call past its limit, as long as
no call costs more than the largest one before it (prompts grow, so a call can
cost somewhat more; never a whole extra round of parallel calls).

A call passes every budget that covers it (`Budgets.covering`): the run's token
and cost budgets, its agent's, and those of the steps it is inside (a loop's,
a graph's, an include's, its own), taken in one fixed order so that two calls
waiting on each other's budgets cannot wait forever. What a budget has spent it
reads from the journal, which counts every call's tokens and cost (a resumed
run's calls made before it stopped included).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from cadenza.errors import CadenzaError

from ._journal import RunJournal, ancestors

__all__ = ["Budget", "BudgetExceeded", "Budgets", "CostKey"]

Unit = Literal["tokens", "usd"]


class BudgetExceeded(CadenzaError):
    """A budget (``maxTokens``, ``maxCost``) is spent; the run ends ``failed``."""


class Budget:
    """Admits model calls while one budget allows (see the module docstring).

    Args:
        limit: The budget, in ``unit``.
        spent: What the calls it covers have spent so far, in ``unit``.
        what: The budget in words (``the run's token budget``), for the error.
        key: Where it is set (``options.maxTokens``), for the error.
        unit: ``tokens`` or ``usd``.
    """

    def __init__(
        self, limit: float, spent: Callable[[], float], what: str, key: str, unit: Unit
    ) -> None:
        self.limit = limit
        self.what = what
        self.key = key
        self.unit = unit
        self._spent = spent
        self._largest = 0.0  # what the costliest call so far spent: what a call reserves
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

    def spent(self) -> float:
        """What the calls it covers have spent so far, in its unit."""
        return self._spent()

    def exceeded(self, spent: float) -> BudgetExceeded:
        """The error of this budget spent at ``spent``."""
        if self.unit == "tokens":
            used = f"{int(spent)} of {int(self.limit)} tokens used"
        else:
            used = f"${spent:.6g} of ${self.limit:g} used"
        return BudgetExceeded(f"{self.what} is spent: {used} ({self.key})")

    async def _admit(self) -> None:
        while True:
            spent = self._spent()
            if spent >= self.limit:
                raise self.exceeded(spent)
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


CostKey = tuple[int, str]
"""Which cost budget: (0, ``""``) the run's, (1, agent name), (2, a step's address).
Budgets are taken in the order of their keys (an address's ancestors sort before it)."""


@dataclass(eq=False)
class Budgets:
    """A run's budgets, made as calls first need them (touched only on the event loop)."""

    journal: RunJournal
    max_tokens: int | None = None
    max_cost: float | None = None
    _tokens: Budget | None = None
    _costs: dict[CostKey, Budget] = field(default_factory=dict)
    run_cost: tuple[str, str] = ("the run's cost budget", "options.maxCost")
    """How ``max_cost`` is named in its error: in words, and where it is set (a remote
    worker's run stands for the budget its supervisor sent, whichever that is)."""
    steps: dict[str, tuple[float, str]] = field(default_factory=dict)
    """The steps with a ``maxCost`` that have started: their address -> (limit, where
    it is set). A call at an address under one (or at it) passes its budget."""

    def watch_step(self, address: str, limit: float, where: str) -> None:
        """A step with ``maxCost`` starts at ``address``: the calls under it pass its budget."""
        if address not in self.steps:  # a retry or a revisit goes on spending the same one
            self.steps[address] = (limit, where)
            self.journal.watch_cost(address)

    def covering(self, address: str, agent: str | None, agent_limit: float | None) -> list[Budget]:
        """The budgets a model call at ``address`` by ``agent`` passes, in the order taken."""
        found: list[Budget] = []
        if self.max_tokens is not None:
            if self._tokens is None:
                journal = self.journal
                self._tokens = Budget(
                    self.max_tokens,
                    journal.spent_tokens,
                    "the run's token budget",
                    "options.maxTokens",
                    "tokens",
                )
            found.append(self._tokens)
        if self.max_cost is not None:
            what, where = self.run_cost
            found.append(self._cost((0, ""), self.max_cost, what, where))
        if agent is not None and agent_limit is not None:
            what = f"agent {agent!r}'s cost budget"
            found.append(self._cost((1, agent), agent_limit, what, f"agents.{agent}.maxCost"))
        if self.steps:
            for prefix in ancestors(address):
                step = self.steps.get(prefix)
                if step is not None:
                    what = f"step {prefix!r}'s cost budget"
                    found.append(self._cost((2, prefix), step[0], what, step[1]))
        return found

    def _cost(self, key: CostKey, limit: float, what: str, where: str) -> Budget:
        budget = self._costs.get(key)
        if budget is None:
            journal = self.journal
            kind, name = key
            spent: Callable[[], float]
            if kind == 0:
                spent = journal.spent_cost
            elif kind == 1:
                spent = partial(journal.agent_cost, name)
            else:
                spent = partial(journal.cost_under, name)
            budget = self._costs[key] = Budget(limit, spent, what, where, "usd")
        return budget

    @asynccontextmanager
    async def call(self, budgets: list[Budget]) -> AsyncIterator[None]:
        """Holds a reservation in each of ``budgets`` for one model call (see `Budget.call`)."""
        if not budgets:
            yield
            return
        async with AsyncExitStack() as stack:
            for budget in budgets:
                await stack.enter_async_context(budget.call())
            yield
