"""Running a work order: the worker's half of a remote step.

A worker gets a self-contained `WorkOrder` (built by the step's kind in the
supervisor, `LeafWork.order`) and runs it with the executors the supervisor
would have used in its own process (`LeafWork.run_order`: `run_command`,
`call_handler`, `run_agent`, `call_tool`, a registered kind's ``execute``),
under the order's timeout. The outcome is one `Result`: whatever goes wrong
inside the work becomes its error exactly as `StepActor` would have recorded
it; only cancellation propagates. An agent's and a tool's events and
``send_message`` calls go back through ``send`` while it runs, and so do its
model and tool calls, for the run's journal: where a run on one process waits for
its store (before a tool runs, and after), the worker waits for the supervisor
to confirm it committed them (`Confirmations`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial

from cadenza.actors.run import RunJournal, StepFailure, work_error
from cadenza.errors import RemoteError
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

__all__ = ["Confirmations", "run_work_order"]


class Confirmations:
    """How many of a job's calls the supervisor has confirmed committed (`Durable`).

    The worker's journal sends each call as it is made (`CallMade`) and counts it
    here; where a run on one process waits for its store, the job waits until the
    supervisor has confirmed every call sent so far, at most ``patience`` seconds
    (the worker's liveness window: a supervisor silent that long is lost).
    """

    def __init__(self, clock: Clock, patience: float) -> None:
        self._clock = clock
        self._patience = patience
        self._sent = 0
        self._confirmed = 0
        self._news = asyncio.Event()

    def sent(self) -> None:
        """One more call went to the supervisor."""
        self._sent += 1

    def confirm(self, calls: int) -> None:
        """The supervisor's word: its journal holds the job's first ``calls`` calls."""
        if calls > self._confirmed:
            self._confirmed = calls
            self._news.set()

    async def wait(self) -> None:
        """Returns once every call sent so far is confirmed.

        Raises:
            RemoteError: The supervisor did not confirm them within ``patience`` seconds.
        """
        if self._confirmed >= self._sent:
            return
        try:
            with self._clock.fail_after(self._patience):
                while self._confirmed < self._sent:
                    self._news.clear()
                    await self._news.wait()
        except TimeoutError:
            raise RemoteError(
                f"the supervisor did not confirm within {self._patience:g} s that its journal "
                "holds this step's calls: the step stops before anything more happens"
            ) from None


async def run_work_order(
    order: WorkOrder,
    job: int,
    attempt: int,
    *,
    clock: Clock,
    providers: Callable[[str], ProviderRegistry],
    send: Send,
    confirmations: Confirmations,
) -> Result:
    """Runs one work order to its `Result` (for dispatch ``job``, fence ``attempt``).

    ``providers`` gives the model registry of a run id (agents of one run share
    it, so a scripted agent keeps its place across visits to this worker);
    ``confirmations`` hears the supervisor confirm the calls the order makes.
    """
    address = order.address
    usage: list[Usage] = []
    journal = partial(
        _forwarding_journal, job=job, attempt=attempt, send=send, confirmations=confirmations
    )
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
    """A worker keeps no events and no calls: each goes to the supervisor, which records
    it; its calls are durable once the supervisor confirms them."""

    def __init__(self, send: Send, job: int, attempt: int, confirmations: Confirmations) -> None:
        super().__init__()
        self._send = send
        self._job = job
        self._attempt = attempt
        self._confirmations = confirmations

    def append_event(self, event: Event) -> None:
        """Keeps nothing."""

    def put_call(self, run_id: str, call: CallRecord) -> None:
        """Sends the call to the supervisor's journal of the run."""
        self._confirmations.sent()
        self._send(CallMade(self._job, self._attempt, call))

    async def flush(self, run_id: str | None = None) -> None:
        """Waits until the supervisor confirms every call sent so far (`Confirmations.wait`)."""
        await self._confirmations.wait()


def _forwarding_journal(
    run_id: str,
    workflow: str,
    *,
    job: int,
    attempt: int,
    send: Send,
    confirmations: Confirmations,
) -> RunJournal:
    """A journal that keeps nothing and sends every event and call to the supervisor."""
    journal = RunJournal(run_id, workflow, _Forwarded(send, job, attempt, confirmations))

    def forward(event: Event) -> None:
        send(StepEvent.of(job, attempt, event))

    journal.subscribe(forward)
    return journal
