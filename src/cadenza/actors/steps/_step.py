"""The step actor: runs one leaf step (command, handler, agent, tool) with retries and a timeout.

A `StepActor` is spawned under the step's address when its controller decides
the step should run. It executes as its ``on_start`` turn: waits for a run-wide slot,
runs the work under the step's timeout, retries a failure up to ``retries``
times, records the outcome durably, waits for the coordinator agent to answer
the messages the step sent (`Unanswered`), and only then reports `StepFinished`
to its controller and stops. Whatever goes wrong inside the work becomes the
step's recorded failure; only a bug in the actor itself would crash it.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any

from cadenza.actors.run import (
    MSG_TYPES,
    AgentMessage,
    PlacedActor,
    Placement,
    StepFailure,
    StepFinished,
    cancel_parked,
    work_error,
)
from cadenza.kernel import LoopBlocked, LoopWatchdog
from cadenza.protocols import (
    AgentInboxDrain,
    ErrorInfo,
    EventType,
    StepRecord,
    StepRetry,
    StepStatus,
    Tokens,
    WorktreeDone,
    WorktreeKept,
)
from cadenza.workflow import Step, parse_duration, parse_template

from ._agent import AgentVisit, run_agent
from ._command import command_result, run_command
from ._handler import Handler, StepContext, StepsView, call_handler, resolve_handler
from ._remote import remote_work
from ._tool_step import run_tool_step

__all__ = ["StepActor"]


_NOT_RUN = StepRecord(status="cancelled")
_ISOLATED = frozenset(("command", "tool", "agent"))
"""The kinds that can write files: each runs in its own worktree under worktree-per-step."""


class StepActor(PlacedActor):
    """Executes one leaf step under its address and reports the outcome."""

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement)
        self.kind = self.step.kind
        self._task: asyncio.Task[Any] | None = None
        self._cancel_reason: str | None = None
        self.worker: str | None = None
        """The remote worker that ran the latest attempt (None: this process)."""
        self.first_attempt = placement.first_attempt
        """The number of the first attempt: higher when a resumed run re-runs a step
        that was in flight, or a supervisor restarts it, so every execution has its
        own idempotency key."""

    async def receive(self, message: Any) -> None:
        """A step actor takes no messages while it runs its one piece of work."""

    def cancel(self, reason: str) -> None:
        """Cancels the running attempt; the step is recorded as ``cancelled``."""
        if self._cancel_reason is not None:
            return
        self._cancel_reason = reason
        cancel_parked(self._task, reason)

    async def on_start(self) -> None:
        """Runs the step to its final outcome, records it, reports it, and stops."""
        journal = self.run.journal
        address = str(self.address)
        active = self.run.active
        active.add(self)
        try:
            record = await self._execute(address)
        finally:
            active.discard(self)
        tokens = None
        if self.kind == "agent":
            prompt, completion = journal.take_usage(address)
            tokens = Tokens(prompt, completion, prompt + completion)
        await journal.step_finished(address, record, agent=self.step.agent, tokens=tokens)
        answers = self.run.unanswered.waiter(address)
        if answers is not None:  # what depends on this step starts after the forwards land
            await answers
        late = self.take_messages()  # a forward back to this step included
        if late:
            self._keep_late_messages(late)
        await self.report(StepFinished(self.step_id, record))
        self.stop()

    async def _execute(self, address: str) -> StepRecord:
        run = self.run
        step = self.step
        timeout = step.timeout or run.options.step_timeout
        seconds = parse_duration(timeout) if timeout else None
        attempts = self.first_attempt + step.retries
        limiter = run.limiter
        clock = run.clock
        record = _NOT_RUN
        for attempt in range(self.first_attempt, attempts + 1):
            if self._cancel_reason is not None or run.cancelled is not None:
                reason = self._cancel_reason or run.cancelled or "cancelled"
                cancelled = ErrorInfo(type="Cancelled", message=reason, address=address)
                return StepRecord(status="cancelled", attempts=attempt - 1, error=cancelled)
            if not limiter.take():
                await limiter.wait()
            try:
                started = clock.now()
                run.journal.leaf_started(address, self.kind, attempt, step.agent, self.position)
                status, content, result, error = await self._attempt(address, attempt, seconds)
                elapsed = clock.now() - started
            finally:
                limiter.give()
            record = StepRecord(
                status=status,
                content=content,
                result=result,
                attempts=attempt,
                duration_ms=int(elapsed * 1000),
                error=error,
                worker=self.worker,
            )
            if status != "failed" or attempt == attempts:
                break
            run.journal.emit(
                EventType.STEP_RETRY,
                step_id=address,
                error=f"{error.type}: {error.message}" if error is not None else None,
                data=StepRetry(attempt=attempt, of=attempts),
            )
        return record

    async def _attempt(
        self, address: str, attempt: int, seconds: float | None
    ) -> tuple[StepStatus, str | None, Any, ErrorInfo | None]:
        if self._cancel_reason is not None or self.run.cancelled is not None:
            reason = self._cancel_reason or self.run.cancelled or "cancelled"
            return "cancelled", None, None, ErrorInfo("Cancelled", reason, address)
        task = asyncio.current_task()
        assert task is not None
        # Cancellation of the work is the task's own: cheaper than a cancel scope per
        # step, and `cancel()` only fires it while the task is parked inside the work.
        self._task = task
        try:
            if self.run.dispatcher is not None:  # a worker runs it, and applies its timeout
                content, result = await remote_work(self, self.run.dispatcher, address, attempt)
            elif seconds is None:
                reference = self.step.handler
                if reference is not None:  # the common case, one coroutine frame fewer
                    call = self._handler_call(address, attempt, reference)
                    content, result = await call_handler(*call)
                else:
                    content, result = await self._work(address, attempt)
            else:
                # The loop's timer cannot fire while a handler blocks the loop: the
                # watchdog's thread enforces the same deadline (runtime/_watchdog.py).
                guard = LoopWatchdog.for_running_loop().guard(task, seconds)
                try:
                    with self.run.clock.fail_after(seconds):
                        content, result = await self._work(address, attempt)
                finally:
                    guard.release()
            return "completed", content, result, None
        except asyncio.CancelledError:
            if self._cancel_reason is None:
                raise  # the run itself is being torn down: not ours to swallow
            task.uncancel()
            return "cancelled", None, None, ErrorInfo("Cancelled", self._cancel_reason, address)
        except TimeoutError:
            message = f"timed out after {seconds:g}s"
            return "failed", None, None, ErrorInfo("Timeout", message, address)
        except LoopBlocked as blocked:
            message = f"timed out after {seconds:g}s: {blocked}"
            return "failed", None, None, ErrorInfo("Timeout", message, address)
        except StepFailure as failure:
            return "failed", failure.content, failure.result, failure.error
        except Exception as error:  # the step's own failure, recorded, not a crash
            return "failed", None, None, work_error(error, address)
        finally:
            self._task = None

    async def _work(self, address: str, attempt: int) -> tuple[str, Any]:
        worktrees = self.run.worktrees
        if worktrees is None or self.kind not in _ISOLATED:
            return await self._run_work(address, attempt)
        journal = self.run.journal
        shared = self.document
        async with worktrees.checkout(address, attempt) as worktree:
            self.document = replace(shared, base_dir=worktree.base_dir)
            try:
                outcome = await self._run_work(address, attempt)
            except BaseException:  # failed or cancelled: its files stay, for a person to see
                message = f"the step's worktree is kept for inspection: {worktree.path}"
                kept = WorktreeKept(path=str(worktree.path))
                journal.emit(EventType.WORKTREE_KEPT, step_id=address, message=message, data=kept)
                raise
            finally:
                self.document = shared
        done = WorktreeDone(branch=worktree.branch or None, commit=worktree.commit)
        journal.emit(EventType.WORKTREE_DONE, step_id=address, data=done)
        return outcome

    async def _run_work(self, address: str, attempt: int) -> tuple[str, Any]:
        step = self.step
        if step.command is not None:
            return await self._command(address, attempt, step.command)
        if step.handler is not None:
            return await call_handler(*self._handler_call(address, attempt, step.handler))
        if step.tool is not None:
            return await run_tool_step(self, address, attempt)
        if self.kind == "agent":
            return await self._agent(address)
        raise StepFailure(
            ErrorInfo(
                type="Unsupported",
                message=f"{step.kind!r} steps cannot run in this version of Cadenza yet",
                address=address,
            )
        )

    async def _agent(self, address: str) -> tuple[str, Any]:
        step = self.step
        outputs = self.scope.steps()
        depends_on = step.depends_on if isinstance(step, Step) else []
        outcome = await run_agent(
            self.run,
            self.document,
            AgentVisit(
                address=address,
                agent_name=step.agent,
                instructions=self._render(step.instructions or ""),
                scope=self.scope,
                brief=self.brief,
                step_model=step.model,
                dependencies=[(d, outputs[d]["content"]) for d in depends_on if d in outputs],
                context_files=step.context_files,
                drain_inbox=self._drain_inbox,
                max_retries=step.max_retries,
            ),
        )
        if outcome.error is not None:
            raise StepFailure(outcome.error, content=outcome.content or None, result=outcome.result)
        return outcome.content, outcome.result

    def _keep_late_messages(self, letters: list[Any]) -> None:
        """Messages that reached this instance after its last turn wait for the step's next one.

        The inbox belongs to the step, not to one iteration or visit (zenflow's
        loop-bidirectional behaviour); what no instance ever takes is reported
        as undelivered when the run ends.
        """
        late = [letter for letter in letters if isinstance(letter, AgentMessage)]
        if late:
            self.run.mail.setdefault(self.address.name, deque()).extend(late)

    def _drain_inbox(self) -> list[str]:
        """Messages for this step: kept for it before it started, then its inbox."""
        waiting = self.run.mail.pop(self.address.name, None) or ()
        letters = [*waiting, *self.take_messages()]
        texts = []
        drained = 0
        for letter in letters:
            if not isinstance(letter, AgentMessage):
                continue
            drained += len(letter.text.encode())
            self.run.journal.emit(
                EventType.AGENT_INBOX_DRAIN,
                step_id=str(self.address),
                agent=self.step.agent,
                data=AgentInboxDrain(from_=letter.sender, msg_type=MSG_TYPES.get(letter.kind, 0)),
            )
            texts.append(f"from {letter.sender} ({letter.kind}): {letter.text}")
        if drained:
            pending = self.run.mail_bytes
            pending[self.address.name] = pending.get(self.address.name, 0) - drained
        self.run.backlog.give_back(len(texts), drained)
        return texts

    def _render(self, text: str) -> str:
        template = parse_template(text, step_ids=self.run.step_ids)
        if template.is_static:
            return text
        return template.render(self.scope.activation(self.run.inputs))

    async def _command(
        self, address: str, attempt: int, command: str | list[str]
    ) -> tuple[str, Any]:
        step = self.step
        env = dict(os.environ)
        for name, value in (step.env or {}).items():
            env[name] = self._render(value)
        env["CADENZA_RUN_ID"] = self.run.run_id
        env["CADENZA_STEP_ADDRESS"] = address
        env["CADENZA_ATTEMPT"] = str(attempt)
        env["CADENZA_IDEMPOTENCY_KEY"] = f"{self.run.run_id}:{address}:{attempt}"
        stdin = self._render(step.stdin) if step.stdin is not None else None
        # In a worktree the step's own directory stands for the process's.
        default = self.document.base_dir if self.run.worktrees is not None else Path.cwd()
        cwd = self.document.base_dir / step.cwd if step.cwd else default
        outcome = await run_command(command, env=env, cwd=cwd, stdin=stdin)
        return command_result(outcome, address)

    def _handler_call(
        self, address: str, attempt: int, reference: str
    ) -> tuple[Handler, StepContext]:
        """The handler ``reference`` names, and the context it is called with."""
        run = self.run
        handler = resolve_handler(reference, self.document.base_dir)
        variables = self.scope.activation(run.inputs)
        context = StepContext(
            run_id=run.run_id,
            address=address,
            attempt=attempt,
            idempotency_key=f"{run.run_id}:{address}:{attempt}",
            inputs=variables["inputs"],
            steps=StepsView(variables["steps"]),
            workflow_dir=self.document.base_dir,
            item=variables.get("item"),
            index=variables.get("index"),
            iteration=variables.get("iteration"),
            brief=self.brief,
        )
        return handler, context
