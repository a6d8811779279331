"""The DAG controller: runs a list of steps in dependency order, no superstep barrier.

A step starts as soon as its own dependencies have finished (durably), so a fast
branch never waits behind a slow one. Readiness is tracked with a count of
unfinished dependencies per step, so each completion costs O(its dependents).
Failure propagation follows ``options.onStepFailure``:

* ``cascade``: the failed step's dependents, transitively, are ``cancelled``
  with no error of their own (zenflow's meaning); independent branches go on;
* ``skip-dependents``: its direct dependents are ``skipped``; a skipped step
  counts as finished, so theirs run (their ``condition`` can test the status);
* ``abort``: running steps are cancelled and nothing new starts.

A step with ``onError: continue`` is recorded as failed but its dependents run.
Under ``options.supervisor`` a step's failure is not final at once: the DAG is
the supervisor of its steps and runs it again, with its running siblings by the
strategy (``_restarts``), until the restart intensity is spent.
A skipped step (false ``condition``) counts as finished for its dependents, who
can test ``steps.<id>.status``. A step ``waiting`` for a person holds its
dependents back; once nothing else can run, the DAG ends as ``waiting``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any

from cadenza.actors.run import (
    NO_BRIEF,
    Brief,
    Cancellable,
    Placement,
    Scope,
    StepFinished,
    work_error,
)
from cadenza.kernel import Actor, Address
from cadenza.protocols import ErrorInfo, EventType, StepRecord, StepStatus
from cadenza.workflow import LoadedWorkflow, Step, compile_expression

from ._restarts import Restarts

if TYPE_CHECKING:  # annotations only
    from cadenza.actors.run import RunContext

__all__ = ["DagController", "DagOutcome"]


@dataclass(frozen=True, slots=True)
class DagOutcome:
    """How a DAG ended: its status, the content of its last step that ran, the first error."""

    status: str
    content: str | None
    error: ErrorInfo | None


DagReport = Callable[[DagOutcome], Awaitable[None]]


class DagController(Actor):
    """Schedules the steps of one scope and reports a `DagOutcome` when all are final."""

    def __init__(
        self,
        run: RunContext,
        document: LoadedWorkflow,
        steps: Sequence[Step],
        scope: Scope,
        prefix: Address | None,
        report: DagReport,
        briefs: Mapping[str, Brief] | None = None,
    ) -> None:
        self.run = run
        # What a loop or forEach controller tells some of its body steps.
        self.briefs = briefs or {}
        self.document = document
        self.steps = {step.id: step for step in steps}
        self.order = [step.id for step in steps]
        self.scope = scope
        self.prefix = prefix
        self.report = report
        self.waiting_on = {step.id: len(set(step.depends_on)) for step in steps}
        self.dependents: dict[str, list[str]] = {step.id: [] for step in steps}
        for step in steps:
            for dependency in set(step.depends_on):
                self.dependents[dependency].append(step.id)
        known = run.positions.get(id(steps))
        if known is None:  # a loop's body runs the same list each iteration: once a run
            ranked = _zenflow_order(self.order, self.waiting_on, self.dependents)
            total = len(ranked)
            # {step_id: (index, total)}, made in C: this runs once per step of a DAG.
            places = zip(range(total), repeat(total, total), strict=True)
            here = dict(zip(ranked, places, strict=True))
            known = run.positions[id(steps)] = (steps, here)
        self.positions = known[1]
        self.records: dict[str, StepRecord] = {}
        self.running: dict[str, Cancellable] = {}
        self.aborting = False
        self.first_error: ErrorInfo | None = None
        self.reported = False
        self.addresses: dict[str, Address] = {}
        self.waiting = 0  # steps waiting for a person: their dependents wait with them
        self.pending: asyncio.Future[bool] | None = None  # an async condition being awaited
        supervision = run.options.supervisor
        self.restarts = Restarts(supervision) if supervision is not None else None

    def _address(self, step_id: str) -> Address:
        address = self.addresses.get(step_id)
        if address is None:  # built once per step: Address.root validates its name
            address = (
                self.prefix.child(step_id) if self.prefix is not None else Address.root(step_id)
            )
            self.addresses[step_id] = address
        return address

    async def on_start(self) -> None:
        """Starts every step without dependencies."""
        settled = []
        for step_id in self.order:
            if self.waiting_on[step_id] == 0:
                record = await self._launch(step_id)
                if record is not None:
                    settled.append((step_id, record))
        await self._advance(settled)
        await self._maybe_done()

    async def receive(self, message: Any) -> None:
        """Takes a child's `StepFinished` and starts what it unblocked."""
        if isinstance(message, StepFinished):
            self.running.pop(message.step_id, None)
            if self.restarts is not None and await self._restarted(message):
                return  # the step runs again: its record is not final
            await self._advance([(message.step_id, message.record)])
            await self._maybe_done()

    def cancel(self, reason: str) -> None:
        """Cancels every running step (and an async condition being awaited); nothing new starts."""
        self.aborting = True
        for child in list(self.running.values()):
            child.cancel(reason)
        if self.pending is not None:
            self.pending.cancel(reason)

    async def _advance(self, finished: list[tuple[str, StepRecord]]) -> None:
        """Notes finished steps and launches their unblocked dependents, iteratively.

        A worklist rather than recursion: a failure cascading down a 1,000-step
        chain must not exhaust the stack.
        """
        work = deque(finished)
        while work:
            step_id, record = work.popleft()
            self._note(step_id, record)
            if record.status == "waiting":
                self.waiting += 1
                continue
            for dependent in self.dependents[step_id]:
                self.waiting_on[dependent] -= 1
                if self.waiting_on[dependent] == 0:
                    settled = await self._launch(dependent)
                    if settled is not None:
                        work.append((dependent, settled))

    async def _launch(self, step_id: str) -> StepRecord | None:
        """Spawns the step's actor, or returns the record of a decision not to run it."""
        if self.aborting or self.run.cancelled is not None:
            return None
        step = self.steps[step_id]
        address = self._address(step_id)
        record = self._decide(step, address)
        if record is _AWAIT:  # an async Python condition
            record = await self._decide_async(step, address)
            if self._halted():  # cancelled or aborted meanwhile: the step does not start
                return None
        if record is not None:
            await self.run.journal.step_finished(str(address), record, decision=True)
            return record
        brief = self.briefs.get(step_id, NO_BRIEF)
        placement = Placement(
            self.run,
            self.document,
            step_id,
            step,
            self.scope,
            self.ref.send,
            self.positions[step_id],
            brief,
        )
        self.running[step_id] = self.run.spawn_step(placement, address)
        if self.restarts is not None:
            self.restarts.started(step_id)
        return None

    async def _restarted(self, finished: StepFinished) -> bool:
        """Whether the supervisor runs the step again rather than take its record as final.

        A step stopped to run again (a sibling's restart) comes back ``cancelled``
        and goes again; one that finished first keeps its record. A failure that
        counts is restarted, with the siblings the strategy takes along, unless
        the intensity is spent: then the list gives up, as ``abort`` would.
        """
        restarts = self.restarts
        assert restarts is not None
        step_id, record = finished.step_id, finished.record
        cause = restarts.stopping.pop(step_id, None)
        if self._halted():
            return False
        if cause is not None and record.status == "cancelled":
            await self._relaunch(step_id, record, cause)
            return True
        if record.status != "failed" or self.steps[step_id].on_error == "continue":
            return False
        refused = restarts.admit(self.run.clock.now())
        if refused is not None:
            address = str(self._address(step_id))
            self.first_error = restarts.escalation(step_id, address, record, refused)
            self.cancel(f"the supervisor gave up after step {step_id!r} failed")
            return False
        reason = f"restarted with {step_id!r} ({restarts.spec.strategy})"
        for sibling in restarts.taken_along(step_id, self.running):
            restarts.stopping[sibling] = step_id
            self.running[sibling].cancel(reason)
        await self._relaunch(step_id, record, step_id)
        return True

    async def _relaunch(self, step_id: str, record: StepRecord, cause: str) -> None:
        """Runs ``step_id`` again at its address, its attempts counted on from ``record``'s."""
        assert self.restarts is not None
        address = self._address(step_id)
        self.run.journal.emit(
            EventType.STEP_RESTART, step_id=str(address), data=self.restarts.event(cause)
        )
        # The instance that reported may still be ending its turn (a report that had to
        # wait for room in this inbox): its address is free once it has.
        for _ in range(_ADDRESS_WAITS):
            if self.run.supervisor.lookup(address) is None:
                break
            await asyncio.sleep(0)
        placement = Placement(
            self.run,
            self.document,
            step_id,
            self.steps[step_id],
            self.scope,
            self.ref.send,
            self.positions[step_id],
            self.briefs.get(step_id, NO_BRIEF),
            first_attempt=record.attempts + 1,
        )
        self.running[step_id] = self.run.spawn_step(placement, address)

    def _halted(self) -> bool:
        return self.aborting or self.run.cancelled is not None

    def _decide(self, step: Step, address: Address) -> StepRecord | None:
        """Skips or fails a step before it runs: a failed dependency or a false condition."""
        if self._blocked(step):
            cascade = self.run.options.on_step_failure == "cascade"
            return _CASCADED if cascade else _SKIPPED
        if step.condition is None:
            return None
        try:
            expression = compile_expression(step.condition, step_ids=self.run.step_ids)
            if expression.is_async:
                return _AWAIT
            go = expression.evaluate_bool(self.scope.activation(self.run.inputs))
        except Exception as error:  # a bad condition fails its step, naming the expression
            return StepRecord(status="failed", error=work_error(error, str(address)))
        return None if go else _skipped(step.condition)

    async def _decide_async(self, step: Step, address: Address) -> StepRecord | None:
        """`_decide` for an async Python condition; cancelling the DAG cancels the call.

        The DAG takes no message meanwhile (its children's reports wait in its inbox);
        it stays cancellable through `cancel`, and through the run while it is active.
        """
        assert step.condition is not None
        expression = compile_expression(step.condition, step_ids=self.run.step_ids)
        names = self.scope.activation(self.run.inputs)
        pending = self.pending = asyncio.ensure_future(expression.evaluate_bool_async(names))
        self.run.active.add(self)
        try:
            go = await pending
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the DAG's own task is being cancelled, not just the condition
            return None
        except Exception as error:  # a failing condition fails its step, naming the callable
            return StepRecord(status="failed", error=work_error(error, str(address)))
        finally:
            self.pending = None
            self.run.active.discard(self)
        return None if go else _skipped(step.condition)

    def _blocked(self, step: Step) -> bool:
        """Whether a dependency failed (not under ``onError: continue``) or was cancelled."""
        for dependency in step.depends_on:
            record = self.records[dependency]
            if record.status == "failed" and self.steps[dependency].on_error == "continue":
                continue
            if record.status in ("failed", "cancelled"):
                return True
        return False

    def _note(self, step_id: str, record: StepRecord) -> None:
        self.records[step_id] = record
        self.scope.record(step_id, record)
        failed = record.status == "failed" and self.steps[step_id].on_error != "continue"
        if (failed or record.status == "cancelled") and self.first_error is None:
            self.first_error = record.error
        if failed and self.run.options.on_step_failure == "abort" and not self.aborting:
            self.cancel(f"step {step_id!r} failed and onStepFailure is abort")

    async def _maybe_done(self) -> None:
        if self.reported or self.running:
            return
        # With nothing running, steps not yet recorded depend on one that waits.
        if len(self.records) < len(self.steps) and not (
            self.aborting or self.run.cancelled is not None or self.waiting
        ):
            return
        self.reported = True
        await self.report(self._outcome())
        self.stop()

    def _outcome(self) -> DagOutcome:
        status = self._status()
        error = self.first_error
        if status != "completed" and error is None:
            error = self._first_stop_error()
        return DagOutcome(status=status, content=self._last_content(), error=error)

    def _status(self) -> StepStatus:
        """Failed over cancelled over waiting; a failure under ``onError: continue`` is none."""
        statuses = {
            step_id: record.status
            for step_id, record in self.records.items()
            if not (record.status == "failed" and self.steps[step_id].on_error == "continue")
        }
        if "failed" in statuses.values():
            return "failed"
        if self.run.cancelled is not None or "cancelled" in statuses.values():
            return "cancelled"
        return "waiting" if self.waiting else "completed"

    def _last_content(self) -> str | None:
        """The content of the last step in order that ran (neither skipped nor cancelled)."""
        for step_id in reversed(self.order):
            record = self.records.get(step_id)
            if record is not None and record.status not in ("skipped", "cancelled"):
                return record.content
        return None

    def _first_stop_error(self) -> ErrorInfo | None:
        """The error of the first step recorded failed or cancelled, if it has one."""
        for record in self.records.values():
            if record.status in ("failed", "cancelled"):
                return record.error
        return None


_ADDRESS_WAITS = 100
"""Event-loop passes a restart waits for the reporting instance to end (it needs one)."""


def _zenflow_order(
    declared: list[str], waiting_on: Mapping[str, int], dependents: Mapping[str, list[str]]
) -> list[str]:
    """The steps in zenflow's topological order: its ``step_start`` index is the place here.

    zenflow's ``TopoSort`` exactly (Kahn's algorithm): the steps without
    dependencies in declaration order, then each step once all it depends on is
    placed, a placed step's dependents in declaration order. So ``a; b
    (dependsOn a); c`` is ``a, c, b``. A valid scope has no cycle.
    """
    left = dict(waiting_on)
    ranked = [step_id for step_id in declared if not left[step_id]]
    for step_id in ranked:  # grows as it goes: each step is placed once
        for dependent in dependents[step_id]:
            count = left[dependent] - 1
            left[dependent] = count
            if not count:
                ranked.append(dependent)
    return ranked


_CASCADED = StepRecord(status="cancelled")
"""A dependent of a failed step under ``cascade``: never started, no error of its own."""
_SKIPPED = StepRecord(status="skipped")
"""A direct dependent of a failed step under ``skip-dependents``: never started, no error."""

_AWAIT = StepRecord(status="pending")
"""`DagController._decide`'s answer for a condition that must be awaited (an async callable)."""


def _skipped(condition: str) -> StepRecord:
    reason = ErrorInfo(type="ConditionFalse", message=f"condition {condition!r} is false")
    return StepRecord(status="skipped", error=reason)
