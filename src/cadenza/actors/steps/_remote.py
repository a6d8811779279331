"""Running a leaf step on a remote worker: the supervisor's half.

When a run has a dispatcher (``Runtime(workers=...)``), `StepActor` hands each
attempt to `remote_work` instead of running it in this process. What to run is
decided here, where the run's state lives: templates are rendered, an agent's
prompt is built from its dependencies, brief and inbox, its model resolved, a
tool step's ``$`` arguments evaluated.
What travels is a self-contained `WorkOrder`; the worker runs it with the same
executors and sends back one `Result`, which becomes exactly what the
in-process path would have returned or raised. The step's events and messages
come back through a `DispatchSink` into the run's journal and coordinator.

Controllers, judges, the coordinator and the store never leave the supervisor.
An agent step whose loop keeps its ``memory`` runs here too: the conversation
it continues is the run's state.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from cadenza.actors.run import NO_BRIEF, StepFailure
from cadenza.errors import InboxFull
from cadenza.protocols import (
    AgentOrder,
    CommandOrder,
    ErrorInfo,
    EventType,
    HandlerOrder,
    MessageDropped,
    Result,
    ResultRejected,
    StepDispatched,
    StepEvent,
    StepQueued,
    StepRequeued,
    ToolOrder,
    WorkOrder,
)
from cadenza.workflow import Step, parse_duration

from ._agent import model_spec
from ._prompt import build_prompt, read_context_files
from ._tool_step import tool_arguments

if TYPE_CHECKING:
    from ._step import StepActor

__all__ = ["DispatchSink", "StepDispatcher", "remote_work"]


class DispatchSink(Protocol):
    """What a dispatcher tells the run about one step attempt while it is away."""

    def dispatched(self, worker: str, job: int, attempt: int) -> None:
        """The attempt went to ``worker`` under delivery fence ``attempt``."""

    def queued(self, job: int) -> None:
        """No worker is connected: the attempt waits for one (it does not fail)."""

    def requeued(self, worker: str, job: int, attempt: int, reason: str) -> None:
        """``worker`` was lost; the attempt goes out again under fence ``attempt``."""

    def rejected(self, worker: str, job: int, attempt: int) -> None:
        """A stale result for this step (fence ``attempt``) came from ``worker`` and was refused."""

    def event(self, event: StepEvent) -> None:
        """An event of the running step."""

    def mail(self, text: str) -> None:
        """The running agent sent a message to the coordinator."""


class StepDispatcher(Protocol):
    """Sends work orders to workers (`cadenza.remote.Dispatcher` is the one there is)."""

    async def execute(self, order: WorkOrder, sink: DispatchSink) -> Result:
        """Runs ``order`` on a worker and returns its one accepted result.

        Waits while no worker is connected. Cancelling the caller cancels the job.
        """
        ...


class _StepSink:
    """Puts what a dispatcher reports about one step into its run."""

    __slots__ = ("actor", "address", "worker")

    def __init__(self, actor: StepActor, address: str) -> None:
        self.actor = actor
        self.address = address
        self.worker: str | None = None

    def dispatched(self, worker: str, job: int, attempt: int) -> None:
        self.worker = worker
        data = StepDispatched(worker=worker, job=job, dispatch=attempt)
        self.actor.run.journal.emit(EventType.STEP_DISPATCHED, step_id=self.address, data=data)

    def queued(self, job: int) -> None:
        message = "no worker is connected; the step waits for one"
        self.actor.run.journal.emit(
            EventType.STEP_QUEUED, step_id=self.address, message=message, data=StepQueued(job=job)
        )

    def requeued(self, worker: str, job: int, attempt: int, reason: str) -> None:
        data = StepRequeued(worker=worker, job=job, dispatch=attempt, reason=reason)
        self.actor.run.journal.emit(EventType.STEP_REQUEUED, step_id=self.address, data=data)

    def rejected(self, worker: str, job: int, attempt: int) -> None:
        data = ResultRejected(worker=worker, job=job, dispatch=attempt, reason="stale")
        self.actor.run.journal.emit(EventType.RESULT_REJECTED, step_id=self.address, data=data)

    def event(self, event: StepEvent) -> None:
        if event.type == EventType.OUTPUT:  # shown, never stored, here as on the worker
            journal = self.actor.run.journal
            journal.output(self.address, event.agent, event.delta or "", bool(event.done))
            return
        self.actor.run.journal.relay(self.address, event)

    def mail(self, text: str) -> None:
        run = self.actor.run
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


async def remote_work(
    actor: StepActor, dispatcher: StepDispatcher, address: str, attempt: int
) -> tuple[str, Any]:
    """Runs one attempt of ``actor``'s step on a worker; returns ``(content, result)``.

    Raises:
        StepFailure: The step failed on its worker (its error, content and result).
    """

    step = actor.step
    timeout = step.timeout or actor.run.options.step_timeout
    seconds = parse_duration(timeout) if timeout else None
    if actor.kind == "agent" and actor.brief.memory != "fresh":
        # The conversation this visit continues is the run's state: it stays here.
        if seconds is None:
            return await actor._work(address, attempt)
        with actor.run.clock.fail_after(seconds):
            return await actor._work(address, attempt)
    order = _order(actor, address, attempt, seconds)
    if order is None:
        return await actor._work(address, attempt)  # not a remote kind: fails as it would here
    sink = _StepSink(actor, address)
    result = await dispatcher.execute(order, sink)
    actor.worker = sink.worker
    journal = actor.run.journal
    if result.usage is not None:
        usage = result.usage
        journal.spend(address, usage.prompt_tokens, usage.completion_tokens, usage.llm_calls)
    if result.status == "completed":
        return result.content or "", result.result
    error = result.error or ErrorInfo(
        "RemoteError", f"worker {sink.worker} reported {result.status!r}", address
    )
    if error.type == "BudgetExceeded":
        actor.run.exhaust_budget(error)
    raise StepFailure(error, content=result.content, result=result.result)


def _order(actor: StepActor, address: str, attempt: int, seconds: float | None) -> WorkOrder | None:
    run = actor.run
    step = actor.step
    key = f"{run.run_id}:{address}:{attempt}"
    base_dir = actor.document.base_dir.absolute()
    if step.command is not None:
        env = {name: actor._render(value) for name, value in (step.env or {}).items()}
        env["CADENZA_RUN_ID"] = run.run_id
        env["CADENZA_STEP_ADDRESS"] = address
        env["CADENZA_ATTEMPT"] = str(attempt)
        env["CADENZA_IDEMPOTENCY_KEY"] = key
        return CommandOrder(
            run_id=run.run_id,
            address=address,
            attempt=attempt,
            idempotency_key=key,
            base_dir=str(base_dir),
            timeout=seconds,
            command=step.command,
            env=env,
            cwd=os.fspath(base_dir / step.cwd) if step.cwd else None,
            stdin=actor._render(step.stdin) if step.stdin is not None else None,
        )
    if step.handler is not None:
        variables = actor.scope.activation(run.inputs)
        brief = actor.brief
        return HandlerOrder(
            run_id=run.run_id,
            address=address,
            attempt=attempt,
            idempotency_key=key,
            base_dir=str(base_dir),
            timeout=seconds,
            handler=step.handler,
            inputs=variables["inputs"],
            steps=variables["steps"],
            item=variables.get("item"),
            index=variables.get("index"),
            iteration=variables.get("iteration"),
            brief={} if brief is NO_BRIEF else msgspec.to_builtins(brief),
        )
    if step.tool is not None:
        activation = actor.scope.activation(run.inputs)
        return ToolOrder(
            run_id=run.run_id,
            address=address,
            attempt=attempt,
            idempotency_key=key,
            base_dir=str(base_dir),
            timeout=seconds,
            tool=step.tool,
            arguments=tool_arguments(step.tool_input, activation, run.step_ids),
        )
    if actor.kind == "agent":
        return _agent_order(actor, address, attempt, key, str(base_dir), seconds)
    return None


def _agent_order(
    actor: StepActor, address: str, attempt: int, key: str, base_dir: str, seconds: float | None
) -> AgentOrder:
    run = actor.run
    step = actor.step
    agent = actor.document.workflow.agents.get(step.agent) if step.agent else None
    outputs = actor.scope.steps()
    depends_on = step.depends_on if isinstance(step, Step) else []
    variables = actor.scope.activation(run.inputs)
    prompt = build_prompt(
        actor._render(step.instructions or ""),
        brief=actor.brief,
        item=variables.get("item"),
        dependencies=[(d, outputs[d]["content"]) for d in depends_on if d in outputs],
        context_files=read_context_files(actor.document.base_dir, step.context_files),
        inbox=actor._drain_inbox(),
    )
    return AgentOrder(
        run_id=run.run_id,
        address=address,
        attempt=attempt,
        idempotency_key=key,
        base_dir=base_dir,
        timeout=seconds,
        agent_name=step.agent,
        agent=None if agent is None else msgspec.to_builtins(agent),
        model=model_spec(run, agent, step.agent, step.model),
        prompt=prompt,
        max_tokens=run.options.max_tokens,
        tokens_spent=run.journal.prompt_tokens + run.journal.completion_tokens,
        max_retries=step.max_retries if step.max_retries is not None else run.options.max_retries,
    )
