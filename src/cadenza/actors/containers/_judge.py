"""The ``untilAgent`` judge of a repeat-until loop: one agent visit per iteration.

The judge reads the iteration's outputs and ends by calling ``submit_result``
with ``{done: bool, ...}``. A judge that gives no valid verdict (turns spent,
a model error, a schema mismatch, no ``done``) does not fail the loop: it
continues, bounded by ``maxIterations``, and the failure is recorded as the
judge's own failed record and a ``judge_verdict`` event with ``done: null``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from cadenza.actors.run import NO_BRIEF, Position, RunContext, Scope
from cadenza.actors.steps import AgentVisit, cut_off, run_agent
from cadenza.protocols import ErrorInfo, EventType, JudgeVerdict, StepRecord, StepStart
from cadenza.workflow import LoadedWorkflow, Step

__all__ = ["JUDGE", "Judgement", "Judging", "iteration_report", "run_judge"]

JUDGE = "untilAgent"
"""The judge's address under its iteration (``loop.2.untilAgent``).

camelCase, so no step id (lowercase only) can take it.
"""


@dataclass(frozen=True, slots=True)
class Judgement:
    """What the judge decided: ``done`` (None when it gave no valid verdict) and its words."""

    done: bool | None
    feedback: str | None


def iteration_report(
    address: str,
    record: StepRecord,
    steps: Sequence[Step] | None,
    scope: Scope,
) -> str:
    """The iteration's outputs as the judge reads them, each labelled by step."""
    parts: list[str] = []
    if steps is None:
        parts.append(_section(address, record.status, record.content or "", record.result))
    else:
        outputs = scope.own_steps()
        for step in steps:
            output = outputs.get(step.id)
            if output is not None:
                parts.append(
                    _section(step.id, output["status"], output["content"], output["result"])
                )
    return f"## Iteration outputs ({address})\n\n" + "\n\n".join(parts)


def _section(label: str, status: str, content: str, result: object) -> str:
    text = f"### {label} ({status})\n{content}"
    if result is not None:
        text += f"\n\nResult: {msgspec.json.encode(result).decode()}"
    return text


@dataclass(frozen=True, slots=True)
class Judging:
    """One question to an ``untilAgent`` judge: which agent, at which address, about what."""

    agent_name: str
    address: str
    """The judge's own address (``loop.N.judge``)."""
    loop_address: str
    iteration: int
    limit: int
    """The loop's ``maxIterations``."""
    context: str
    """The iteration's outputs, as the judge reads them."""
    scope: Scope
    position: Position
    """The loop's place among its steps: the judge's ``step_start`` has it too."""


async def run_judge(run: RunContext, document: LoadedWorkflow, judging: Judging) -> Judgement:
    """Runs the judge on one iteration and records its verdict (or why there is none).

    In a resumed run, a verdict recorded before the interruption is replayed:
    the judge is not asked twice. Like a step, the judge gives its verdict once
    the coordinator agent has answered the messages it sent (`Unanswered`).
    """
    address, agent_name = judging.address, judging.agent_name
    replay = run.journal.replay
    record = replay.take(address) if replay is not None else None
    if record is not None:
        run.journal.step_replayed(address, record)
    else:
        record = await _ask_judge(run, document, judging)
    answers = run.unanswered.waiter(address)
    if answers is not None:  # the next iteration starts after the forwards land
        await answers
    result, error = record.result, record.error
    reason = result.get("reason") if isinstance(result, dict) else None
    done = result.get("done") if isinstance(result, dict) and error is None else None
    words = [t for t in ((record.content or "").strip(), reason) if isinstance(t, str) and t]
    verdict = Judgement(done if isinstance(done, bool) else None, "\n".join(words) or None)
    run.journal.emit(
        EventType.JUDGE_VERDICT,
        step_id=address,
        agent=agent_name,
        message="fail-open: the loop goes on" if error is not None else None,
        error=f"{error.type}: {error.message}" if error is not None else None,
        data=JudgeVerdict(iteration=judging.iteration, done=verdict.done, reason=reason),
    )
    return verdict


async def _ask_judge(run: RunContext, document: LoadedWorkflow, judging: Judging) -> StepRecord:
    address, agent_name, iteration = judging.address, judging.agent_name, judging.iteration
    loop_address, limit = judging.loop_address, judging.limit
    instructions = (
        f"You judge the loop {loop_address!r}: iteration {iteration} of at most {limit} "
        "has finished; its outputs are below. Decide whether the work is done. Call "
        "submit_result with done: true to stop the loop, or done: false with a reason "
        "saying what the next iteration must fix."
    )
    index, total = judging.position
    start = StepStart(kind="judge", attempt=1, index=index, total=total)
    run.journal.step_started(address, start, agent=agent_name)
    started = run.clock.now()
    try:
        async with run.limiter:
            outcome = await run_agent(
                run,
                document,
                AgentVisit(
                    address=address,
                    agent_name=agent_name,
                    instructions=instructions,
                    scope=judging.scope,
                    brief=NO_BRIEF,
                    context=judging.context,
                    resumes=1 if cut_off(run, address, 1) else None,  # asked again, as attempt 1
                ),
            )
        content, result, error = outcome.content, outcome.result, outcome.error
    except asyncio.CancelledError:
        cancelled = ErrorInfo("Cancelled", "the loop was cancelled", address)
        record = StepRecord(status="cancelled", error=cancelled)  # nothing secret in it
        # No await while being cancelled: the record is queued, the loop's own flush saves it.
        run.journal.records[address] = record
        run.journal.store.put_step(run.run_id, address, record)
        raise
    except Exception as failure:  # a judge fails open, whatever went wrong
        content, result = "", None
        error = ErrorInfo(type(failure).__name__, str(failure) or type(failure).__name__, address)
    done = result.get("done") if isinstance(result, dict) else None
    if error is None and not isinstance(done, bool):
        error = ErrorInfo("NoVerdict", "the judge's result has no boolean 'done'", address)
    record = StepRecord(
        status="completed" if error is None else "failed",
        content=content,
        result=result,
        attempts=1,
        duration_ms=int((run.clock.now() - started) * 1000),
        error=error,
    )
    await run.journal.step_finished(address, record, agent=agent_name, decision=True)
    return record
