"""What every container step shares: a loop, forEach, graph or include controller.

A container is an actor at the step's address that runs children (leaf steps,
sub-DAGs, other containers) and reports one `StepFinished` for itself. This
base holds the life cycle they all follow, as zenflow defines it for loops and
includes: ``timeout`` bounds one attempt of the whole container, ``retries``
re-runs it from the beginning, cancellation reaches every running child and
whatever the controller is awaiting itself (a judge, a delay). The container's
own record is written durably before its controller hears of it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import msgspec

from cadenza.actors.run import (
    NO_BRIEF,
    Brief,
    Cancellable,
    PlacedActor,
    Placement,
    Report,
    Scope,
    StepFinished,
    cancel_parked,
)
from cadenza.kernel import Address, Timer
from cadenza.protocols import ErrorInfo, EventType, StepRecord, StepRetry, StepStart, StepStatus
from cadenza.workflow import LoadedWorkflow, State, Step, parse_duration

from ._dag import DagController, DagOutcome

__all__ = ["ChildDone", "Container", "Outcome", "amend", "last_output", "looped_body"]

T = TypeVar("T")

_STATUSES: dict[str, StepStatus] = {
    "completed": "completed",
    "cancelled": "cancelled",
    "waiting": "waiting",
}


@dataclass(frozen=True, slots=True)
class ChildDone:
    """A child of a container finished: ``key`` tells which (iteration, item, visit)."""

    key: int
    record: StepRecord


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a container ends with, before it becomes its step record."""

    status: StepStatus
    content: str | None = None
    result: Any = None
    error: ErrorInfo | None = None


_BRIEF_FIELDS = tuple(field.name for field in dataclasses.fields(Brief))


def amend(brief: Brief, **changes: Any) -> Brief:
    """``dataclasses.replace`` for a `Brief`, minus its per-call introspection (hot path)."""
    if brief is NO_BRIEF:
        return Brief(**changes)
    values = {name: getattr(brief, name) for name in _BRIEF_FIELDS}
    values.update(changes)
    return Brief(**values)


def last_output(steps: Sequence[Step], scope: Scope) -> tuple[str | None, Any]:
    """Content and result of the last step, in declaration order, that ran in ``scope``."""
    outputs = scope.own_steps()
    for step in reversed(steps):
        output = outputs.get(step.id)
        if output is not None and output["status"] not in ("skipped", "cancelled"):
            return output["content"], output["result"]
    return None, None


def looped_body(step: Step | State, steps: Sequence[Step] | None) -> Step | State | None:
    """What a loop or forEach without ``steps`` repeats: the step itself, its loop gone and
    its timeout and retries too (they are the loop's); None when ``steps`` are the body."""
    return None if steps else msgspec.structs.replace(step, loop=None, timeout=None, retries=0)


class Container(PlacedActor):
    """Base of the container controllers: attempts, timeout, cancellation, the final record.

    Subclasses implement `begin` (start an attempt from scratch) and `child_done`
    (a child finished), spawn children with `reporter`, `spawn_looped` or
    `spawn_body`, and end with `finish`. Before starting anything new they check
    `stopping`.
    """

    kind: ClassVar[str] = "container"

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement)
        self.children: dict[int, Cancellable] = {}
        self.attempt = placement.first_attempt - 1
        self._last_attempt = self.attempt + 1 + self.step.retries  # a restart counts on
        self.done = False
        self.here = ""
        self._started = 0.0
        self._cancel_reason: str | None = None
        self._expired: str | None = None
        self._timer: Timer | None = None
        self._parked: asyncio.Task[Any] | None = None

    # Subclass hooks ----------------------------------------------------------

    async def begin(self) -> None:
        """Starts an attempt from a clean state."""
        raise NotImplementedError

    async def child_done(self, key: int, record: StepRecord) -> None:
        """Takes the outcome of child ``key``."""
        raise NotImplementedError

    async def before_start(self) -> None:
        """Work an attempt does before its ``step_start`` (a forEach's items); none here.

        It runs under the attempt's timeout and can be cancelled like `begin`.
        """

    def start_data(self, attempt: int) -> StepStart:
        """The data of the container's ``step_start`` event for ``attempt``."""
        index, total = self.position
        return StepStart(kind=self.kind, attempt=attempt, index=index, total=total)

    # Life cycle --------------------------------------------------------------

    async def on_start(self) -> None:
        """Starts the first attempt."""
        self.here = str(self.address)
        self.run.active.add(self)
        self._started = self.run.clock.now()
        await self._next_attempt()

    async def receive(self, message: Any) -> None:
        """Takes a child's `ChildDone`."""
        if type(message) is ChildDone:
            self.children.pop(message.key, None)
            if not self.done:
                await self.child_done(message.key, message.record)

    @property
    def stopping(self) -> str | None:
        """Why nothing new may start (cancelled, timed out), or None."""
        return self._expired or self._cancel_reason or self.run.cancelled

    def cancel(self, reason: str) -> None:
        """Cancels every running child and whatever the controller awaits itself."""
        if self._cancel_reason is not None or self.done:
            return
        self._cancel_reason = reason
        self._interrupt(reason)

    def _interrupt(self, reason: str) -> None:
        for child in list(self.children.values()):
            child.cancel(reason)
        cancel_parked(self._parked, reason)

    def _expire(self) -> None:
        self._timer = None
        if self.done or self.stopping is not None:
            return
        self._expired = f"timed out after {self.step.timeout}"
        self._interrupt(self._expired)

    async def _next_attempt(self) -> None:
        self.attempt += 1
        self._expired = None
        self.children.clear()
        if self.step.timeout:
            seconds = parse_duration(self.step.timeout)
            self._timer = self.run.clock.call_later(seconds, self._expire)
        await self.before_start()
        self.run.journal.step_started(self.here, self.start_data(self.attempt), agent=None)
        await self.begin()

    async def park(self, awaitable: Awaitable[T]) -> T | None:
        """Awaits the controller's own work (a judge, a delay) so `cancel` can interrupt it.

        Returns None when it was interrupted; the caller then checks `stopping`.
        """
        task = asyncio.current_task()
        assert task is not None
        self._parked = task
        try:
            return await awaitable
        except asyncio.CancelledError:
            if self.stopping is None:
                raise  # the run itself is being torn down: not ours to swallow
            task.uncancel()
            return None
        finally:
            self._parked = None

    async def finish(self, outcome: Outcome) -> None:
        """Ends an attempt: retries a failure if ``retries`` allow, else records and reports."""
        if self.done:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        status, error = outcome.status, outcome.error
        if self._expired is not None and status != "completed":
            status, error = "failed", ErrorInfo("Timeout", self._expired, self.here)
        elif status == "cancelled" and error is None:
            error = ErrorInfo("Cancelled", self.stopping or "cancelled", self.here)
        retry = self._cancel_reason is None and self.run.cancelled is None
        if status == "failed" and retry and self.attempt < self._last_attempt:
            self.run.journal.emit(
                EventType.STEP_RETRY,
                step_id=self.here,
                error=f"{error.type}: {error.message}" if error is not None else None,
                data=StepRetry(attempt=self.attempt, of=self._last_attempt),
            )
            await self._next_attempt()
            return
        self.done = True
        self.run.active.discard(self)
        elapsed = self.run.clock.now() - self._started
        # A container that waits holds no output: only the step that asks holds a question.
        waits = status == "waiting"
        record = StepRecord(
            status=status,
            content=None if waits else outcome.content,
            result=None if waits else outcome.result,
            attempts=self.attempt,
            duration_ms=int(elapsed * 1000),
            error=error,
        )
        # A person asked stays an effect: the question must outlive a kill.
        await self.run.journal.step_finished(self.here, record, decision=not waits)
        await self.report(StepFinished(self.step_id, record))
        self.stop()

    # Children ----------------------------------------------------------------

    def reporter(self, key: int) -> Report:
        """How child ``key`` reports: its `StepFinished` arrives here as `ChildDone`."""
        send = self.ref.send

        async def report(finished: StepFinished) -> None:
            await send(ChildDone(key, finished.record))

        return report

    def spawn_looped(
        self, key: int, body: Step | State, scope: Scope, address: Address, brief: Brief
    ) -> None:
        """Runs the looped step itself (`looped_body`) once at ``address``, an iteration or
        an item; it comes back as `ChildDone(key)`. zenflow gives it its loop's position."""
        placement = Placement(
            self.run,
            self.document,
            self.step_id,
            body,
            scope,
            self.reporter(key),
            self.position,
            brief,
        )
        self.children[key] = self.run.spawn_step(placement, address)

    def spawn_body(
        self,
        key: int,
        steps: Sequence[Step],
        scope: Scope,
        prefix: Address,
        *,
        document: LoadedWorkflow | None = None,
        briefs: Mapping[str, Brief] | None = None,
        at: Address | None = None,
        kind: str = "iteration",
    ) -> None:
        """Runs ``steps`` as a sub-DAG under ``prefix``; it comes back as `ChildDone(key)`.

        The sub-DAG's own record (status, and the content and result of its last
        step that ran) is written at ``prefix`` unless its actor lives elsewhere
        (``at``), as an include's does.
        """
        run = self.run
        send = self.ref.send
        address = at or prefix
        started = run.clock.now()
        if at is None:  # an iteration or item: the position of the step it belongs to
            index, total = self.position
            start = StepStart(kind=kind, attempt=1, index=index, total=total)
            run.journal.step_started(str(prefix), start, agent=None)

        async def report(outcome: DagOutcome) -> None:
            content, result = last_output(steps, scope)
            elapsed = run.clock.now() - started
            waits = outcome.status == "waiting"
            record = StepRecord(
                status=_STATUSES.get(outcome.status, "failed"),
                content=None if waits else content,
                result=None if waits else result,
                attempts=1,
                duration_ms=int(elapsed * 1000),
                error=outcome.error,
            )
            if at is None:
                await run.journal.step_finished(str(prefix), record, decision=not waits)
            await send(ChildDone(key, record))

        dag = DagController(run, document or self.document, steps, scope, prefix, report, briefs)
        run.supervisor.spawn(address, lambda: dag)
        self.children[key] = dag
