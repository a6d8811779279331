"""What a run does with a kind of leaf step: `LeafWork`, and what that work is given.

A kind of step is two halves. What a document says of it (its keys, its checks,
its label) is `cadenza.workflow.StepKind`, in the document layer, so that
``cadenza validate`` never loads the runtime. What a run does with it is
`LeafWork`: its work in this process, the work order a worker runs instead, and
how a worker runs that order. Cadenza's own kinds keep the halves apart, one
module each (``cadenza.workflow.kinds``, ``cadenza.actors.steps.kinds``); a kind
from outside Cadenza is one class, a `LeafKind`, with both.

The work sees its step through `LeafStep` (`StepActor` is the one there is), and
a worker's through `WorkerSite`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from cadenza.actors.run import Brief, RunContext, RunJournal, Scope
from cadenza.kernel import Clock
from cadenza.llm import ProviderRegistry
from cadenza.protocols import CallMade, KindOrder, Mail, StepEvent, Usage, WorkOrder
from cadenza.workflow import LoadedWorkflow, State, Step, StepKind

__all__ = [
    "LeafKind",
    "LeafStep",
    "LeafWork",
    "Send",
    "WorkSite",
    "WorkerSite",
    "directory",
    "order_head",
]

Send = Callable[[StepEvent | Mail | CallMade], None]
"""How a running order reaches its supervisor (events, messages); must not block."""


class LeafStep(Protocol):
    """What the work of a leaf step sees of the actor that runs it.

    ``document`` is the step's own: under ``worktree-per-step`` it is the
    worktree's while the work runs.
    """

    run: RunContext
    step: Step | State
    document: LoadedWorkflow
    scope: Scope
    brief: Brief
    first_attempt: int
    """Its first attempt's number: above 1 when a resumed run runs it again (or a
    supervisor restarts it)."""

    def render(self, text: str) -> str:
        """``text`` with its templates filled in from the step's scope and the run's inputs."""
        ...

    def drain_inbox(self) -> list[str]:
        """Takes the messages waiting for the step (an agent's inbox)."""
        ...


@dataclass(frozen=True, slots=True)
class WorkerSite:
    """Where a work order runs on a worker, and the ways back to its supervisor.

    Attributes:
        job: The dispatch's job number.
        fence: Its delivery fence (grows on every re-dispatch).
        clock: The worker's clock.
        providers: The model registry of a run id (a run's agents share one).
        send: Events and messages back to the supervisor.
        journal: A journal for a run id and workflow name that keeps nothing and
            sends every event back.
        usage: Where an order that calls models puts what it spent.
    """

    job: int
    fence: int
    clock: Clock
    providers: Callable[[str], ProviderRegistry]
    send: Send
    journal: Callable[[str, str], RunJournal]
    usage: list[Usage]


class LeafWork:
    """What a run does with one kind of leaf step: here, or through a worker.

    Attributes:
        isolated: It may write files: under ``worktree-per-step`` it runs in a git
            worktree of its own.
        mailbox: It takes the coordinator's messages: its actor gets the larger inbox.
        spends_tokens: Its ``step_end`` says the tokens it spent.
        journaled: Its calls are journaled (`CallLog`): an offline replay runs it
            against the journal. A leaf without is answered from its record there.
        effects: It acts outside the run (runs a command, calls a handler): it
            starts only once everything the run decided before it is durable, and
            its outcome is durable before anything after it starts. Without, its
            outcome is a decision, committed in the background
            (`RunJournal.step_finished`); an agent's own tool calls wait as effects.
    """

    isolated: ClassVar[bool] = False
    mailbox: ClassVar[bool] = False
    spends_tokens: ClassVar[bool] = False
    journaled: ClassVar[bool] = False
    effects: ClassVar[bool] = True

    def work(self, actor: LeafStep, address: str, attempt: int) -> Awaitable[tuple[str, Any]]:
        """Does attempt ``attempt`` of ``actor``'s step in this process: ``(content, result)``.

        Raises:
            StepFailure: The step failed with its own error (others are recorded too).
        """
        raise NotImplementedError

    def order(
        self, actor: LeafStep, address: str, attempt: int, seconds: float | None
    ) -> WorkOrder | None:
        """The work order a worker runs for this attempt (``seconds``: its timeout),
        decided here, where the run's state is; None: the attempt runs in this process."""
        return None

    def run_order(self, order: WorkOrder, site: WorkerSite) -> Awaitable[tuple[str, Any]]:
        """Runs ``order`` on a worker: ``(content, result)``, or raises as `work` does."""
        raise NotImplementedError


def order_head(
    actor: LeafStep, address: str, attempt: int, seconds: float | None
) -> dict[str, Any]:
    """What every work order of an attempt carries (`cadenza.protocols.WorkOrder`)."""
    run_id = actor.run.run_id
    return {
        "run_id": run_id,
        "address": address,
        "attempt": attempt,
        "idempotency_key": f"{run_id}:{address}:{attempt}",
        "base_dir": os.fspath(actor.document.base_dir.absolute()),
        "timeout": seconds,
    }


@functools.lru_cache(maxsize=256)
def directory(text: str) -> Path:
    """An order's workflow directory as a Path, built once: a handler is looked up by
    it per step."""
    return Path(text)


@dataclass(frozen=True, slots=True)
class WorkSite:
    """Where a `LeafKind`'s attempt runs: in the run's process or on a worker."""

    run_id: str
    address: str
    attempt: int
    idempotency_key: str
    base_dir: Path
    clock: Clock
    on_worker: bool = False


class LeafKind(StepKind, LeafWork):
    """A whole kind of leaf step: what a document says of it, and what a run does.

    Subclass it for a kind of your own and register one instance
    (`cadenza.workflow.register_step_kind`, or ``CADENZA_STEP_KINDS`` in every
    process that loads or runs it, workers included). Set `StepKind`'s
    attributes (``name``, ``spec``: the type of its block), then split the work
    in two: `prepare` decides what to do, where the run's state is (templates
    rendered, earlier steps read), and returns it as plain data (what msgspec
    encodes); `execute` does it from that data alone, in this process or on a
    worker, so that both give the same answer.
    """

    def prepare(self, actor: LeafStep, site: WorkSite) -> Any:
        """What the attempt at ``site`` should do, as plain data."""
        raise NotImplementedError

    async def execute(self, data: Any, site: WorkSite) -> tuple[str, Any]:
        """Does what `prepare` said: ``(content, result)``. Raise to fail the attempt."""
        raise NotImplementedError

    def work(self, actor: LeafStep, address: str, attempt: int) -> Awaitable[tuple[str, Any]]:
        site = _site(actor, address, attempt)
        return self.execute(self.prepare(actor, site), site)

    def order(
        self, actor: LeafStep, address: str, attempt: int, seconds: float | None
    ) -> WorkOrder | None:
        data = self.prepare(actor, _site(actor, address, attempt))
        head = order_head(actor, address, attempt, seconds)
        return KindOrder(**head, step_kind=self.name, data=data)

    def run_order(self, order: WorkOrder, site: WorkerSite) -> Awaitable[tuple[str, Any]]:
        assert isinstance(order, KindOrder)
        here = WorkSite(
            run_id=order.run_id,
            address=order.address,
            attempt=order.attempt,
            idempotency_key=order.idempotency_key,
            base_dir=directory(order.base_dir),
            clock=site.clock,
            on_worker=True,
        )
        return self.execute(order.data, here)


def _site(actor: LeafStep, address: str, attempt: int) -> WorkSite:
    run = actor.run
    return WorkSite(
        run_id=run.run_id,
        address=address,
        attempt=attempt,
        idempotency_key=f"{run.run_id}:{address}:{attempt}",
        base_dir=actor.document.base_dir,
        clock=run.clock,
    )
