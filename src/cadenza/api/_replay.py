"""Replaying a recorded run offline: the regression test of an agent workflow.

`replay_run` runs a recorded run's workflow again, in a memory store of its
own, against what the run recorded: its agents' model calls and tool calls are
answered from the run's call journal (checked by digest: a changed prompt is a
difference), its other leaves (commands, handlers, tool steps: side effects)
from their recorded outcomes, and every controller decides again from those
answers. No model is called, no provider key is needed, nothing is written to
the run's store. Each decision is checked against the record as it is made
(`Recording`); the first that differs stops the replay and is its
`ReplayReport.difference`, one line naming the address and what differs. A
replay that makes every decision the run made must also end with a result
equal to the run's (`compare_results`), or that is its difference.

Given another ``workflow`` (an edited copy of the run's), the replay tells
where the edit changes what the recorded run did: the test of an edit to a
prompt or a condition, without a model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cadenza.actors import EventSink, RunControl, RunJournal, RunSetup, execute_run
from cadenza.actors.run import Recording, decode_document, run_prices
from cadenza.errors import ReplayRefused, RunNeedsCode, StoreError
from cadenza.kernel import SystemClock
from cadenza.protocols import AgentTurn, Event, EventType, RunResult, payload
from cadenza.store import MemoryRunStore, RunRow, RunStore, make_store
from cadenza.workflow import (
    DEFAULT_MAX_CONCURRENCY,
    THINKING_LEVELS,
    LoadedWorkflow,
    ThinkingLevel,
    Workflow,
    WorkflowError,
    load_workflow,
    resolve_inputs,
    validate_workflow,
)

from ._compare import compare_results
from ._rebuild import check_rebuildable
from ._resume import finished_result, get_row

__all__ = ["ReplayReport", "replay_run"]


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What replaying a recorded run found.

    Attributes:
        run_id: The recorded run (the replay ran under the same id, in memory).
        recorded: The run's result, as its store holds it.
        result: The replay's result; cut short where the replay differed.
        difference: The first place where the replay differs from the record, in one
            line naming the address and what differs; None when it made every
            decision the run made and ended with an equal result.
        answered: How many ``model`` calls, ``tool`` calls and ``steps`` (leaves that
            are not agents) the record answered.
    """

    run_id: str
    recorded: RunResult
    result: RunResult
    difference: str | None
    answered: dict[str, int]

    @property
    def matches(self) -> bool:
        """Whether the replay made the run's decisions and came to its result."""
        return self.difference is None


async def replay_run(
    store: RunStore | str | os.PathLike[str],
    run_id: str,
    *,
    workflow: LoadedWorkflow | Workflow | str | os.PathLike[str] | None = None,
    default_model: str | None = None,
    on_event: EventSink | None = None,
    default_thinking: ThinkingLevel | None = None,
) -> ReplayReport:
    """Replays the recorded run ``run_id`` offline and reports the first difference.

    Args:
        store: Where the run is recorded: an open `RunStore` (`Runtime.store`), or
            a SQLite file's path or a ``postgresql://`` URL, opened and closed here.
        run_id: The run to replay; it must have ended.
        workflow: The workflow to replay instead of the run's own (an edited copy:
            a file, a loaded or a built workflow), with the run's inputs.
        default_model: The model of steps that name none; by default the one the
            record shows such steps used, else ``CADENZA_MODEL``.
        on_event: Called with every event of the replay.
        default_thinking: The ``thinking`` level of agents that set none; by default
            the one the record shows such agents were called with.

    Raises:
        RunNotFound: The store has no such run.
        ReplayRefused: The run has not ended, was cancelled, was recorded without a
            call journal, or names Python code this process does not have.
        WorkflowError: ``workflow`` is invalid.
        InputError: The run's inputs do not fit ``workflow``.
    """
    owned = isinstance(store, str | os.PathLike)  # opened here, so closed here
    source = make_store(store)
    if owned:
        await source.open()
    try:
        row = await get_row(source, run_id)
        _check_ended(row)
        document, inputs = await _document(source, row, workflow)
        try:
            check_rebuildable(run_id, document)
        except RunNeedsCode as error:
            needs = ", ".join(error.missing)
            raise ReplayRefused(
                f"run {run_id!r} needs Python code this process does not have ({needs}):"
                " replay it where its workflow is built (cadenza.testing.replay_run)"
            ) from None
        records = await source.steps(run_id)
        events = await source.events(run_id)
        calls = await source.calls(run_id)
    finally:
        if owned:
            await source.close()
    if not calls and any(_answered_turn(event) for event in events):
        raise ReplayRefused(
            f"run {run_id!r} was recorded without a journal of its model and tool calls"
            " (by an older Cadenza): it cannot be replayed offline"
        )
    model = default_model or _recorded_default(events) or os.environ.get("CADENZA_MODEL")
    thinking = default_thinking or _recorded_thinking(events, document)
    control = RunControl()
    recording = Recording(records, events, calls, control.cancel)
    result = await _run(document, inputs, row, recording, control, model, thinking, on_event)
    difference = recording.difference or recording.unmatched()
    if difference is None:
        recorded = finished_result(row)
        differences = compare_results(recorded, result)
        if differences:
            difference = f"the result differs from the record: {differences[0]}"
    return ReplayReport(run_id, finished_result(row), result, difference, recording.answered)


def _check_ended(row: RunRow) -> None:
    if row.status == "running":
        raise ReplayRefused(
            f"run {row.run_id!r} has not ended (running): resume it first, then replay it"
        )
    if row.status == "cancelled":
        raise ReplayRefused(
            f"run {row.run_id!r} was cancelled: its record stops wherever the cancel came,"
            " which a replay cannot tell"
        )


async def _document(
    source: RunStore,
    row: RunRow,
    workflow: LoadedWorkflow | Workflow | str | os.PathLike[str] | None,
) -> tuple[LoadedWorkflow, dict[str, Any]]:
    """The workflow to replay (the run's own, or ``workflow``) and the run's inputs."""
    body = await source.document(row.run_id)
    if body is not None:
        stored, inputs, _ = decode_document(body, row.run_id)
    elif row.path is not None:  # recorded before documents were stored
        stored, inputs = load_workflow(row.path), row.inputs
    else:
        raise StoreError(f"run {row.run_id!r} has no stored workflow to replay")
    if workflow is None:
        return stored, inputs
    document = _loaded(workflow)
    return document, resolve_inputs(document.workflow.inputs, inputs)


def _loaded(workflow: LoadedWorkflow | Workflow | str | os.PathLike[str]) -> LoadedWorkflow:
    if isinstance(workflow, LoadedWorkflow):
        return workflow
    if isinstance(workflow, Workflow):  # built in Python: checked as `Runtime.start` does
        problems = validate_workflow(workflow)
        if problems:
            raise WorkflowError(tuple(problems))
        return LoadedWorkflow(workflow=workflow, path=None, base_dir=Path.cwd(), includes={})
    return load_workflow(workflow)


def _answered_turn(event: Event) -> bool:
    return event.type == EventType.AGENT_TURN and payload(event, AgentTurn).phase == "response"


def _recorded_default(events: list[Event]) -> str | None:
    """The model the record's steps without an agent called: the run's default model."""
    for event in events:
        if event.type == EventType.AGENT_TURN and event.agent is None and event.step_id:
            return payload(event, AgentTurn).model
    return None


def _recorded_thinking(events: list[Event], document: LoadedWorkflow) -> ThinkingLevel | None:
    """The level the record's agents without one of their own were called with: the
    run's ``--thinking`` (None: it had none)."""
    agents = document.workflow.agents
    for event in events:
        if event.type != EventType.AGENT_TURN or not event.step_id:
            continue
        agent = agents.get(event.agent) if event.agent else None
        turn = payload(event, AgentTurn)
        if turn.phase == "request" and (agent is None or agent.thinking is None):
            return next((level for level in THINKING_LEVELS if level == turn.thinking), None)
    return None


async def _run(
    document: LoadedWorkflow,
    inputs: dict[str, Any],
    row: RunRow,
    recording: Recording,
    control: RunControl,
    model: str | None,
    thinking: ThinkingLevel | None,
    on_event: EventSink | None,
) -> RunResult:
    """Runs the replay in a memory store of its own, under the recorded run's id."""
    memory = MemoryRunStore()
    journal = RunJournal(row.run_id, document.workflow.name, memory)
    journal.subscribe(recording.observe)
    if on_event is not None:
        journal.subscribe(on_event)
    limit = document.workflow.options.max_concurrency or DEFAULT_MAX_CONCURRENCY
    await memory.open()
    try:
        return await execute_run(
            RunSetup(
                run_id=row.run_id,
                document=document,
                inputs=inputs,
                journal=journal,
                clock=SystemClock(),
                max_concurrency=limit,
                default_model=model,
                default_thinking=thinking,
                prices=run_prices(document),  # the workflow's; a caller's are not recorded
                recording=recording,
                store=memory,
                control=control,
            )
        )
    finally:
        await memory.close()
