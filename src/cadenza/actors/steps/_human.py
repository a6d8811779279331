"""Human input (SPEC 2.6): a step that waits for a person's answer.

Waiting is a status, not a blocked task. A ``human:`` step without an answer
records a ``waiting`` record at its address (the prompt as its content,
``{prompt, schema}`` as its result) and reports it to its controller; the
controllers hold back what depends on it, finish everything else, and pass
``waiting`` upwards, so the run ends as ``waiting`` (exit code 3) with nothing
in flight. ``cadenza signal`` checks an answer against the schema and records
it as the step's completed record; ``cadenza resume`` then replays the run, and
the step reports the answer like any finished step (content: the answer as
JSON, result: the answer).

`ask_person` is that wait as a function, for controllers that need a person
themselves (a control loop's ``escalate: human``).
"""

from __future__ import annotations

from typing import Any

from cadenza.actors.run import (
    PlacedActor,
    Placement,
    Position,
    RunContext,
    StepFinished,
    work_error,
)
from cadenza.protocols import StepRecord, StepStart
from cadenza.workflow import parse_template

__all__ = ["HumanStep", "ask_person", "waiting_for"]


async def ask_person(
    run: RunContext,
    address: str,
    *,
    prompt: str,
    schema: dict[str, Any] | None = None,
    position: Position,
) -> StepRecord:
    """Asks a person at ``address``: their recorded answer, or a new ``waiting`` record.

    Returns the ``completed`` record holding the answer when one has been
    signalled (resumed runs), else records ``waiting`` durably and returns that
    record: the caller then ends as ``waiting`` itself, starting nothing that
    needs the answer. One question per address. ``position`` is zenflow's
    ``index`` and ``total`` for its ``step_start``.
    """
    replay = run.journal.replay
    answered = replay.take(address) if replay is not None else None
    if run.recording is not None:  # an offline replay: the recorded answer, if any
        answered = run.recording.answer_person(address)
    if answered is not None and answered.status == "completed":
        run.journal.step_replayed(address, answered)
        return answered
    index, total = position
    start = StepStart(kind="human", attempt=1, index=index, total=total)
    run.journal.step_started(address, start, agent=None)
    question = {"prompt": prompt, "schema": schema}
    record = StepRecord(status="waiting", content=prompt, result=question, attempts=1)
    await run.journal.step_finished(address, record)
    return record


def waiting_for(record: StepRecord) -> dict[str, Any] | None:
    """The question a ``waiting`` record asks (``{prompt, schema}``), or None."""
    if record.status != "waiting" or not isinstance(record.result, dict):
        return None
    return record.result


class HumanStep(PlacedActor):
    """A ``human:`` step: asks its question once and reports the answer or ``waiting``."""

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement)
        assert self.step.human is not None
        self.human = self.step.human

    async def receive(self, message: Any) -> None:
        """A human step takes no messages."""

    def cancel(self, reason: str) -> None:
        """Asking takes no time: there is nothing to interrupt."""

    async def on_start(self) -> None:
        """Renders the prompt, asks, reports, and stops."""
        address = str(self.address)
        try:
            template = parse_template(self.human.prompt, step_ids=self.run.step_ids)
            prompt = template.render(self.scope.activation(self.run.inputs))
        except Exception as error:  # a template that fails at run time fails the step, located
            record = StepRecord(status="failed", attempts=1, error=work_error(error, address))
            await self.run.journal.step_finished(address, record)
        else:
            record = await ask_person(
                self.run, address, prompt=prompt, schema=self.human.schema, position=self.position
            )
        await self.report(StepFinished(self.step_id, record))
        self.stop()
