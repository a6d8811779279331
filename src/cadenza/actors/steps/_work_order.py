"""Running a work order: the worker's half of a remote step.

A worker gets a self-contained `WorkOrder` (built by the step's kind in the
supervisor, `LeafWork.order`) and runs it with the executors the supervisor
would have used in its own process (`LeafWork.run_order`: `run_command`,
`call_handler`, `run_agent`, `call_tool`, a registered kind's ``execute``),
under the order's timeout. The outcome is one `Result`: whatever goes wrong
inside the work becomes its error exactly as `StepActor` would have recorded
it; only cancellation propagates. An agent's and a tool's events and
``send_message`` calls go back through ``send`` while it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from cadenza.actors.run import RunJournal, StepFailure, work_error
from cadenza.kernel import Clock
from cadenza.llm import ProviderRegistry
from cadenza.protocols import (
    CallMade,
    CallRecord,
    ErrorInfo,
    Event,
    KindOrder,
    Result,
    StepEvent,
    Usage,
    WorkOrder,
)
from cadenza.store import MemoryRunStore

from ._leaf import LeafWork, Send, WorkerSite
from .kinds import leaf_work

__all__ = ["run_work_order"]


async def run_work_order(
    order: WorkOrder,
    job: int,
    attempt: int,
    *,
    clock: Clock,
    providers: Callable[[str], ProviderRegistry],
    send: Send,
) -> Result:
    """Runs one work order to its `Result` (for dispatch ``job``, fence ``attempt``).

    ``providers`` gives the model registry of a run id (agents of one run share
    it, so a scripted agent keeps its place across visits to this worker).
    """
    address = order.address
    usage: list[Usage] = []
    journal = partial(_forwarding_journal, job=job, attempt=attempt, send=send)
    site = WorkerSite(job, attempt, clock, providers, send, journal, usage)
    try:
        work = _work(order)
        if order.timeout is None:
            content, result = await work.run_order(order, site)
        else:
            with clock.fail_after(order.timeout):
                content, result = await work.run_order(order, site)
    except TimeoutError:
        message = f"timed out after {order.timeout:g}s"
        error = ErrorInfo("Timeout", message, address)
        return Result(job, attempt, "failed", error=error, usage=_one(usage))
    except StepFailure as failure:
        return Result(
            job,
            attempt,
            "failed",
            content=failure.content,
            result=failure.result,
            error=failure.error,
            usage=_one(usage),
        )
    except Exception as failure:  # the step's own failure, reported, not a crash
        error = work_error(failure, address)
        return Result(job, attempt, "failed", error=error, usage=_one(usage))
    return Result(job, attempt, "completed", content=content, result=result, usage=_one(usage))


def _work(order: WorkOrder) -> LeafWork:
    """The work of the order's kind (an order's tag is its kind's name).

    Raises:
        StepFailure: No such kind is registered on this worker.
    """
    kind = order.step_kind if isinstance(order, KindOrder) else order.__struct_config__.tag
    work = leaf_work(str(kind))
    if work is None:
        message = (
            f"{kind!r} steps cannot run on this worker: no such kind of step is registered "
            "here (CADENZA_STEP_KINDS)"
        )
        raise StepFailure(ErrorInfo("Unsupported", message, order.address))
    return work


def _one(usage: list[Usage]) -> Usage | None:
    return usage[0] if usage else None


class _Forwarded(MemoryRunStore):
    """A worker keeps no events and no calls: each goes to the supervisor, which records it."""

    def __init__(self, send: Send, job: int, attempt: int) -> None:
        super().__init__()
        self._send = send
        self._job = job
        self._attempt = attempt

    def append_event(self, event: Event) -> None:
        """Keeps nothing."""

    def put_call(self, run_id: str, call: CallRecord) -> None:
        """Sends the call to the supervisor's journal of the run."""
        self._send(CallMade(self._job, self._attempt, call))


def _forwarding_journal(
    run_id: str, workflow: str, *, job: int, attempt: int, send: Send
) -> RunJournal:
    """A journal that keeps nothing and sends every event and call to the supervisor."""
    journal = RunJournal(run_id, workflow, _Forwarded(send, job, attempt))

    def forward(event: Event) -> None:
        send(StepEvent.of(job, attempt, event))

    journal.subscribe(forward)
    return journal
