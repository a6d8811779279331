"""Running a leaf step on a remote worker: the supervisor's half.

When a run has a dispatcher (``Runtime(workers=...)``), `StepActor` asks the
step's kind for a work order (`LeafWork.order`) instead of running the attempt
in this process. What to run is decided there, where the run's state lives:
templates are rendered, an agent's prompt is built from its dependencies, brief
and inbox, its model resolved, a tool step's ``$`` arguments evaluated.
What travels is a self-contained `WorkOrder`; the worker runs it with the same
executors (`run_work_order`) and sends back one `Result`, which `remote_work`
turns into exactly what the in-process path would have returned or raised. The
step's events and messages come back through a `DispatchSink` into the run's
journal and coordinator.

Controllers, judges, the coordinator and the store never leave the supervisor.
An agent step whose loop keeps its ``memory`` runs here too: the conversation
it continues is the run's state.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import anyio
import msgspec
from anyio import CancelScope

from cadenza._failpoints import ARMED, failpoint
from cadenza.actors.run import (
    DispatchSink,
    RunContext,
    StepDispatcher,
    StepFailure,
)
from cadenza.errors import InboxFull, StoreError
from cadenza.llm import LLMConfigError, LLMUsage, parse_model
from cadenza.protocols import (
    AgentOrder,
    CallRecord,
    ErrorInfo,
    EventType,
    MessageDropped,
    Result,
    ResultRejected,
    StepDispatched,
    StepEvent,
    StepQueued,
    StepRequeued,
    WorkOrder,
)

__all__ = ["DispatchSink", "StepDispatcher", "remote_work"]


class _Away(Protocol):
    """The step an order is sent for (`StepActor`): its run, and where its attempt ran."""

    run: RunContext
    worker: str | None


class _StepSink:
    """Puts what a dispatcher reports about one step into its run, and confirms to the
    worker the calls the run's journal committed (`confirm_calls`)."""

    __slots__ = ("_calls", "_dispatch", "_news", "address", "attempt", "failure", "run", "worker")

    def __init__(self, run: RunContext, address: str, attempt: int) -> None:
        self.run = run
        self.address = address
        self.attempt = attempt
        self.worker: str | None = None
        self._dispatch = (0, 0)  # the job and fence the worker's calls come under
        self._calls = 0  # how many calls it sent under them
        self._news = asyncio.Event()
        self.failure: StoreError | None = None
        """Why the worker's calls could not be committed (see `confirm_calls`)."""

    def dispatched(self, worker: str, job: int, attempt: int) -> None:
        self.worker = worker
        self._dispatch, self._calls = (job, attempt), 0
        data = StepDispatched(worker=worker, job=job, dispatch=attempt)
        self.run.journal.emit(EventType.STEP_DISPATCHED, step_id=self.address, data=data)

    def queued(self, job: int) -> None:
        message = "no worker is connected; the step waits for one"
        self.run.journal.emit(
            EventType.STEP_QUEUED, step_id=self.address, message=message, data=StepQueued(job=job)
        )

    def requeued(self, worker: str, job: int, attempt: int, reason: str) -> None:
        data = StepRequeued(worker=worker, job=job, dispatch=attempt, reason=reason)
        self.run.journal.emit(EventType.STEP_REQUEUED, step_id=self.address, data=data)

    def rejected(self, worker: str, job: int, attempt: int) -> None:
        data = ResultRejected(worker=worker, job=job, dispatch=attempt, reason="stale")
        self.run.journal.emit(EventType.RESULT_REJECTED, step_id=self.address, data=data)

    def event(self, event: StepEvent) -> None:
        if event.type == EventType.OUTPUT:  # shown, never stored, here as on the worker
            journal = self.run.journal
            journal.output(
                self.address,
                event.agent,
                event.delta or "",
                bool(event.done),
                reasoning=bool(event.reasoning),
            )
            return
        if event.type == EventType.AGENT_TURN and event.data and event.tokens is not None:
            event = self._priced(event)
        self.run.journal.relay(self.address, event)

    def _priced(self, turn: StepEvent) -> StepEvent:
        """A worker's model call, priced at the run's prices (the worker knows only the
        shipped ones): what a resumed run counts from the log."""
        data = dict(turn.data or {})
        tokens = turn.tokens
        if data.get("phase") != "response" or tokens is None:
            return turn
        data.pop("cost", None)
        cost = _cost(self.run, str(data.get("model", "")), tokens.prompt, tokens.completion)
        if cost is not None:
            data["cost"] = cost
        return msgspec.structs.replace(turn, data=data)

    def call(self, call: CallRecord) -> None:
        self._calls += 1  # confirmed by count: the worker waits for all it sent
        if call.address == self.address and call.attempt == self.attempt:
            run = self.run  # a worker's say only goes for the attempt it was sent
            run.journal.store.put_call(run.run_id, call)
        self._news.set()

    async def confirm_calls(self, dispatcher: StepDispatcher, waiting: CancelScope) -> None:
        """Tells the worker, after each commit, how many of its calls the journal holds.

        A failed commit (`LeaseLost`, `StoreFailed`) is kept in ``failure`` and cancels
        ``waiting``, the step's wait for its job: the step raises it, as in one process.
        """
        try:
            while True:
                await self._news.wait()
                self._news.clear()
                (job, attempt), calls = self._dispatch, self._calls
                if ARMED:  # a crash test is on: spare every other run the call
                    failpoint("call.before_confirm")
                await self.run.journal.durable()
                dispatcher.confirm(job, attempt, calls)
        except StoreError as error:
            self.failure = error
            waiting.cancel()

    def mail(self, text: str) -> None:
        run = self.run
        try:
            run.tell_coordinator(self.address, text)
        except InboxFull:
            data = MessageDropped(
                from_=self.address,
                to="coordinator",
                text=text,
                msg_type=0,
                reason="the coordinator's inbox is full",
            )
            run.journal.emit(EventType.MESSAGE_DROPPED, step_id=self.address, data=data)


async def remote_work(step: _Away, dispatcher: StepDispatcher, order: WorkOrder) -> tuple[str, Any]:
    """Runs ``order`` on a worker for ``step``; returns ``(content, result)`` and sets
    ``step.worker`` to the worker that ran it.

    Raises:
        StepFailure: The step failed on its worker (its error, content and result).
    """
    run = step.run
    address = order.address
    sink = _StepSink(run, address, order.attempt)
    if isinstance(order, AgentOrder):  # the one kind of step whose calls are journaled
        result = await _confirming(dispatcher, order, sink)
    else:
        result = await dispatcher.execute(order, sink)
    step.worker = sink.worker
    journal = run.journal
    if result.usage is not None:
        usage = result.usage
        cost, agent = _priced(run, order, usage.prompt_tokens, usage.completion_tokens)
        journal.spend(
            address,
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.llm_calls,
            cost=cost,
            agent=agent,
        )
    if result.status == "completed":
        return result.content or "", result.result
    error = result.error or ErrorInfo(
        "RemoteError", f"worker {sink.worker} reported {result.status!r}", address
    )
    if error.type == "BudgetExceeded":
        run.exhaust_budget(error)
    raise StepFailure(error, content=result.content, result=result.result)


async def _confirming(dispatcher: StepDispatcher, order: AgentOrder, sink: _StepSink) -> Result:
    """Runs ``order`` on a worker, confirming its calls as they are committed.

    Raises:
        LeaseLost, StoreFailed: The run's journal could not commit them.
    """
    async with anyio.create_task_group() as group:
        group.start_soon(sink.confirm_calls, dispatcher, group.cancel_scope)
        result = await dispatcher.execute(order, sink)
        group.cancel_scope.cancel()  # the job is over: no call is left to confirm
    if sink.failure is not None:  # the journal could not commit the worker's calls
        raise sink.failure
    return result


def _priced(
    run: RunContext, order: WorkOrder, prompt: int, completion: int
) -> tuple[float | None, str | None]:
    """What a worker's model calls for ``order`` cost at the run's prices (None: no price),
    and the agent that made them. A price is linear, so the step's totals price its calls."""
    if not isinstance(order, AgentOrder):
        return None, None
    return _cost(run, order.model, prompt, completion), order.agent_name


def _cost(run: RunContext, spec: str, prompt: int, completion: int) -> float | None:
    try:
        provider, model = parse_model(spec)
    except LLMConfigError:  # a bare name the worker's environment placed: not priced here
        return None
    return run.prices.cost(provider, model, LLMUsage(prompt, completion))
