"""How a control loop writes down what it decided: log, events, durable records.

Every iteration of a control step is an address (``step.N``) with a record of
its own: ``running`` when it starts, then, once the decide policy has ruled,
the decision (content ``"retry: <reason>"``, result the log entry plus the
score, the plan, the checks and the verdict), written durably before the next
iteration starts, so each iteration is a checkpoint. The ruling is also a
``decision`` event on the control step and an entry of the decision log, which
ends up in the step's result, SPEC 2.5's ``{status, result, score, iterations,
decisionLog, tokensSpent}``.

Under ``escalate: human`` an iteration can have two entries: the escalation
(its record's decision) and then the person's answer (`DecisionLog.answered`),
whose durable record is the answer itself at ``step.N.human``.
"""

from __future__ import annotations

from typing import Any

from cadenza.actors.run import Position, RunJournal
from cadenza.protocols import (
    ControlDecision,
    ErrorInfo,
    EventType,
    IterationEnd,
    IterationStart,
    LoopEnd,
    LoopSummary,
    StepRecord,
    StepStart,
    StepStatus,
)

from .decide import Ruling

__all__ = ["DecisionLog"]


class DecisionLog:
    """The decision log of one attempt of a control step, and the records behind it."""

    def __init__(self, journal: RunJournal, address: str, limit: int, position: Position) -> None:
        self.journal = journal
        self.address = address
        self.limit = limit
        self.position = position  # the control step's: its iterations' step_start has it
        self.entries: list[dict[str, Any]] = []

    def started(self, n: int) -> str:
        """Records that iteration ``n`` began; returns its address."""
        where = f"{self.address}.{n}"
        index, total = self.position
        start = StepStart(kind="iteration", attempt=1, index=index, total=total)
        self.journal.step_started(where, start, agent=None)
        data = IterationStart(iteration=n, max_iterations=self.limit)
        self.journal.emit(EventType.ITERATION_START, step_id=where, data=data)
        return where

    async def decided(
        self, n: int, ruling: Ruling, detail: dict[str, Any], duration_ms: int
    ) -> None:
        """Writes down the ruling on iteration ``n``: entry, event, durable record."""
        where = f"{self.address}.{n}"
        data = self._entry(n, ruling)
        status: StepStatus = "failed" if ruling.infra else "completed"
        record = StepRecord(
            status,
            content=f"{ruling.decision}: {ruling.reason}",
            result={**data, **detail},
            attempts=1,
            duration_ms=duration_ms,
            error=ErrorInfo("InfraFailure", ruling.reason, where) if ruling.infra else None,
        )
        await self.journal.step_finished(where, record)
        self._ended(where, n, status)

    def answered(self, n: int, ruling: Ruling) -> None:
        """Writes down a person's ruling on iteration ``n``: entry and event.

        Their answer's record is its durable form: a resumed run heeds it again.
        """
        self._entry(n, ruling)

    async def waiting(self, n: int) -> None:
        """Records iteration ``n`` as waiting: a call in it waits for a person."""
        where = f"{self.address}.{n}"
        await self.journal.step_finished(where, StepRecord("waiting", attempts=1))
        self._ended(where, n, "waiting")

    def _entry(self, n: int, ruling: Ruling) -> dict[str, Any]:
        entry = {
            "iteration": n,
            "decision": ruling.decision,
            "reason": ruling.reason,
            "feedback": ruling.feedback,
        }
        self.entries.append(entry)
        ruled = ControlDecision(
            iteration=n,
            decision=ruling.decision,
            reason=ruling.reason,
            feedback=ruling.feedback,
            score=ruling.score,
            status=ruling.status,
        )
        self.journal.emit(
            EventType.DECISION, step_id=self.address, message=ruling.reason, data=ruled
        )
        return {**entry, "score": ruling.score, "status": ruling.status}

    async def interrupted(self, n: int, reason: str) -> None:
        """Records iteration ``n`` as cancelled: the loop stopped in the middle of it."""
        where = f"{self.address}.{n}"
        error = ErrorInfo("Cancelled", reason, where)
        await self.journal.step_finished(where, StepRecord("cancelled", error=error))
        self._ended(where, n, "cancelled")

    def _ended(self, where: str, n: int, status: StepStatus) -> None:
        data = IterationEnd(iteration=n, status=status)
        self.journal.emit(EventType.ITERATION_END, step_id=where, data=data)

    def summarize(self, iterations: int, reason: str) -> None:
        """The loop's ``loop_end`` event and its entry in the result's ``loops``."""
        self.journal.loops[self.address] = LoopSummary(iterations, reason)
        data = LoopEnd(iterations=iterations, termination_reason=reason, flagged=False)
        self.journal.emit(EventType.LOOP_END, step_id=self.address, data=data)
