"""The step actor: runs one leaf step (command, handler, agent, tool...) with retries and a timeout.

A `StepActor` is spawned under the step's address when its controller decides
the step should run. It executes as its ``on_start`` turn: waits for a run-wide slot,
runs the work under the step's timeout, retries a failure up to ``retries``
times, records the outcome durably, waits for the coordinator agent to answer
the messages the step sent (`Unanswered`), and only then reports `StepFinished`
to its controller and stops. Whatever goes wrong inside the work becomes the
step's recorded failure; only a bug in the actor itself would crash it.

What the work is belongs to the step's kind (`LeafWork`, found by `leaf_work`):
its work here, or the work order a worker runs instead (``_remote``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import replace
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
from cadenza.workflow import parse_duration, parse_template

from ._leaf import LeafWork
from ._remote import remote_work

__all__ = ["StepActor"]


_NOT_RUN = StepRecord(status="cancelled")


class StepActor(PlacedActor):
    """Executes one leaf step under its address and reports the outcome."""

    def __init__(self, placement: Placement, kind: str, work: LeafWork | None) -> None:
        """``kind`` is the step's (`Step.kind`), ``work`` what a run does with it
        (`leaf_work`; None: nothing, in this process): its spawner knows both."""
        super().__init__(placement)
        self.kind = kind
        self.work = work
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
        tokens = cost = None
        if self.work is not None and self.work.spends_tokens:
            prompt, completion, cost = journal.take_usage(address)
            tokens = Tokens(prompt, completion, prompt + completion)
        work = self.work
        decided = work is not None and not work.effects and self.worker is None
        await journal.step_finished(
            address, record, agent=self.step.agent, tokens=tokens, cost=cost, decision=decided
        )
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
        isolated = self.work is not None and self.work.isolated
        direct = seconds is None and (run.worktrees is None or not isolated)
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
                status, content, result, error = await self._attempt(
                    address, attempt, seconds, direct
                )
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
        self, address: str, attempt: int, seconds: float | None, direct: bool
    ) -> tuple[StepStatus, str | None, Any, ErrorInfo | None]:
        """One execution of the work; *direct* when it needs no timeout guard and no
        worktree, so it runs as a plain await."""
        if self._cancel_reason is not None or self.run.cancelled is not None:
            reason = self._cancel_reason or self.run.cancelled or "cancelled"
            return "cancelled", None, None, ErrorInfo("Cancelled", reason, address)
        task = asyncio.current_task()
        assert task is not None
        # Cancellation of the work is the task's own: cheaper than a cancel scope per
        # step, and `cancel()` only fires it while the task is parked inside the work.
        self._task = task
        try:
            work = self.work
            if work is None:
                raise self._unsupported(address)
            run = self.run
            dispatcher = run.dispatcher
            if (
                dispatcher is not None
                and (order := work.order(self, address, attempt, seconds)) is not None
            ):  # a worker runs it (None: this kind runs it here), and applies the timeout
                await run.journal.settle()  # whatever it does there, it is an effect here
                content, result = await remote_work(self, dispatcher, order)
            else:
                if work.effects:
                    await run.journal.settle()
                if direct:
                    content, result = await work.work(self, address, attempt)  # the common case
                else:
                    content, result = await self._guarded(work, address, attempt, seconds, task)
            return "completed", content, result, None
        except asyncio.CancelledError:
            if self._cancel_reason is None:
                raise  # the run itself is being torn down: not ours to swallow
            task.uncancel()
            return "cancelled", None, None, ErrorInfo("Cancelled", self._cancel_reason, address)
        except LoopBlocked as blocked:  # a BaseException: user code cannot swallow it
            message = f"timed out after {seconds:g}s: {blocked}"
            return "failed", None, None, ErrorInfo("Timeout", message, address)
        except Exception as error:  # the step's own failure, recorded, not a crash
            return _failed(error, address, seconds)
        finally:
            self._task = None

    def _unsupported(self, address: str) -> StepFailure:
        """Why this step cannot run: no kind of its name that runs is registered in this
        process (a run resumed without the kind its document uses, say)."""
        message = (
            f"{self.kind!r} steps cannot run in this process: no such kind of step is "
            "registered here (register_step_kind, CADENZA_STEP_KINDS)"
        )
        return StepFailure(ErrorInfo(type="Unsupported", message=message, address=address))

    async def _guarded(
        self,
        work: LeafWork,
        address: str,
        attempt: int,
        seconds: float | None,
        task: asyncio.Task[Any],
    ) -> tuple[str, Any]:
        """The kind's work under the step's timeout, in a worktree of its own when it
        writes files under ``worktree-per-step``."""
        isolated = work.isolated and self.run.worktrees is not None
        if seconds is None:
            return await self._isolated(work, address, attempt)
        # The loop's timer cannot fire while a handler blocks the loop: the
        # watchdog's thread enforces the same deadline (runtime/_watchdog.py).
        guard = LoopWatchdog.for_running_loop().guard(task, seconds)
        try:
            with self.run.clock.fail_after(seconds):
                if isolated:
                    return await self._isolated(work, address, attempt)
                return await work.work(self, address, attempt)
        finally:
            guard.release()

    async def _isolated(self, work: LeafWork, address: str, attempt: int) -> tuple[str, Any]:
        """The kind's work in a git worktree of its own (``worktree-per-step``)."""
        worktrees = self.run.worktrees
        assert worktrees is not None
        journal = self.run.journal
        shared = self.document
        async with worktrees.checkout(address, attempt) as worktree:
            self.document = replace(shared, base_dir=worktree.base_dir)
            try:
                outcome = await work.work(self, address, attempt)
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

    def _keep_late_messages(self, letters: list[Any]) -> None:
        """Messages that reached this instance after its last turn wait for the step's next one.

        The inbox belongs to the step, not to one iteration or visit (zenflow's
        loop-bidirectional behaviour); what no instance ever takes is reported
        as undelivered when the run ends.
        """
        late = [letter for letter in letters if isinstance(letter, AgentMessage)]
        if late:
            self.run.mail.setdefault(self.address.name, deque()).extend(late)

    def drain_inbox(self) -> list[str]:
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

    def render(self, text: str) -> str:
        """``text`` with its templates filled in from the step's scope and the run's inputs."""
        template = parse_template(text, step_ids=self.run.step_ids)
        if template.is_static:
            return text
        return template.render(self.scope.activation(self.run.inputs))


def _failed(
    error: Exception, address: str, seconds: float | None
) -> tuple[StepStatus, str | None, Any, ErrorInfo | None]:
    """What an attempt that raised ``error`` records (``seconds``: its timeout)."""
    if isinstance(error, StepFailure):
        return "failed", error.content, error.result, error.error
    if isinstance(error, TimeoutError):
        return "failed", None, None, ErrorInfo("Timeout", f"timed out after {seconds:g}s", address)
    return "failed", None, None, work_error(error, address)
