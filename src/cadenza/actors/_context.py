"""What the actors of one run share: the run context and CEL scopes.

`RunContext` is passed explicitly to every actor of a run (no globals, no
context variables): the run's id, inputs and options, its journal, the
supervisor that owns its actors, the clock, and the run-wide concurrency limit.
`Scope` is what a CEL expression sees as ``steps`` plus loop variables; scopes
nest, so a loop body sees its own steps over those of the workflow around it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from cadenza.llm import ProviderRegistry
from cadenza.protocols import ErrorInfo, StepRecord
from cadenza.runtime import Clock, Supervisor
from cadenza.workflow import LoadedWorkflow, Options, Step

from ._journal import RunJournal

__all__ = ["NO_BRIEF", "Brief", "Cancellable", "RunContext", "Scope", "collect_step_ids"]


@dataclass(frozen=True, slots=True)
class Brief:
    """What a controller tells a step it starts, beyond its scope's ``steps``.

    Agent steps turn these into prompt sections; handler steps see them in
    `StepContext.extra`; commands ignore them.

    Attributes:
        feedback: Revision feedback: the previous iteration's output (loops,
            ``feedback: true``) or judge feedback, shown under ``## Revision feedback``.
        previous: This step's own output on its previous visit (graph revisits).
        routed_from: The graph state that routed here.
        routed_content: That state's output.
        item_index: The forEach position, shown with the item under
            ``## forEach Item (index: N)``; the item itself is the ``item`` variable.
    """

    feedback: str | None = None
    previous: str | None = None
    routed_from: str | None = None
    routed_content: str | None = None
    item_index: int | None = None


NO_BRIEF = Brief()
"""The brief of a step whose controller has nothing to add."""


class Cancellable(Protocol):
    """Something running under a run that can be told to stop its current work."""

    def cancel(self, reason: str) -> None:
        """Stops the work soon; the owner records it as ``cancelled``."""


@dataclass(eq=False)
class RunContext:
    """The state shared by every actor of one run (touched only on the event loop)."""

    run_id: str
    document: LoadedWorkflow
    inputs: dict[str, Any]
    journal: RunJournal
    supervisor: Supervisor
    clock: Clock
    limiter: asyncio.Semaphore
    step_ids: frozenset[str]
    providers: ProviderRegistry
    default_model: str | None = None
    cancelled: str | None = None
    failure: ErrorInfo | None = None
    active: set[Cancellable] = field(default_factory=set)
    mail: dict[str, deque[Any]] = field(default_factory=dict)
    """Messages forwarded to a step with no live instance, kept for its next one."""

    @property
    def options(self) -> Options:
        """The root workflow's options."""
        return self.document.workflow.options

    def exhaust_budget(self, error: ErrorInfo) -> None:
        """Ends the run as ``failed`` with ``error``: the token budget is spent."""
        if self.failure is None:
            self.failure = error
        self.cancel(error.message)

    def cancel(self, reason: str) -> None:
        """Stops the run: nothing new starts and everything running is cancelled."""
        if self.cancelled is not None:
            return
        self.cancelled = reason
        for work in list(self.active):
            work.cancel(reason)


class Scope:
    """The outputs of the steps visible at one level, and that level's variables."""

    __slots__ = ("_steps", "parent", "variables")

    def __init__(
        self, parent: Scope | None = None, variables: dict[str, Any] | None = None
    ) -> None:
        self.parent = parent
        self.variables = variables or {}
        self._steps: dict[str, dict[str, Any]] = {}

    def record(self, step_id: str, record: StepRecord) -> None:
        """Makes a finished step visible as ``steps.<id>``."""
        self._steps[step_id] = {
            "content": record.content if record.content is not None else "",
            "result": record.result,
            "status": record.status,
        }

    def steps(self) -> dict[str, dict[str, Any]]:
        """Every visible step output, inner levels shadowing outer ones."""
        if self.parent is None:
            return self._steps
        merged = dict(self.parent.steps())
        merged.update(self._steps)
        return merged

    def own_steps(self) -> dict[str, dict[str, Any]]:
        """The outputs recorded at this level only."""
        return self._steps

    def activation(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The names a CEL expression evaluated here can use."""
        names: dict[str, Any] = {}
        for scope in self._chain():
            for key, value in scope.variables.items():
                names.setdefault(key, value)
        names["inputs"] = inputs
        names["steps"] = self.steps()
        return names

    def _chain(self) -> Iterator[Scope]:
        scope: Scope | None = self
        while scope is not None:
            yield scope
            scope = scope.parent


def collect_step_ids(steps: Iterable[Step]) -> frozenset[str]:
    """Every step id declared in a list of steps, loop bodies included."""
    ids: set[str] = set()
    stack = list(steps)
    while stack:
        step = stack.pop()
        ids.add(step.id)
        if step.loop is not None and step.loop.steps:
            stack.extend(step.loop.steps)
    return frozenset(ids)
