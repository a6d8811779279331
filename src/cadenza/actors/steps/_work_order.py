"""Running a work order: the worker's half of a remote step.

A worker gets a self-contained `WorkOrder` (built by `remote_work` in the
supervisor) and runs it with the executors the supervisor would have used in
its own process: `run_command`, `call_handler`, `run_agent`, `call_tool`, under the order's
timeout. The outcome is one `Result`: whatever goes wrong inside the work
becomes its error exactly as `StepActor` would have recorded it; only
cancellation propagates. An agent's and a tool's events and ``send_message`` calls go back
through ``send`` while it runs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from cadenza.actors.run import (
    COORDINATOR,
    NO_BRIEF,
    Brief,
    Outgoing,
    RunContext,
    RunJournal,
    Scope,
    StepFailure,
    work_error,
)
from cadenza.kernel import Actor, Clock, Slots, Supervisor
from cadenza.llm import ProviderRegistry
from cadenza.protocols import (
    AgentOrder,
    CommandOrder,
    ErrorInfo,
    Event,
    HandlerOrder,
    Mail,
    Result,
    StepEvent,
    ToolOrder,
    Usage,
    WorkOrder,
)
from cadenza.store import MemoryRunStore
from cadenza.workflow import Agent, LoadedWorkflow, Options, Workflow

from ._agent import AgentVisit, run_agent
from ._command import command_result, run_command
from ._handler import StepContext, StepsView, call_handler, resolve_handler
from ._tool_step import CallSite, call_tool

__all__ = ["run_work_order"]

Send = Callable[[StepEvent | Mail], None]
"""How a running order reaches its supervisor (events, messages); must not block."""


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
    try:
        if order.timeout is None:
            content, result = await _run(order, job, attempt, clock, providers, send, usage)
        else:
            with clock.fail_after(order.timeout):
                content, result = await _run(order, job, attempt, clock, providers, send, usage)
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


@functools.lru_cache(maxsize=256)
def _directory(text: str) -> Path:
    """A workflow directory as a Path, built once: a handler is looked up by it per step."""
    return Path(text)


def _one(usage: list[Usage]) -> Usage | None:
    return usage[0] if usage else None


async def _run(
    order: WorkOrder,
    job: int,
    attempt: int,
    clock: Clock,
    providers: Callable[[str], ProviderRegistry],
    send: Send,
    usage: list[Usage],
) -> tuple[str, Any]:
    if isinstance(order, HandlerOrder):
        workflow_dir = _directory(order.base_dir)
        handler = resolve_handler(order.handler, workflow_dir)
        brief = NO_BRIEF if not order.brief else msgspec.convert(order.brief, Brief)
        context = StepContext(
            run_id=order.run_id,
            address=order.address,
            attempt=order.attempt,
            idempotency_key=order.idempotency_key,
            inputs=order.inputs,
            steps=StepsView(order.steps),
            workflow_dir=workflow_dir,
            item=order.item,
            index=order.index,
            iteration=order.iteration,
            brief=brief,
        )
        return await call_handler(handler, context)
    if isinstance(order, CommandOrder):
        env = dict(os.environ)
        env.update(order.env)
        cwd = Path(order.cwd) if order.cwd else Path.cwd()
        outcome = await run_command(order.command, env=env, cwd=cwd, stdin=order.stdin)
        return command_result(outcome, order.address)
    if isinstance(order, ToolOrder):
        site = CallSite(
            _directory(order.base_dir), order.run_id, order.address, order.attempt, clock
        )
        journal = _forwarding_journal(order.run_id, "remote", job, attempt, send)
        return await call_tool(order.tool, order.arguments, site, journal)
    return await _agent(order, job, attempt, clock, providers(order.run_id), send, usage)


class _Forwarded(MemoryRunStore):
    """A worker keeps no events: each one goes to the supervisor, which records it."""

    def append_event(self, event: Event) -> None:
        """Keeps nothing."""


def _forwarding_journal(
    run_id: str, workflow: str, job: int, attempt: int, send: Send
) -> RunJournal:
    """A journal that keeps nothing and sends every event to the supervisor."""
    journal = RunJournal(run_id, workflow, _Forwarded())

    def forward(event: Event) -> None:
        duration = float(event.duration.rstrip("s")) if event.duration else None
        send(
            StepEvent(
                job,
                attempt,
                event.type,
                agent=event.agent,
                message=event.message,
                duration=duration,
                tokens=event.tokens,
                error=event.error,
                data=event.data,
                delta=event.delta,
                done=event.done,
            )
        )

    journal.subscribe(forward)
    return journal


class _Courier(Actor):
    """Stands in for the run's coordinator on a worker: forwards ``send_message``."""

    def __init__(self, job: int, attempt: int, send: Send) -> None:
        self.job = job
        self.attempt = attempt
        self.send = send

    async def receive(self, message: Any) -> None:
        if isinstance(message, Outgoing):
            self.send(Mail(self.job, self.attempt, message.text))


async def _agent(
    order: AgentOrder,
    job: int,
    attempt: int,
    clock: Clock,
    providers: ProviderRegistry,
    send: Send,
    usage: list[Usage],
) -> tuple[str, Any]:
    agent = None if order.agent is None else msgspec.convert(order.agent, Agent)
    agents = {order.agent_name: agent} if agent is not None and order.agent_name else {}
    workflow = Workflow(
        name="remote", steps=[], agents=agents, options=Options(max_tokens=order.max_tokens)
    )
    document = LoadedWorkflow(
        workflow=workflow, path=None, base_dir=Path(order.base_dir), includes={}
    )
    journal = _forwarding_journal(order.run_id, workflow.name, job, attempt, send)
    journal.prompt_tokens = order.tokens_spent  # the budget counts the whole run's spend
    try:
        async with Supervisor(clock=clock) as supervisor:
            supervisor.spawn(COORDINATOR, lambda: _Courier(job, attempt, send))
            context = RunContext(
                run_id=order.run_id,
                document=document,
                inputs={},
                journal=journal,
                supervisor=supervisor,
                clock=clock,
                limiter=Slots(1),
                step_ids=frozenset(),
                providers=providers,
            )
            outcome = await run_agent(
                context,
                document,
                AgentVisit(
                    address=order.address,
                    agent_name=order.agent_name,
                    instructions=order.prompt,
                    scope=Scope(),
                    brief=NO_BRIEF,
                    step_model=order.model,
                    can_send_messages=order.can_send_messages,
                    max_retries=order.max_retries,
                ),
            )
    finally:
        usage.append(
            Usage(
                prompt_tokens=journal.prompt_tokens - order.tokens_spent,
                completion_tokens=journal.completion_tokens,
                llm_calls=journal.llm_calls,
            )
        )
    if outcome.error is not None:
        raise StepFailure(outcome.error, content=outcome.content or None, result=outcome.result)
    return outcome.content, outcome.result
