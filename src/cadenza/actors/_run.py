"""One run from start to result: a supervisor, the root DAG controller, the outcome.

`execute_run` owns a run's supervisor for exactly as long as the run lasts, so
leaving it (normally, on error or by cancellation) leaves no actor behind. The
run's final status is decided here: the DAG's outcome, unless the run was
cancelled by its caller (``cancelled``), timed out (``failed``, ``Timeout``) or
an actor crashed (``failed``, with the crash as the error). A run whose steps
wait for a person ends ``waiting``. Given a `Replay`, it continues an
interrupted run instead of starting one (see ``_replay.py``); given a
`Recording`, it replays a recorded run offline: no model is called, no leaf's
side effect happens again, and no worktree is made (see ``_recording.py``).

A run *interrupted* (`RunControl.interrupt`: its runtime is shutting down) is
cancelled the same way, step by step, but is not ended: its status stays
``running``, a ``run_interrupted`` event marks where it stopped, and a resume
continues it as after a crash (the steps it cut short run again).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec

from cadenza.kernel import Address, DeadLetter, Slots, Supervisor, Timer
from cadenza.llm import ProviderRegistry
from cadenza.protocols import (
    ErrorInfo,
    EventType,
    MessageRecord,
    MessageUndelivered,
    RunResult,
    RunResumed,
    RunStatus,
    Tokens,
    WorkflowEnd,
    WorkflowStart,
)
from cadenza.store import LeaseHolder, RunRow, RunStore
from cadenza.workflow import (
    WORKTREE_PER_STEP,
    compile_expression,
    parse_duration,
)

from ._children import spawn_step
from ._coordinator import CoordinatorActor
from .containers import DagController, DagOutcome, spawn_root_loop
from .run import (
    COORDINATOR,
    INBOX_SIZE,
    MAX_RESULT_MESSAGES,
    AgentMessage,
    Backlog,
    Drain,
    McpHost,
    PermissionPolicy,
    Replay,
    RunBasis,
    RunContext,
    RunJournal,
    Scope,
    StoredPolicy,
    ToolPolicy,
    Worktrees,
    document_step_ids,
    encode_document,
    pending_bytes,
)

__all__ = [
    "RunControl",
    "execute_run",
    "interrupted_result",
    "report_undelivered",
]

ROOT = Address.root("Run")
"""The root controller's address: capitalised, so no step id can take it."""


@dataclass(eq=False)
class RunControl:
    """Lets a caller cancel or interrupt a run that may not have started its actors yet."""

    cancel_reason: str | None = None
    interrupt_reason: str | None = None
    context: RunContext | None = field(default=None, repr=False)

    def cancel(self, reason: str) -> None:
        """Asks the run to stop: running steps are cancelled, nothing new starts.

        The run ends ``cancelled``, even if it was being interrupted.
        """
        if self.cancel_reason is None:
            self.cancel_reason = reason
        if self.context is not None:
            self.context.cancel(reason)

    def interrupt(self, reason: str) -> None:
        """Stops the run like `cancel`, but leaves it resumable (status ``running``).

        Does nothing to a run already cancelled: that ends ``cancelled``.
        """
        if self.cancel_reason is not None or self.interrupt_reason is not None:
            return
        self.interrupt_reason = reason
        if self.context is not None:
            self.context.cancel(reason)


@dataclass(eq=False, kw_only=True)
class RunSetup(RunBasis):
    """What `execute_run` runs, and with what: the run, its record, its controls.

    Its `RunBasis` (id, document, inputs, journal, clock, concurrency, default
    model, dispatcher) is handed on as it is to the run's `RunContext`.
    With a ``dispatcher`` the run's leaf steps run on remote workers. With a
    ``replay`` it resumes the run recorded under ``run_id``: what finished is
    replayed, the rest runs. ``lease`` is taken once the run is recorded, before
    any step starts; then ``recorded`` is called.

    ``tool_policy`` is the run's own permission policy: a new run stores it
    with its document; a resumed run's was rebuilt from the stored one
    (`resumed_policy`), and ``added_policy`` is what the resuming runtime adds.
    """

    store: RunStore
    control: RunControl
    http: Callable[[], Awaitable[httpx.AsyncClient]] | None = None
    replay: Replay | None = None
    lease: LeaseHolder | None = None
    recorded: Callable[[], None] | None = None
    tool_policy: ToolPolicy | None = None
    added_policy: ToolPolicy | None = None


@dataclass(slots=True)
class _Ending:
    """How the root of a run ended: its outcome, and what cut it short."""

    outcome: DagOutcome
    crashes: list[ErrorInfo]
    timed_out: list[str]


async def execute_run(setup: RunSetup) -> RunResult:
    """Runs a loaded workflow to its end and returns (and records) its result."""
    journal, clock = setup.journal, setup.clock
    await _record_start(setup)
    started = clock.now()
    scope = Scope()
    servers = setup.document.workflow.mcp_servers
    mcp = McpHost(servers, setup.document.base_dir) if servers else None
    offline = setup.recording is not None  # a replay: every model call is answered
    async with (
        ProviderRegistry(clock=clock, http=setup.http, offline=offline) as providers,
        mcp if mcp is not None else nullcontext(),
    ):
        if setup.replay is not None:  # scripted agents go on where the run was
            providers.resume_scripts(setup.replay.log.script_positions)
        ending, context = await _drive(setup, providers, scope, mcp)
    control = setup.control
    status, error = _final_status(ending.outcome, control, ending.timed_out, ending.crashes)
    if context.failure is not None:
        status, error = "failed", context.failure
    if status == "cancelled" and control.cancel_reason is None and control.interrupt_reason:
        # Cut short by a shutdown, not ended: left as after a crash, for a resume.
        journal.emit(EventType.RUN_INTERRUPTED, message=control.interrupt_reason)
        await setup.store.flush(setup.run_id)
        return interrupted_result(journal, control.interrupt_reason)
    output: Any = ending.outcome.content if status != "waiting" else None
    if status == "completed" and setup.document.workflow.output is not None:
        try:
            output = await _output(setup, context, scope)
        except Exception as failure:  # a bad output expression fails the run, located
            status = "failed"
            error = ErrorInfo(type=type(failure).__name__, message=f"output: {failure}")
    undelivered = report_undelivered(journal, context.mail) if status != "waiting" else []
    result = journal.result(status, _plain(output), error, undelivered)
    setup.store.end_run(setup.run_id, status, result)
    usage = result.usage
    journal.emit(
        EventType.WORKFLOW_END,
        message=status,
        duration=clock.now() - started,
        tokens=Tokens(
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.prompt_tokens + usage.completion_tokens,
        ),
        error=f"{error.type}: {error.message}" if error else None,
        data=WorkflowEnd(status=status),
    )
    await setup.store.flush(setup.run_id)
    return result


async def _record_start(setup: RunSetup) -> None:
    """Records the run (or its resumption), takes its lease, then says so (``recorded``)."""
    workflow, journal, store = setup.document.workflow, setup.journal, setup.store
    replay = setup.replay
    if replay is None:
        now = time.time()
        store.begin_run(
            RunRow(
                run_id=setup.run_id,
                workflow=workflow.name,
                path=str(setup.document.path) if setup.document.path else None,
                status="running",
                inputs=setup.inputs,
                created_at=now,
                updated_at=now,
            )
        )
        policy = StoredPolicy.of(setup.tool_policy)
        store.save_document(setup.run_id, encode_document(setup.document, setup.inputs, policy))
        journal.emit(
            EventType.WORKFLOW_START,
            message=workflow.name,
            data=WorkflowStart(total=len(workflow.steps)),
        )
    else:
        store.end_run(setup.run_id, "running", None)
        journal.resume_from(replay)
        if replay.forked is not None:  # a new run, made of another's records up to here
            journal.emit(EventType.RUN_FORKED, message=workflow.name, data=replay.forked)
        else:
            data = RunResumed(replayable=replay.replayable, after_seq=replay.last_seq)
            journal.emit(EventType.RUN_RESUMED, message=workflow.name, data=data)
    await store.flush(setup.run_id)
    if setup.lease is not None:
        await store.acquire_lease(setup.run_id, setup.lease)
    if setup.recorded is not None:
        setup.recorded()


async def _drive(
    setup: RunSetup, providers: ProviderRegistry, scope: Scope, mcp: McpHost | None
) -> tuple[_Ending, RunContext]:
    """Runs the root (a DAG, or a workflow-level loop) under a supervisor until it reports."""
    journal, clock, document = setup.journal, setup.clock, setup.document
    done: asyncio.Future[DagOutcome] = asyncio.get_running_loop().create_future()
    ending = _Ending(DagOutcome(status="failed", content=None, error=None), [], [])

    def on_crash(address: Address, error: BaseException) -> None:
        info = ErrorInfo(type=type(error).__name__, message=str(error), address=str(address))
        journal.emit(
            EventType.ACTOR_CRASHED, step_id=str(address), error=f"{info.type}: {info.message}"
        )
        ending.crashes.append(info)
        context.cancel(f"actor {address} crashed")
        if not done.done():
            done.set_result(DagOutcome(status="failed", content=None, error=info))

    def on_dead_letter(letter: DeadLetter) -> None:
        journal.emit(
            EventType.DEAD_LETTER,
            step_id=letter.address,
            message=f"{letter.message_type}: {letter.reason}",
        )

    async def report(outcome: DagOutcome) -> None:
        if not done.done():
            done.set_result(outcome)

    supervising = Supervisor(clock=clock, on_crash=on_crash, on_dead_letter=on_dead_letter)
    async with supervising as supervisor:
        context = _context(setup, supervisor, providers)
        context.mcp = mcp
        rules = setup.document.workflow.permissions
        context.permissions = PermissionPolicy.of(
            setup.tool_policy, rules.allow, rules.deny, setup.added_policy
        )
        if document.workflow.options.isolation == WORKTREE_PER_STEP and setup.recording is None:
            context.worktrees = Worktrees(setup.run_id, document.base_dir)
        timer = _run_timeout(context, ending.timed_out)
        coordinator = CoordinatorActor(context, document)
        context.deliver = coordinator.deliver  # a post is placed (or refused) at once
        supervisor.spawn(COORDINATOR, lambda: coordinator, inbox_size=INBOX_SIZE)
        if document.workflow.loop is None:
            steps = document.workflow.steps
            supervisor.spawn(
                ROOT, lambda: DagController(context, document, steps, scope, None, report)
            )
        else:  # a workflow-level loop: the whole DAG re-runs at loop.N.<step>
            spawn_root_loop(context, document, scope, report)
        try:
            ending.outcome = await done
            if not ending.crashes:
                # Messages sent by the last steps are recorded before the result is.
                await supervisor.ask(COORDINATOR, Drain())
        finally:
            if timer is not None:
                timer.cancel()
        if ending.crashes:
            supervisor.cancel()
    return ending, context


def _context(setup: RunSetup, supervisor: Supervisor, providers: ProviderRegistry) -> RunContext:
    """The run's shared context, with a resumed run's waiting mail and agents' memories."""
    context = RunContext(
        **setup.shared(),
        supervisor=supervisor,
        limiter=Slots(setup.max_concurrency),
        step_ids=document_step_ids(setup.document),
        providers=providers,
        spawn_step=spawn_step,
    )
    control = setup.control
    control.context = context
    if setup.replay is not None:  # messages for steps not started yet; agents' memories
        context.mail.update(setup.replay.log.mail)
        context.mail_bytes.update(pending_bytes(context.mail))
        context.backlog = Backlog.of(context.mail)
        context.conversations.update(setup.replay.log.conversations)
    if control.cancel_reason is not None:
        context.cancel(control.cancel_reason)
    elif control.interrupt_reason is not None:
        context.cancel(control.interrupt_reason)
    return context


def _run_timeout(context: RunContext, timed_out: list[str]) -> Timer | None:
    """Starts the clock of ``options.timeout``, if the workflow has one."""
    limit = context.options.timeout
    if not limit:
        return None

    def expire() -> None:
        timed_out.append(limit)
        context.cancel(f"the run exceeded its timeout of {limit}")

    return context.clock.call_later(parse_duration(limit), expire)


async def _output(setup: RunSetup, context: RunContext, scope: Scope) -> Any:
    """The workflow's ``output`` expression over the root scope."""
    assert setup.document.workflow.output is not None
    expression = compile_expression(setup.document.workflow.output, step_ids=context.step_ids)
    names = scope.activation(setup.inputs)
    if expression.is_async:  # an async Python callable
        return await expression.evaluate_async(names)
    return expression.evaluate(names)


def report_undelivered(
    journal: RunJournal, mail: dict[str, deque[AgentMessage]]
) -> list[MessageRecord]:
    """Messages still waiting when the run ends: no instance of their step will take them.

    One ``message_undelivered`` event per target (with the count), and the newest
    `MAX_RESULT_MESSAGES` for the result's ``undelivered``.
    """
    undelivered: deque[MessageRecord] = deque(maxlen=MAX_RESULT_MESSAGES)
    for target, letters in mail.items():
        if not letters:
            continue
        journal.emit(
            EventType.MESSAGE_UNDELIVERED,
            step_id=target,
            message=f"{len(letters)} message(s) for {target!r}: no instance of it took them",
            data=MessageUndelivered(to=target, count=len(letters)),
        )
        for letter in letters:
            undelivered.append(
                MessageRecord(from_=letter.sender, to=target, text=letter.text, kind=letter.kind)
            )
    return list(undelivered)


def interrupted_result(journal: RunJournal, reason: str) -> RunResult:
    """What `execute_run` returns for a run interrupted before its end: status ``running``."""
    return journal.result("running", None, ErrorInfo(type="Interrupted", message=reason))


def _final_status(
    outcome: DagOutcome, control: RunControl, timed_out: list[str], crash: list[ErrorInfo]
) -> tuple[RunStatus, ErrorInfo | None]:
    if crash:
        return "failed", crash[0]
    if timed_out:
        message = f"the run exceeded its timeout of {timed_out[0]}"
        return "failed", ErrorInfo(type="Timeout", message=message)
    if control.cancel_reason is not None:
        return "cancelled", ErrorInfo(type="Cancelled", message=control.cancel_reason)
    status = _ENDINGS.get(outcome.status, "completed")
    return status, outcome.error if status != "completed" else None


_ENDINGS: dict[str, RunStatus] = {
    "failed": "failed",
    "cancelled": "cancelled",
    "waiting": "waiting",
}
"""How the root DAG's outcome ends the run (anything else: ``completed``)."""


def _plain(value: Any) -> Any:
    """Makes an output value plain JSON data (CEL may hand back its own types)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return msgspec.json.decode(msgspec.json.encode(value))
