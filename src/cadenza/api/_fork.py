"""Forking a run (time travel): a new run made of another's records up to an address.

`read_fork` reads, and only reads, what the source run recorded before
``at`` first started: its events up to there, the records of the addresses that
had finished by then (``completed``, ``failed`` or ``skipped``: a final event,
``step_end``, ``step_skipped``, a failing ``error`` or a person's answer, before
that point) and the calls those addresses made. The caller's edits replace the
output of some of those records, and its inputs replace the run's. `write_fork`
records all of it as a new run, under the new run's own id and with its parent
named on its row, and returns the `Replay` that `Runtime.fork` then drives as a
resume: the copied records are replayed, ``at`` and everything after it run live.

Nothing is written to the source run, and nothing of it is locked: a run still
going in another process can be forked (the records it adds later are not the
fork's concern).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from cadenza.actors.run import REPLAYABLE, Replay, StoredPolicy, encode_document
from cadenza.actors.steps import schema_errors
from cadenza.errors import ForkRefused, InputError
from cadenza.protocols import (
    CallRecord,
    Event,
    EventType,
    RunForked,
    StepError,
    StepRecord,
    payload,
)
from cadenza.store import RunRow, RunStore, is_under
from cadenza.workflow import LoadedWorkflow, resolve_inputs

from ._resume import stored_document

__all__ = ["Fork", "read_fork", "write_fork"]

_STARTS = frozenset((EventType.STEP_START, EventType.ITERATION_START, EventType.ITEM_START))
"""Where an address starts: a step (a leaf or a container), a loop's iteration, an item."""

_SHOWN = 8
"""Addresses an error lists before it only counts the rest."""

_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True, slots=True)
class Fork:
    """What a fork of ``source`` at ``at`` starts from (`read_fork`), nothing written yet.

    Attributes:
        source: The run it forks.
        at: The address it runs again from.
        document: The source's workflow.
        inputs: The fork's inputs (the source's, or the caller's over them), resolved.
        policy: The source's tool permission policy (None: recorded before policies were).
        events: The source's events before ``at`` first started, in order.
        records: The records it replays, by address, edits applied.
        calls: The calls of those addresses, as the source recorded them.
        edited: The addresses whose output the caller replaced, in the order given.
    """

    source: RunRow
    at: str
    document: LoadedWorkflow
    inputs: dict[str, Any]
    policy: StoredPolicy | None
    events: list[Event]
    records: dict[str, StepRecord]
    calls: list[CallRecord] = field(default_factory=list)
    edited: list[str] = field(default_factory=list)


async def read_fork(
    store: RunStore,
    source: RunRow,
    at: str,
    *,
    inputs: Mapping[str, Any] | None = None,
    edits: Mapping[str, Any] | None = None,
) -> Fork:
    """What a fork of ``source`` at ``at`` reuses, with ``edits`` and ``inputs`` applied.

    ``edits`` replaces the output of reused steps, by address: a string is the
    step's text (its result becomes null), any other JSON value its result (its
    text becomes that value as JSON). An edited step counts as ``completed``.

    Raises:
        ForkRefused: ``source`` never started ``at``, or an edit names a step the
            fork does not reuse.
        InputError: An edit's value is not JSON, or does not fit the
            ``resultSchema`` of its step's agent; an input is unknown or of the
            wrong type.
        CorruptRecord: A record of the source does not read back.
    """
    document, stored_inputs, policy = await stored_document(store, source)
    # Records first, events after: a record rewritten after `at` started is
    # then seen to have started again among the events, and is left out. The
    # calls of the addresses reused were all made before `at` started.
    records = await store.steps(source.run_id)
    events = await store.events(source.run_id)
    cut = _first_start(events, at)
    if cut is None:  # where the fork starts is the first thing a caller gets right
        raise ForkRefused(f"run {source.run_id!r} never started {at!r}; {_started(events)}")
    resolved = stored_inputs
    if inputs:
        resolved = resolve_inputs(document.workflow.inputs, {**stored_inputs, **inputs})
    before = [event for event in events if event.seq < cut]
    reused = _reused(records, before, events[len(before) :])
    _check_edits(edits or {}, reused, before, source.run_id, at)
    schemas = _result_schemas(edits or {}, before, document)
    edited = _edit(reused, edits or {}, schemas)
    calls = await store.calls(source.run_id)
    return Fork(
        source=source,
        at=at,
        document=document,
        inputs=resolved,
        policy=policy,
        events=before,
        records=reused,
        calls=[call for call in calls if call.address in reused],
        edited=edited,
    )


def write_fork(store: RunStore, fork: Fork, run_id: str) -> Replay:
    """Queues the fork as run ``run_id`` (flush to make it durable); its replay.

    Hold the new run's lease first: these writes are fenced by it.
    """
    now = time.time()
    source = fork.source
    store.begin_run(
        RunRow(
            run_id=run_id,
            workflow=source.workflow,
            path=source.path,
            status="running",
            inputs=fork.inputs,
            created_at=now,
            updated_at=now,
            parent_run_id=source.run_id,
            parent_address=fork.at,
        )
    )
    store.save_document(run_id, encode_document(fork.document, fork.inputs, fork.policy))
    events = [msgspec.structs.replace(event, run_id=run_id) for event in fork.events]
    for event in events:
        store.append_event(event)
    for address, record in fork.records.items():
        store.put_step(run_id, address, record)
    for call in fork.calls:
        store.put_call(run_id, call)
    replay = Replay(dict(fork.records), events)
    replay.forked = RunForked(
        parent_run_id=source.run_id,
        at=fork.at,
        replayable=replay.replayable,
        after_seq=replay.last_seq,
        edited=list(fork.edited),
    )
    return replay


def _first_start(events: list[Event], at: str) -> int | None:
    """The ``seq`` of the event where ``at`` first started, if it ever did."""
    return next((e.seq for e in events if e.step_id == at and e.type in _STARTS), None)


def _started(events: list[Event]) -> str:
    """What the run did start, for the error that names an address it did not."""
    started = list(dict.fromkeys(e.step_id for e in events if e.type in _STARTS and e.step_id))
    if not started:
        return "it started no step"
    shown = ", ".join(started[:_SHOWN])
    more = f" and {len(started) - _SHOWN} more" if len(started) > _SHOWN else ""
    return f"it started {shown}{more}"


def _finished(event: Event) -> bool:
    """Whether ``event`` records its address's final outcome."""
    if event.type in (EventType.STEP_END, EventType.STEP_SKIPPED, EventType.SIGNAL_RECEIVED):
        return True
    return event.type == EventType.ERROR and payload(event, StepError).status == "failed"


def _reused(
    records: dict[str, StepRecord], before: list[Event], after: list[Event]
) -> dict[str, StepRecord]:
    """The records a fork replays: final, ended before the cut and not started again after.

    A record rewritten after the cut (a container retried, a step restarted by its
    supervisor) is no longer the one that stood at the cut: its address runs anew.
    """
    ended = {e.step_id for e in before if e.step_id is not None and _finished(e)}
    again = {e.step_id for e in after if e.type in _STARTS}
    return {
        address: record
        for address, record in records.items()
        if address in ended and address not in again and record.status in REPLAYABLE
    }


def _check_edits(
    edits: Mapping[str, Any],
    reused: dict[str, StepRecord],
    before: list[Event],
    run_id: str,
    at: str,
) -> None:
    """Refuses an edit the fork could not keep.

    Raises:
        ForkRefused: An edit names an address the fork does not reuse (it runs
            again), or a container, whose output the fork makes again from its
            steps' (a loop's, a graph's...).
    """
    started = {e.step_id for e in before if e.type in _STARTS and e.step_id is not None}
    for address in edits:
        if address not in reused:
            which = f"only {_names(reused)}" if reused else "no step (nothing had finished)"
            raise ForkRefused(
                f"cannot set the output of {address!r}: a fork of run {run_id!r} at {at!r}"
                f" reuses {which}"
            )
        inside = sorted(a for a in started if a != address and is_under(a, address))
        if inside:
            raise ForkRefused(
                f"cannot set the output of {address!r}: it runs steps of its own, and the"
                f" fork makes its output again from theirs: set one of {_names(inside)}"
            )


def _result_schemas(
    edits: Mapping[str, Any], before: list[Event], document: LoadedWorkflow
) -> dict[str, dict[str, Any]]:
    """The ``resultSchema`` of the agent of each edited step that has one, by address.

    The agent is the one the step's ``step_start`` named, looked up in the
    workflow, then in the workflows it includes.
    """
    agents = {
        e.step_id: e.agent
        for e in before
        if e.type == EventType.STEP_START
        and e.step_id is not None
        and e.step_id in edits
        and e.agent is not None
    }
    schemas: dict[str, dict[str, Any]] = {}
    for address, name in agents.items():
        schema = _agent_schema(document, name)
        if schema is not None:
            schemas[address] = schema
    return schemas


def _agent_schema(document: LoadedWorkflow, name: str) -> dict[str, Any] | None:
    agent = document.workflow.agents.get(name)
    if agent is not None:
        return agent.result_schema
    for included in document.includes.values():
        schema = _agent_schema(included, name)
        if schema is not None:
            return schema
    return None


def _edit(
    reused: dict[str, StepRecord], edits: Mapping[str, Any], schemas: Mapping[str, dict[str, Any]]
) -> list[str]:
    """Applies ``edits`` (checked: `_check_edits`) to ``reused`` in place; the addresses
    edited.

    The output of a step whose agent has a ``resultSchema`` (``schemas``) is its
    result, and must fit the schema, as the agent's own ``submit_result`` must.

    Raises:
        InputError: A value is not JSON, or does not fit its step's schema.
    """
    for address, value in edits.items():
        record = reused[address]
        schema = schemas.get(address)
        if schema is not None:
            problems = schema_errors(schema, value)
            if problems:
                raise InputError(
                    f"the output given for {address!r} does not fit its agent's resultSchema: "
                    + "; ".join(problems)
                )
        if isinstance(value, str):
            content, result = value, (value if schema is not None else None)
        else:
            try:
                content = _encode(value).decode()
            except (TypeError, msgspec.EncodeError) as error:
                raise InputError(f"the output given for {address!r} is not JSON: {error}") from None
            result = msgspec.json.decode(content)  # plain data, as a record reads back
        reused[address] = msgspec.structs.replace(
            record, status="completed", content=content, result=result, error=None
        )
    return list(edits)


def _names(addresses: Iterable[str]) -> str:
    """Addresses for an error: the first few, and a count of the rest."""
    names = sorted(addresses)
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more
