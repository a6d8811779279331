"""Queued runs: recorded now, started later by whichever supervisor takes them.

`cadenza.Runtime.submit` records a run of status ``queued`` with its document
(the workflow, inputs and permission policy, exactly as a started run stores
them), and nothing else: no event, no lease. A runtime with a ``capacity``
takes queued runs from the store (`RunStore.take_queued`: the lease is taken
in the statement that picks the run, so two supervisors never take one) and
starts each one as a new run under that lease. The run becomes ``running``
when its start is recorded; until then it is ``queued``, and a taker that dies
before leaves it to be taken again once its lease expires.

A queued run is cancelled where it waits (`cancel_queued`): under its lease,
so no supervisor starts it meanwhile, it ends ``cancelled`` without a step.
"""

from __future__ import annotations

import time
from typing import Any

from cadenza.actors.run import StoredPolicy, ToolPolicy, encode_document
from cadenza.errors import InputError
from cadenza.protocols import ErrorInfo, RunResult
from cadenza.store import LeaseHolder, RunRow, RunStore
from cadenza.workflow import LoadedWorkflow

__all__ = ["cancel_queued", "fail_queued", "submit_run"]


async def submit_run(
    store: RunStore,
    document: LoadedWorkflow,
    inputs: dict[str, Any],
    run_id: str,
    *,
    priority: int | None,
    policy: ToolPolicy | None,
) -> None:
    """Records the run as ``queued``, with its document; durable when it returns.

    Raises:
        InputError: The run id is already taken in the store.
    """
    if await store.get_run(run_id) is not None:
        raise InputError(f"run id {run_id!r} is already taken in this store")
    now = time.time()
    store.save_document(run_id, encode_document(document, inputs, StoredPolicy.of(policy)))
    # The row after the document: a supervisor that sees the row finds the document.
    store.begin_run(
        RunRow(
            run_id=run_id,
            workflow=document.workflow.name,
            path=str(document.path) if document.path else None,
            status="queued",
            inputs=inputs,
            created_at=now,
            updated_at=now,
            priority=priority,
        )
    )
    await store.flush()


async def cancel_queued(store: RunStore, row: RunRow, reason: str) -> RunResult | None:
    """Ends a queued run ``cancelled`` before any supervisor starts it.

    Takes the run's lease first, so that no supervisor takes it meanwhile.

    Returns:
        The cancelled run's result; None when the run is no longer queued (a
        supervisor started it first: cancel it as a running run).

    Raises:
        LeaseHeld: A supervisor holds the run's lease: it is starting it.
    """
    holder = LeaseHolder.for_this_process()
    await store.acquire_lease(row.run_id, holder)
    try:
        current = await store.get_run(row.run_id)
        if current is None or current.status != "queued":
            return None
        error = ErrorInfo(type="Cancelled", message=reason)
        result = RunResult(
            run_id=row.run_id, workflow=row.workflow, status="cancelled", error=error
        )
        store.end_run(row.run_id, "cancelled", result)
        return result
    finally:
        store.release_lease(row.run_id, holder)
        await store.flush(row.run_id)


def fail_queued(store: RunStore, row: RunRow, why: Exception) -> None:
    """Queues the end of a queued run that cannot start at all (``failed``, saying why).

    Its workflow names Python code no supervisor was given, or its document
    is corrupt: left queued, it would be taken again and again, ahead of the
    runs behind it. The caller holds its lease (the write is fenced by it).
    """
    error = ErrorInfo(type=type(why).__name__, message=f"cannot start the queued run: {why}")
    result = RunResult(run_id=row.run_id, workflow=row.workflow, status="failed", error=error)
    store.end_run(row.run_id, "failed", result)
