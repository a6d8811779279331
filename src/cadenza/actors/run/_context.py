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
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol

from cadenza.kernel import Actor, Address, Clock, Slots, Supervisor
from cadenza.llm import PriceTable, ProviderRegistry
from cadenza.protocols import ErrorInfo, StepRecord
from cadenza.workflow import LoadedWorkflow, MemoryWindow, Options, State, Step, ThinkingLevel

from ._budget import BudgetExceeded, Budgets
from ._dispatch import StepDispatcher
from ._journal import Position, RunJournal
from ._mcp import McpHost
from ._messages import COORDINATOR, Backlog, Outgoing, Unanswered
from ._outcome import Report
from ._permissions import PermissionPolicy
from ._recording import Recording
from ._worktrees import Worktrees

__all__ = [
    "NO_BRIEF",
    "Brief",
    "Cancellable",
    "PlacedActor",
    "Placement",
    "RunBasis",
    "RunContext",
    "Scope",
    "SpawnStep",
    "cancel_parked",
    "collect_step_ids",
    "document_step_ids",
]


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
        memory: The enclosing loop's ``memory`` mode: ``fresh``, ``accumulate``
            or ``MemoryWindow(window=N)``; what an agent keeps across iterations.
        memory_key: Stable across the iterations of one loop and unique per body
            step (``dev-cycle:implement``): where an agent keeps that conversation.
    """

    feedback: str | None = None
    previous: str | None = None
    routed_from: str | None = None
    routed_content: str | None = None
    item_index: int | None = None
    memory: Literal["fresh", "accumulate"] | MemoryWindow = "fresh"
    memory_key: str | None = None


NO_BRIEF = Brief()
"""The brief of a step whose controller has nothing to add."""


class Cancellable(Protocol):
    """Something running under a run that can be told to stop its current work."""

    def cancel(self, reason: str) -> None:
        """Stops the work soon; the owner records it as ``cancelled``."""


def cancel_parked(task: asyncio.Task[Any] | None, reason: str) -> None:
    """Cancels ``task`` where it waits inside its work, unless ``task`` is the caller.

    Work can cancel the run it belongs to (an agent finding the token budget spent
    cancels everything running, itself included). Its task is then running, not
    parked, and a cancellation requested now would fire at the task's next await:
    the recording of its own outcome, which is lost, and whoever waits for that
    outcome waits forever. Such work ends by itself a moment later.
    """
    if task is not None and task is not asyncio.current_task():
        task.cancel(reason)


class SpawnStep(Protocol):
    """Starts the actor that runs a placed step at ``address`` (`RunContext.spawn_step`)."""

    def __call__(self, placement: Placement, address: Address) -> Cancellable: ...


def _no_containers(placement: Placement, address: Address) -> Cancellable:
    raise RuntimeError(f"{address}: this run spawns no steps (a worker runs leaf steps only)")


class Deliver(Protocol):
    """Puts a message into a step's inbox, or refuses it (`RunContext.deliver`)."""

    def __call__(self, target: str, text: str, kind: str, *, sender: str) -> None: ...


def _no_coordinator(target: str, text: str, kind: str, *, sender: str) -> None:
    raise RuntimeError(f"{target}: this run carries no messages (a worker runs leaf steps only)")


@dataclass(eq=False, kw_only=True)
class RunBasis:
    """What a run is given: the base of `RunSetup` (what `execute_run` is handed) and
    of `RunContext` (what its actors share), declared once for both.
    """

    run_id: str
    document: LoadedWorkflow
    inputs: dict[str, Any]
    journal: RunJournal
    clock: Clock
    max_concurrency: int = 0
    """Steps in parallel, the size of the run's slots (0: unknown); forEach never keeps
    more iterations alive."""
    default_model: str | None = None
    """The model of agent steps that name none."""
    default_thinking: ThinkingLevel | None = None
    """The ``thinking`` level of agents that set none (``--thinking``; None: the
    provider's default)."""
    dispatcher: StepDispatcher | None = None
    """Where leaf steps run when the run has remote workers (None: in this process)."""
    recording: Recording | None = None
    """The recorded run this one replays offline (``cadenza replay``): its agents' calls
    are answered from its journal, its other leaves from its records, and each decision
    is checked against its own (None: the run is live)."""
    prices: PriceTable = field(default_factory=PriceTable)
    """What a model call costs (docs/prices.md): the shipped prices under the workflow's
    ``prices:`` and the caller's (`run_prices`)."""

    def shared(self) -> dict[str, Any]:
        """These fields by name, to make a `RunContext` of a `RunSetup` (or the reverse)."""
        return {name: getattr(self, name) for name in _BASIS}


_BASIS = tuple(basis.name for basis in fields(RunBasis))


@dataclass(eq=False, kw_only=True)
class RunContext(RunBasis):
    """The state shared by every actor of one run (touched only on the event loop).

    Its `RunBasis` is what the run was set up with; the rest is made for the run.
    """

    supervisor: Supervisor
    limiter: Slots
    step_ids: frozenset[str]
    providers: ProviderRegistry
    cancelled: str | None = None
    failure: ErrorInfo | None = None
    active: set[Cancellable] = field(default_factory=set)
    mail: dict[str, deque[Any]] = field(default_factory=dict)
    """Messages forwarded to a step with no live instance, kept for its next one."""
    mail_bytes: dict[str, int] = field(default_factory=dict)
    """Per step name: UTF-8 bytes of message text delivered, not yet drained (INBOX_BYTES)."""
    backlog: Backlog = field(default_factory=Backlog)
    """The run's messages waiting for delivery, all steps together (RUN_MAIL_SIZE, _BYTES)."""
    unanswered: Unanswered = field(default_factory=Unanswered)
    """Per sender, its messages the coordinator agent has yet to answer (see `Unanswered`)."""
    conversations: dict[str, list[list[Any]]] = field(default_factory=dict)
    """Per ``Brief.memory_key``: each earlier visit's turns, for ``memory`` other than fresh."""
    spawn_step: SpawnStep = _no_containers
    """Starts the actor of a step; the run wires the one that knows every step kind."""
    deliver: Deliver = _no_coordinator
    """Delivers a posted message at once; the run wires its coordinator's."""
    mcp: McpHost | None = None
    """The run's MCP servers (None: the workflow declares none)."""
    permissions: PermissionPolicy = field(default_factory=PermissionPolicy)
    """Asked before every tool call an agent's model makes."""
    worktrees: Worktrees | None = None
    """Each writing step's git worktree (``isolation: worktree-per-step``; else None)."""
    budgets: Budgets = field(init=False)
    """The gates of ``maxTokens`` and ``maxCost``, each made on the first call it covers."""
    positions: dict[int, tuple[Sequence[Step], Mapping[str, Position]]] = field(
        default_factory=dict
    )
    """The `Position` of each step of a list of steps, by the list's identity: worked
    out once a run (`DagController`), as a loop's body is the same list every
    iteration. Each entry holds its list, so that its identity is not reused."""

    @property
    def options(self) -> Options:
        """The root workflow's options."""
        return self.document.workflow.options

    def __post_init__(self) -> None:
        options = self.options
        self.budgets = Budgets(self.journal, options.max_tokens, options.max_cost)

    def model_call(
        self, address: str, agent: str | None, agent_limit: float | None, unpriced: str | None
    ) -> AbstractAsyncContextManager[None]:
        """Wraps one model call at ``address`` by ``agent`` (whose ``maxCost`` is
        ``agent_limit``): reserves in every budget that covers it (see `Budgets`).
        ``unpriced`` names the call's model when it has no price (None: it has one).

        Raises:
            BudgetExceeded: A budget that covers it is spent, or a cost budget covers
                a call to a model with no price (a run's check at load misses only a
                model it could not see, such as a control role's templated workflow's).
        """
        budgets = self.budgets.covering(address, agent, agent_limit)
        for budget in budgets if unpriced is not None else ():
            if budget.unit == "usd":
                raise BudgetExceeded(
                    f"model {unpriced!r} has no price, and {budget.what} ({budget.key}) "
                    "cannot count a call it cannot price: give it one (docs/prices.md)"
                )
        return self.budgets.call(budgets)

    def tell_coordinator(self, sender: str, text: str) -> None:
        """Sends an agent's message to the coordinator; ``sender`` now waits for its answer.

        Raises:
            InboxFull: The coordinator holds `INBOX_SIZE` messages; nothing was sent.
        """
        self.unanswered.sent(sender)
        try:
            self.supervisor.tell_nowait(COORDINATOR, Outgoing(sender, text))
        except BaseException:
            self.unanswered.answered(sender)  # never sent: nothing to answer
            raise

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

    __slots__ = ("_steps", "inputs", "parent", "variables")

    def __init__(
        self,
        parent: Scope | None = None,
        variables: dict[str, Any] | None = None,
        *,
        inputs: dict[str, Any] | None = None,
    ) -> None:
        """A scope below ``parent`` (None: a fresh top level).

        ``inputs`` overrides the run's inputs here and below: an included workflow
        sees its own inputs, not the root's. Without it a scope inherits its parent's.
        """
        self.parent = parent
        self.variables = variables or {}
        self.inputs: dict[str, Any] | None = (
            inputs if inputs is not None or parent is None else parent.inputs
        )
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
        names: dict[str, Any] = dict(self.variables)
        scope = self.parent
        while scope is not None:  # inner levels shadow outer ones
            for key, value in scope.variables.items():
                names.setdefault(key, value)
            scope = scope.parent
        names["inputs"] = self.inputs if self.inputs is not None else inputs
        names["steps"] = self.steps()
        return names


def collect_step_ids(steps: Iterable[Step]) -> frozenset[str]:
    """Every step id declared in a list of steps, loop bodies and graph states included."""
    ids: set[str] = set()
    stack: list[Step | State] = list(steps)
    while stack:
        body = stack.pop()
        if isinstance(body, Step):
            ids.add(body.id)
        if body.loop is not None and body.loop.steps:
            stack.extend(body.loop.steps)
        if body.graph is not None:
            stack.extend(body.graph.states.values())
    return frozenset(ids)


def document_step_ids(document: LoadedWorkflow) -> frozenset[str]:
    """Every step id of a workflow and of everything it includes (for ``steps.a-b``)."""
    ids: set[str] = set()
    seen: set[int] = set()
    pending = [document]
    while pending:
        loaded = pending.pop()
        if id(loaded) in seen:
            continue
        seen.add(id(loaded))
        ids.update(collect_step_ids(loaded.workflow.steps))
        pending.extend(loaded.includes.values())
    # The expression and template caches are keyed by this set: each run of a
    # document must hand them the very same object, or every cache hit compares
    # two equal sets element by element (11 us per lookup at 1,000 steps).
    found = frozenset(ids)
    if len(_INTERNED) >= _INTERNED_MAX:
        _INTERNED.clear()
    return _INTERNED.setdefault(found, found)


_INTERNED: dict[frozenset[str], frozenset[str]] = {}
_INTERNED_MAX = 256


@dataclass(slots=True)
class Placement:
    """A step about to run: its run, document and definition, what it sees, whom it tells.

    Every actor that runs a step (a leaf, one waiting for a person, a container)
    is built from one; a controller makes one for each child it spawns.
    """

    run: RunContext
    document: LoadedWorkflow
    step_id: str
    step: Step | State
    scope: Scope
    report: Report
    """How the step's actor reaches its controller when it has a final record."""
    position: Position
    """zenflow's ``index`` and ``total`` for the step's ``step_start`` (`StepStart`)."""
    brief: Brief = NO_BRIEF
    first_attempt: int = 1
    """The number of a leaf's first attempt: past its earlier attempts when its list's
    supervisor restarts it (``options.supervisor``), so every execution has its own."""


class PlacedActor(Actor):
    """An actor that runs one step: its `Placement`'s fields are its attributes."""

    def __init__(self, placement: Placement) -> None:
        self.run = placement.run
        self.document = placement.document
        self.step_id = placement.step_id
        self.step = placement.step
        self.scope = placement.scope
        self.report = placement.report
        self.brief = placement.brief
        self.position = placement.position
