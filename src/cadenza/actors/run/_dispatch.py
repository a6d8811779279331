"""How a run hands step attempts to workers: the dispatcher it is given, as it sees it.

`RunContext.dispatcher` holds a `StepDispatcher` (None: every step runs in this
process); a step away on a worker hears about itself through a `DispatchSink`.
They are here, with the run's other shared parts, so that the context names
them without knowing the steps that use them (`cadenza.actors.steps._remote`).
"""

from __future__ import annotations

from typing import Protocol

from cadenza.protocols import CallRecord, Result, StepEvent, WorkOrder

__all__ = ["DispatchSink", "StepDispatcher"]


class DispatchSink(Protocol):
    """What a dispatcher tells the run about one step attempt while it is away."""

    def dispatched(self, worker: str, job: int, attempt: int) -> None:
        """The attempt went to ``worker`` under delivery fence ``attempt``."""

    def queued(self, job: int) -> None:
        """No worker is connected: the attempt waits for one (it does not fail)."""

    def requeued(self, worker: str, job: int, attempt: int, reason: str) -> None:
        """``worker`` was lost; the attempt goes out again under fence ``attempt``."""

    def rejected(self, worker: str, job: int, attempt: int) -> None:
        """A stale result for this step (fence ``attempt``) came from ``worker`` and was refused."""

    def event(self, event: StepEvent) -> None:
        """An event of the running step."""

    def mail(self, text: str) -> None:
        """The running agent sent a message to the coordinator."""

    def call(self, call: CallRecord) -> None:
        """The running agent made a call, for the run's journal; the worker waits until
        it is confirmed (`StepDispatcher.confirm`)."""


class StepDispatcher(Protocol):
    """Sends work orders to workers (`cadenza.remote.Dispatcher` is the one there is)."""

    async def execute(self, order: WorkOrder, sink: DispatchSink) -> Result:
        """Runs ``order`` on a worker and returns its one accepted result.

        Waits while no worker is connected. Cancelling the caller cancels the job.
        """
        ...

    def confirm(self, job: int, attempt: int, calls: int) -> None:
        """Tells the worker holding ``job`` under fence ``attempt`` that the run's journal
        holds the first ``calls`` calls it sent (`DispatchSink.call`), committed."""
        ...
