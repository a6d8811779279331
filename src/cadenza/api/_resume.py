"""Durable runs at the API level: resuming, human answers, retention and checks.

`Runtime` methods are thin wrappers over these functions, which work on a
`RunStore` alone:

* `prepare_resume` loads what a resume needs, after the caller took the run's
  lease: the document the run started with (its permission policy with it),
  and a `Replay` of its records and events (refusing, with `CorruptRecord`,
  anything that does not check out);
* `record_signal` records a person's answer for a ``waiting`` address, after
  checking it against the step's schema;
* `resumable_runs` lists the runs ``cadenza resume --all`` picks up;
* `runs_to_prune` chooses finished runs by age or count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import msgspec

from cadenza.actors.run import Replay, StoredPolicy, decode_document
from cadenza.actors.steps import schema_errors, waiting_for
from cadenza.errors import RunNotFound, SignalRejected, StoreError
from cadenza.protocols import (
    FINISHED,
    Event,
    EventType,
    RunResult,
    SignalReceived,
    StepRecord,
    timestamp,
    to_data,
)
from cadenza.store import LeaseHolder, RunRow, RunStore
from cadenza.workflow import LoadedWorkflow, load_workflow

__all__ = [
    "Prepared",
    "finished_result",
    "pending_inputs",
    "prepare_resume",
    "record_signal",
    "resumable_runs",
    "runs_to_prune",
    "stored_document",
]


@dataclass(frozen=True, slots=True)
class Prepared:
    """What resuming a run starts from."""

    row: RunRow
    document: LoadedWorkflow
    inputs: dict[str, Any]
    replay: Replay
    policy: StoredPolicy | None = None  # None: recorded before policies were stored


async def get_row(store: RunStore, run_id: str) -> RunRow:
    """The run's row.

    Raises:
        RunNotFound: The store has no such run.
    """
    row = await store.get_run(run_id)
    if row is None:
        raise RunNotFound(f"no run {run_id!r} in the store")
    return row


def finished_result(row: RunRow) -> RunResult:
    """The stored result of a finished run (a bare one if the run ended without one)."""
    if row.result is not None:
        return row.result
    return RunResult(run_id=row.run_id, workflow=row.workflow, status=row.status)


async def prepare_resume(store: RunStore, row: RunRow) -> Prepared:
    """The document and replay of an interrupted (or waiting) run; hold its lease first.

    Raises:
        CorruptRecord: A record, event or the document is unreadable or inconsistent.
        StoreError: The run has neither a stored document nor a workflow file.
        WorkflowError: (old runs only) its workflow file no longer loads.
    """
    document, inputs, policy = await stored_document(store, row)
    replay = await Replay.read(store, row.run_id)  # a page at a time: runs of any size
    return Prepared(row, document, inputs, replay, policy)


async def stored_document(
    store: RunStore, row: RunRow
) -> tuple[LoadedWorkflow, dict[str, Any], StoredPolicy | None]:
    """The workflow, inputs and policy a run started with.

    Raises:
        CorruptRecord: The stored document is unreadable.
        StoreError: The run has neither a stored document nor a workflow file.
        WorkflowError: (old runs only) its workflow file no longer loads.
    """
    body = await store.document(row.run_id)
    if body is not None:
        return decode_document(body, row.run_id)
    if row.path is not None:  # recorded before documents were stored
        return load_workflow(row.path), row.inputs, None
    raise StoreError(f"run {row.run_id!r} has no stored workflow to replay")


def pending_inputs(records: dict[str, StepRecord]) -> dict[str, dict[str, Any]]:
    """The questions waiting for a person, by address."""
    return {a: q for a, r in records.items() if (q := waiting_for(r)) is not None}


async def record_signal(store: RunStore, run_id: str, address: str, data: Any) -> None:
    """Records ``data`` as the answer at ``address``; the run continues on resume.

    Raises:
        RunNotFound: No such run.
        SignalRejected: The run has finished, nothing waits at ``address``, or the
            answer does not fit the schema (each problem with its JSON path).
        LeaseHeld: A process is driving the run right now.
    """
    row = await get_row(store, run_id)
    if row.status in FINISHED:
        raise SignalRejected(f"run {run_id!r} has finished ({row.status}); it takes no input")
    holder = LeaseHolder.for_this_process()
    await store.acquire_lease(run_id, holder)
    try:
        records = await store.steps(run_id)
        record = records.get(address)
        question = waiting_for(record) if record is not None else None
        if record is None or question is None:
            waiting = sorted(pending_inputs(records))
            where = f"it waits at {', '.join(waiting)}" if waiting else "it waits for no input"
            raise SignalRejected(f"run {run_id!r} has no input pending at {address!r}; {where}")
        schema = question.get("schema")
        problems = schema_errors(schema, data) if isinstance(schema, dict) else []
        if problems:
            raise SignalRejected(
                f"the answer does not fit the schema of {address!r}: " + "; ".join(problems)
            )
        text = msgspec.json.encode(data).decode()
        answered = StepRecord(status="completed", content=text, result=data, attempts=1)
        events = await store.events(run_id)
        store.put_step(run_id, address, answered)
        store.append_event(
            Event(
                type=EventType.SIGNAL_RECEIVED,
                timestamp=timestamp(),
                run_id=run_id,
                seq=events[-1].seq + 1 if events else 1,
                step_id=address,
                data=to_data(SignalReceived(answer=data)),
            )
        )
    finally:
        store.release_lease(run_id, holder)
        await store.flush()


async def resumable_runs(store: RunStore) -> list[RunRow]:
    """Interrupted runs, and waiting runs with an answer recorded since they stopped."""
    chosen = []
    for row in await store.list_runs(limit=1 << 30):
        if row.status == "running":
            chosen.append(row)
        elif row.status == "waiting" and row.result is not None:
            asked = pending_inputs(row.result.steps)
            if asked and set(asked) - set(pending_inputs(await store.steps(row.run_id))):
                chosen.append(row)
    return chosen


def runs_to_prune(
    rows: list[RunRow], *, older_than: float | None, keep: int | None, now: float | None = None
) -> list[str]:
    """Finished runs that ``older_than`` seconds or ``keep`` (newest finished runs) let go.

    Runs that are running or waiting are never chosen.
    """
    finished = sorted(
        (row for row in rows if row.status in FINISHED), key=lambda r: r.created_at, reverse=True
    )
    chosen: set[str] = set()
    if older_than is not None:
        cutoff = (time.time() if now is None else now) - older_than
        chosen.update(row.run_id for row in finished if row.updated_at < cutoff)
    if keep is not None:
        chosen.update(row.run_id for row in finished[keep:])
    return [row.run_id for row in finished if row.run_id in chosen]
