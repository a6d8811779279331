"""One busy period of an actor instance: its start, the messages waiting, its exit.

The ready queue (``_ready_queue.py``) runs ``run_busy_period`` when an idle actor gets a
message, and when a new instance is started. ``run_busy_period`` takes messages while
the inbox holds any and returns once it is empty, leaving the inbox a
``_waker`` to schedule the next busy period: an idle actor is its inbox and
its instance, with no coroutine and no task.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ._actor import Actor, ActorState
from ._ref import _Ask

if TYPE_CHECKING:
    from ._inbox import Inbox
    from ._ref import ActorRef

__all__ = ["exit_actor", "run_busy_period"]

_STARTING = ActorState.STARTING
_RUNNING = ActorState.RUNNING
_STOPPING = ActorState.STOPPING
_NO_HOOK = Actor.on_stop


async def run_busy_period(ref: ActorRef) -> None:
    """Serve the instance behind ``ref`` until its inbox is empty or it ends.

    The first busy period of an instance runs ``on_start``. The instance ends
    after a requested stop (``on_stop`` runs), after a crash once
    ``on_failure`` ran, or when cancelled (re-raised if it is this task's
    cancellation). Whichever way it ends, the supervisor hears of it through
    ``Supervisor._child_exited`` exactly once, as the last act here.
    """
    inbox = ref._inbox
    current: _Ask | None = None  # the ask being handled, to fail if we are cancelled
    item: Any = None
    actor = None
    error: BaseException | None = None
    try:
        actor = ref._actor if ref._actor is not None else ref._instantiate()
        if not ref._started:
            ref._started = True
            await actor.on_start()
            if ref._state is _STARTING:
                ref._state = _RUNNING
        while not ref._stop_requested:
            if ref._cancel_pending:
                exit_actor(ref, inbox, None, None, cancelled=True)
                return
            # The inbox's own fields, not its methods: this loop runs for every message.
            items = inbox._items
            if not items:
                if inbox._closed:
                    break
                inbox._items = None  # idle: hold no empty 760 B deque
                inbox._waker = ref._wake  # and the next message schedules a busy period
                return
            item = items.popleft()
            if inbox._putters:
                inbox._wake_putter()
            if type(item) is _Ask:
                current, item = item, None
                await _answer(actor, current)
                current = None
            else:
                await actor.receive(item)
                item = None  # an idle actor must not keep its last message alive
        if ref._cancel_pending:  # a cancelled actor runs no hook
            exit_actor(ref, inbox, None, None, cancelled=True)
            return
        ref._state = _STOPPING
        if type(actor).on_stop is not _NO_HOOK:  # most actors have none: spare the frame
            await actor.on_stop()
    except (Exception, asyncio.CancelledError) as exc:
        if _cancelled(exc):
            exit_actor(ref, inbox, current, None, cancelled=True)
            raise
        error = exc
    if error is not None and actor is not None:
        error = await _fail(ref, inbox, actor, error, current)
    exit_actor(ref, inbox, None, error, cancelled=False)


async def _answer(actor: Actor, ask: _Ask) -> None:
    """Handles an ask: its reply is what ``receive`` returns (unless the asker gave up)."""
    if ask.reply.done():  # the asker gave up before we got to it
        return
    result = await actor.receive(ask.message)
    if not ask.reply.done():
        ask.reply.set_result(result)


async def _fail(
    ref: ActorRef, inbox: Inbox[Any], actor: Actor, error: BaseException, asked: _Ask | None
) -> BaseException:
    """Ends an instance that crashed (answering the ``asked`` it crashed on with the error)
    once ``on_failure`` ran; returns what it ended with.

    That is ``error``, or the hook's own error if it raised one (chained to it). A
    cancellation while the hook runs ends the instance as cancelled.
    """
    if asked is not None and not asked.reply.done():
        asked.reply.set_exception(error)
    ref._state = ActorState.FAILED
    inbox.close()
    try:
        await actor.on_failure(error)
    except (Exception, asyncio.CancelledError) as hook_error:
        if _cancelled(hook_error):
            exit_actor(ref, inbox, None, error, cancelled=True)
            raise
        hook_error.__context__ = hook_error.__context__ or error
        return hook_error
    return error


def _cancelled(error: BaseException) -> bool:
    """Whether ``error`` is this task being cancelled, not a stray CancelledError from user code."""
    if not isinstance(error, asyncio.CancelledError):
        return False
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def exit_actor(
    ref: ActorRef,
    inbox: Inbox[Any],
    current: _Ask | None,
    error: BaseException | None,
    *,
    cancelled: bool,
) -> None:
    """Refuse what is left in the inbox, settle the state, and tell the supervisor."""
    if not inbox._closed:  # a stop closed it already, the common end
        inbox.close()
    ref._state = ActorState.FAILED if error is not None else ActorState.STOPPED
    supervisor = ref._supervisor
    if current is None and not inbox._items:  # the common end: nothing asked, nothing queued
        supervisor._child_exited(ref, error, cancelled=cancelled)
        return
    left = inbox.drain()
    how = "was cancelled" if cancelled else "crashed" if error is not None else "stopped"
    if current is not None and not current.reply.done():
        current.reply.set_exception(ref._stopped(current.message, how))
    for item in left:
        if type(item) is _Ask:
            if not item.reply.done():
                item.reply.set_exception(ref._stopped(item.message, how))
        else:
            supervisor._dead_letter(ref._address, item, f"actor {how}")
    supervisor._child_exited(ref, error, cancelled=cancelled)
