"""A run's two sides: the `RunHandle` its caller holds, and the `DrivenRun` its runtime drives.

The caller waits for the result, reads the events, cancels, posts messages,
answers a person's question: that is `RunHandle`, the public face. The
runtime that drives the run needs more: the run's journal and controls, the
cancel scope and lease it runs under, whether the store holds it yet, and the
ways a run ends that no caller asks for (stopped by its deadline, abandoned in
a forced shutdown, its lease lost). That is `DrivenRun`, which `Runtime` keeps
per run and which made the handle; the handle only forwards to it. So the
runtime never reaches into the handle's private fields, and the handle's
public surface is what a caller may use, nothing more.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import anyio

from cadenza.actors import RunControl, RunJournal, interrupted_result
from cadenza.actors.run import POSTER
from cadenza.errors import CadenzaError
from cadenza.kernel import Clock, SystemClock, Timer
from cadenza.protocols import (
    FINISHED,
    ErrorInfo,
    Event,
    EventType,
    MessageRecord,
    RunResult,
    StepRecord,
    Tokens,
    WorkflowEnd,
)
from cadenza.store import Lease, RunStore

from ._resume import finished_result, get_row, record_signal
from ._subscription import ENDINGS, EventSubscription

__all__ = ["EVENT_BUFFER", "SHUTTING_DOWN", "DrivenRun", "RunHandle"]

EVENT_BUFFER = 10_000
"""Events a `RunHandle.events` subscriber may fall behind by before the oldest are dropped."""

SHUTTING_DOWN = "the runtime is shutting down"
"""Why the runs a shutdown interrupts stopped (the ``run_interrupted`` event's message)."""


class RunHandle:
    """A run in progress: its id, its events, its result, and a way to cancel it."""

    def __init__(self, run: DrivenRun) -> None:
        self.run_id = run.run_id
        self._run = run

    @property
    def done(self) -> bool:
        """True once the run has a result."""
        return self._run.done

    async def result(self) -> RunResult:
        """Waits for the run to end and returns its result JSON as a `RunResult`.

        A run interrupted by its runtime's shutdown has not ended: its result has
        status ``running`` and error type ``Interrupted``; `Runtime.resume` goes on.
        """
        return await asyncio.shield(self._run.result)

    @property
    def messages(self) -> list[MessageRecord]:
        """Every message carried between agents so far, in order."""
        return list(self._run.journal.messages)

    async def post_message(self, target: str, text: str, *, kind: str = "info") -> None:
        """Sends a message to a step, as the coordinator would, from ``api``.

        ``target`` is a bare step id (its newest instance) or an address; the
        message lands in that agent's next turn, or waits for the step's next
        instance. It is recorded (``message_sent``, the result's messages) and
        shown to the agent as from ``api``: the run's own coordinator did not
        send it. It is placed at once: a step whose own inbox is full drops it
        with a ``message_dropped`` event; a run that holds too much refuses it.

        Raises:
            MessageRefused: The run already holds `RUN_MAIL_SIZE` messages or
                `RUN_MAIL_BYTES` of text waiting for delivery, all its targets
                together, or the text is larger than a step's inbox holds
                (`INBOX_BYTES`). Nothing is recorded.
            CadenzaError: The run has not started its actors yet, or has ended.
        """
        context = self._run.control.context
        if context is None or self.done:
            raise CadenzaError(f"run {self.run_id!r} is not running; it cannot take messages")
        context.deliver(target, text, kind, sender=POSTER)

    def cancel(
        self, reason: str = "cancelled by the caller", *, deadline: float | None = None
    ) -> None:
        """Cancels the run; it ends ``cancelled`` (a final status: resume will not run it).

        Cancellation is cooperative: nothing new starts, and each running step's
        work is interrupted where it waits (an async handler gets
        ``CancelledError`` and may clean up, a command's process group is
        terminated, a thread handler is abandoned, a model call is dropped);
        the step is recorded ``cancelled`` and the run ends once every step has.

        Args:
            reason: Recorded as the run's and the steps' error message.
            deadline: Seconds (on the runtime's clock) the steps get to stop. A
                run still going then is stopped outright: its steps' tasks are
                cancelled repeatedly until they end, steps still unrecorded
                are recorded ``cancelled``, and the run ends ``cancelled``.
                None (the default) waits for the steps however long they take.
        """
        self._run.control.cancel(reason)
        if deadline is not None:
            self._run.stop_after(deadline)

    async def signal(self, address: str, data: Any) -> None:
        """Records a person's answer for this run's step waiting at ``address``.

        The run must have ended ``waiting``; `Runtime.resume` then continues it.

        Raises:
            SignalRejected: Nothing waits at ``address``, or ``data`` does not fit its schema.
            LeaseHeld: The run is still being driven.
        """
        await record_signal(self._run.store, self.run_id, address, data)

    def events(self, *, buffer: int = EVENT_BUFFER) -> EventSubscription:
        """Every event of the run, from its first, ending after ``workflow_end``.

        Subscribes at once. The events the store holds come first, then the live
        stream; a run interrupted by its runtime's shutdown ends with
        ``run_interrupted`` instead. A consumer slower than the run never slows
        it down: up to ``buffer`` live events wait for it; past that the oldest
        waiting one is dropped, `EventSubscription.statistics` counts it, and
        `Event.seq` shows the gap.

        Raises:
            ValueError: ``buffer`` is below 1.
        """
        run = self._run
        return EventSubscription(
            self.run_id,
            run.journal,
            run.store,
            run.result,
            resumed_after=run.resumed_after,
            buffer=buffer,
        )


class DrivenRun:
    """One run as the `Runtime` driving it sees it; ``handle`` is what its caller gets.

    The runtime sets ``scope`` and ``lease`` while the run executes, ``stored``
    once the store holds the run, and ``resumed_after`` for a resumed run (its
    log holds an earlier ``workflow_end``, a waiting run's, that is not the end).
    """

    def __init__(
        self,
        run_id: str,
        journal: RunJournal,
        store: RunStore,
        control: RunControl,
        clock: Clock | None = None,
    ) -> None:
        self.run_id = run_id
        self.journal = journal
        self.store = store
        self.control = control
        self.clock: Clock = clock or SystemClock()
        self.result: asyncio.Future[RunResult] = asyncio.get_running_loop().create_future()
        self.resumed_after = 0
        self.scope: anyio.CancelScope | None = None
        """The run's cancel scope while it executes: cancelling it stops the run outright."""
        self.lease: Lease | None = None
        """The lease the run is driven under."""
        self.stored = False
        """The store holds the run: its start (or resumption) committed."""
        self._ended = False  # this drive emitted its workflow_end (or run_interrupted)
        self._deadlines: list[Timer] = []
        self.handle = RunHandle(self)
        journal.subscribe(self._watch)

    @property
    def done(self) -> bool:
        """True once the run has a result."""
        return self.result.done()

    @property
    def takes_messages(self) -> bool:
        """The run's actors are up and it has not ended: a message can be placed now."""
        return not self.done and self.control.context is not None

    def when_ended(self, callback: Callable[[asyncio.Future[RunResult]], object]) -> None:
        """Calls ``callback`` with the result's future once the run has a result."""
        self.result.add_done_callback(callback)

    def interrupt(self, reason: str, *, deadline: float | None) -> None:
        """Stops the run like `RunHandle.cancel` but leaves it resumable (a shutdown)."""
        self.control.interrupt(reason)
        if deadline is not None:
            self.stop_after(deadline)

    def stop_after(self, seconds: float) -> None:
        """Stops the run outright once ``seconds`` pass on its clock, unless it ended."""
        if self.scope is not None and not self.done:
            self._deadlines.append(self.clock.call_later(seconds, self.scope.cancel))

    def lose(self) -> None:
        """The store found the run's lease lost: stop driving the run now."""
        if self.scope is not None and not self.done:
            self.scope.cancel()

    def _watch(self, event: Event) -> None:
        if event.type in ENDINGS:
            self._ended = True

    async def stopped_outright(self) -> RunResult:
        """Records the end of a run its deadline stopped outright (see `RunHandle.cancel`)."""
        journal, control, store = self.journal, self.control, self.store
        await store.flush(self.run_id)
        if self._ended:  # it had recorded its end already, only not returned yet
            row = await get_row(store, self.run_id)
            if row.status in FINISHED or row.status == "waiting":
                return finished_result(row)
            return interrupted_result(journal, control.interrupt_reason or SHUTTING_DOWN)
        if control.cancel_reason is None:  # interrupted: left as after a crash
            reason = control.interrupt_reason or SHUTTING_DOWN
            journal.emit(EventType.RUN_INTERRUPTED, message=reason)
            await store.flush(self.run_id)
            return interrupted_result(journal, reason)
        reason = control.cancel_reason
        for address, record in list(journal.records.items()):
            if record.status in ("running", "pending"):
                error = ErrorInfo(type="Cancelled", message=reason, address=address)
                stopped = StepRecord(status="cancelled", attempts=record.attempts, error=error)
                journal.records[address] = stopped
                store.put_step(self.run_id, address, stopped)
        result = journal.result("cancelled", None, ErrorInfo(type="Cancelled", message=reason))
        store.end_run(self.run_id, "cancelled", result)
        usage = result.usage
        total = usage.prompt_tokens + usage.completion_tokens
        journal.emit(
            EventType.WORKFLOW_END,
            message="cancelled",
            duration=time.monotonic() - journal.started,
            tokens=Tokens(usage.prompt_tokens, usage.completion_tokens, total),
            error=f"Cancelled: {reason}",
            data=WorkflowEnd(status="cancelled"),
        )
        await store.flush(self.run_id)
        return result

    def abandoned(self, error: BaseException) -> RunResult | BaseException:
        """What the result is of a run whose task was cancelled under it (a forced shutdown)."""
        reason = self.control.interrupt_reason
        if reason is None or self.control.cancel_reason is not None or self._ended:
            return error
        self.journal.emit(EventType.RUN_INTERRUPTED, message=reason)  # committed at the close
        return interrupted_result(self.journal, reason)

    def finish(self, result: RunResult | BaseException) -> None:
        """Gives the handle its result (or error), once; the deadlines are called off."""
        for deadline in self._deadlines:
            deadline.cancel()
        self._deadlines.clear()
        if self.result.done():
            return
        if isinstance(result, asyncio.CancelledError):
            # A cancelled future: awaiting it raises CancelledError, and nobody
            # awaiting it is not an "exception never retrieved" at exit.
            self.result.cancel(*result.args[:1])
        elif isinstance(result, BaseException):
            self.result.set_exception(result)
        else:
            self.result.set_result(result)
