"""A finished leaf of an interrupted run, reported again instead of run again.

`spawn_step` spawns a `ReplayedStep` at the address of a leaf that `Replay` has
a final record for (see ``_replay``): the controller hears the record through
the same path a child uses, and cannot tell the difference.
"""

from __future__ import annotations

import asyncio
from typing import Any

from cadenza.kernel import Actor
from cadenza.protocols import StepRecord

from ._journal import RunJournal
from ._outcome import Report, StepFinished

__all__ = ["ReplayedStep"]


class ReplayedStep(Actor):
    """Stands at a finished leaf's address just long enough to report its record again."""

    def __init__(
        self,
        journal: RunJournal,
        step_id: str,
        record: StepRecord,
        report: Report,
        answers: asyncio.Future[None] | None = None,
    ) -> None:
        self.journal = journal
        self.step_id = step_id
        self.record = record
        self.report = report
        self.answers = answers
        """Done once the resumed coordinator agent has answered the step's messages that
        the interruption left unanswered (`Unanswered.waiter`); None: there are none."""

    async def receive(self, message: Any) -> None:
        """Messages for the step arrive too late: it has finished."""

    def cancel(self, reason: str) -> None:
        """Nothing runs, so there is nothing to cancel."""

    async def on_start(self) -> None:
        """Notes the record in the journal, reports it (its messages answered), and stops."""
        self.journal.step_replayed(str(self.address), self.record)
        if self.answers is not None:
            await self.answers
        await self.report(StepFinished(self.step_id, self.record))
        self.stop()
