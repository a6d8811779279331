"""A control loop started from Python: its live decision log and its typed result.

`LoopRun` wraps the `RunHandle` of the run a `ControlLoop` started. The decision log
grows as the engine decides (from the run's ``decision`` events), so a caller
can show it while the loop works; `LoopResult` is the control step's result
(SPEC 2.5) as a typed value.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from cadenza.actors import EventSink
from cadenza.actors.control.decide import ControlStatus, Decision
from cadenza.api import RunHandle
from cadenza.errors import CadenzaError
from cadenza.protocols import ControlDecision, Event, EventType, payload

__all__ = ["DecisionEntry", "LoopError", "LoopResult", "LoopRun", "decision_sink"]


class LoopError(CadenzaError):
    """A loop ended without a control result.

    Raised by `LoopRun.result` when the run was cancelled, a ``pre_planner``
    failed, or the runtime crashed: there is no decision to report. The message
    carries the run's error. A loop that stopped (budget, no progress, ...) is
    not an error: its `LoopResult` says how it ended.
    """


@dataclass(frozen=True, slots=True)
class DecisionEntry:
    """One entry of the decision log: what the decide policy ruled after an iteration."""

    iteration: int
    decision: Decision
    reason: str
    feedback: str

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> DecisionEntry:
        """An entry from a decision-log map or a ``decision`` event's data."""
        return cls(
            iteration=int(data["iteration"]),
            decision=cast("Decision", data["decision"]),
            reason=str(data["reason"]),
            feedback=str(data.get("feedback") or ""),
        )

    @classmethod
    def from_event(cls, event: Event) -> DecisionEntry:
        """The entry a ``decision`` event records."""
        ruled = payload(event, ControlDecision)
        return cls(
            iteration=ruled.iteration,
            decision=cast("Decision", ruled.decision),
            reason=ruled.reason,
            feedback=ruled.feedback or "",
        )


@dataclass(frozen=True, slots=True)
class LoopResult:
    """How a control loop ended: SPEC 2.5's ``{status, result, score, iterations, ...}``.

    Attributes:
        status: ``succeeded``, or why it stopped (``stopped_budget``, ...).
        result: The accepted result; when stopped, the best-scoring one.
        score: That result's score (capped by failing checks), or None.
        iterations: Iterations run.
        decision_log: Every decision, in order.
        tokens_spent: Tokens the loop's children used.
        run_id: The run it belongs to (``cadenza runs show RUN_ID``).
    """

    status: ControlStatus
    result: Any
    score: float | None
    iterations: int
    decision_log: tuple[DecisionEntry, ...]
    tokens_spent: int
    run_id: str

    @property
    def succeeded(self) -> bool:
        """True when the decide policy accepted a result."""
        return self.status == "succeeded"


def decision_sink(address: str, log: list[DecisionEntry]) -> EventSink:
    """An event observer that appends the decisions of the control step at ``address``."""

    def observe(event: Event) -> None:
        if event.type == EventType.DECISION and event.step_id == address and event.data:
            log.append(DecisionEntry.from_event(event))

    return observe


class LoopRun:
    """A running loop: its decision log so far, its decisions as they come, its result."""

    def __init__(self, handle: RunHandle, address: str, log: list[DecisionEntry]) -> None:
        self._handle = handle
        self._address = address
        self._log = log  # filled by the run's `decision_sink`

    @property
    def run_id(self) -> str:
        """The id of the run the loop executes in."""
        return self._handle.run_id

    @property
    def decision_log(self) -> list[DecisionEntry]:
        """The decisions made so far, oldest first (a snapshot)."""
        return list(self._log)

    async def decisions(self) -> AsyncGenerator[DecisionEntry, None]:
        """Every decision, from the first, as it is made; ends when the run does."""
        async for event in self._handle.events():
            if event.type == EventType.DECISION and event.step_id == self._address and event.data:
                yield DecisionEntry.from_event(event)

    def cancel(self, reason: str = "cancelled by the caller") -> None:
        """Cancels the loop's run; `result` then raises `LoopError`."""
        self._handle.cancel(reason)

    async def result(self) -> LoopResult:
        """Waits for the loop to end and returns how it ended.

        Raises:
            LoopError: The loop ended without a decision (cancelled, crashed, or
                its ``pre_planner`` failed).
        """
        run = await self._handle.result()
        record = run.steps.get(self._address)
        value = record.result if record is not None else None
        if not isinstance(value, dict) or "decisionLog" not in value:
            error = run.error
            why = f"{error.type}: {error.message}" if error is not None else run.status
            raise LoopError(f"the loop ended without a decision: {why}")
        return LoopResult(
            status=value["status"],
            result=value["result"],
            score=value["score"],
            iterations=value["iterations"],
            decision_log=tuple(DecisionEntry.from_data(e) for e in value["decisionLog"]),
            tokens_spent=value["tokensSpent"],
            run_id=run.run_id,
        )
