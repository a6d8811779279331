"""The ready queue: runs actors' busy periods on the event loop without a task per actor.

An actor with nothing to do holds no task and no coroutine: its inbox keeps a
``_waker`` that, at the next message (or a stop), puts the actor on this ready
queue. One draining task runs the queued actors one after the other, each for
one busy period (``run_busy_period``: ``on_start`` for a new instance, then every message
waiting). A busy period that never awaits anything pending, which is most of
them, completes inside the draining task's own step: no task, no trip through
the event loop.

A busy period that suspends (a model call, a subprocess, a timer, a full inbox)
keeps the task it suspended in: the draining task becomes that actor's own task
until its inbox is empty, the actors still queued get a task each, and the next
message starts a new draining task. So the code of a turn always runs in the
one task it started in: what it saw of
``asyncio.current_task()`` and the anyio cancel scopes it entered stay true
across its awaits, and cancelling the actor cancels that task. (Stepping the
coroutine by hand and moving it to a fresh task when it suspends would break
exactly this, on Python 3.11 as on 3.12.)

Between bursts the draining task parks on a future, so that a message from
outside (an ask from the task that runs the workflow) costs a wake-up rather
than a new task; it ends once the supervisor closes and the queue is empty.

One actor is on the queue at most once, so the queue is bounded by the live
actors; an actor's messages are served by one busy period at a time, in inbox
order.
"""

from __future__ import annotations

import asyncio
import types
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

from ._consumer import run_busy_period

if TYPE_CHECKING:
    from ._ref import ActorRef

__all__ = ["ReadyQueue"]

_TURNS_PER_PASS = 64
"""Busy periods run back to back before the draining task lets the event loop
run the rest (I/O, timers, other tasks) once."""


class ReadyQueue:
    """The ready queue of one supervisor's actors and the task that drains it.

    Args:
        ended: Called after each of its tasks ended (``tasks`` is already
            lower), so the supervisor can tell when nothing of its is left.
    """

    __slots__ = ("_closed", "_draining", "_ended", "_parked", "_ready", "tasks")

    def __init__(self, ended: Callable[[], None]) -> None:
        self._ready: deque[ActorRef] = deque()
        self._draining: asyncio.Task[None] | None = None
        self._parked: asyncio.Future[None] | None = None  # the draining task's, while idle
        self._closed = False  # the supervisor is closing: drain, then end
        self._ended = ended
        self.tasks = 0
        """Tasks of this ready queue alive: the draining one, and those of suspended actors."""

    def schedule(self, ref: ActorRef) -> None:
        """Queue a busy period of ``ref`` (a new instance, a message, a stop)."""
        if ref._scheduled:
            return
        ref._scheduled = True
        self._ready.append(ref)
        if self._draining is None:
            self._draining = self._start()
        elif self._parked is not None:
            self._unpark()

    def close(self) -> None:
        """Let the draining task end once the queue is empty, rather than park."""
        self._closed = True
        if self._parked is not None:
            self._unpark()

    def _unpark(self) -> None:
        parked = self._parked
        self._parked = None
        if parked is not None and not parked.done():
            parked.set_result(None)

    def is_draining(self, task: asyncio.Task[Any] | None) -> bool:
        """Whether ``task`` is draining the queue (rather than serving a suspended actor)."""
        return task is self._draining

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        self.tasks += 1
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks -= 1
        self._ended()

    def _start(self) -> asyncio.Task[None]:
        return self._spawn(self._drain(), "cadenza ready queue")

    async def _drain(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        ready = self._ready
        loop = asyncio.get_running_loop()
        turns = 0
        try:
            while True:
                if not ready:
                    if self._closed:
                        return
                    turns = 0
                    self._parked = loop.create_future()
                    await self._parked
                    continue
                ref = ready.popleft()
                ref._scheduled = False
                if not ref._live:  # cancelled while it waited here
                    continue
                ref._task = task
                busy = run_busy_period(ref)
                try:
                    waiting = busy.send(None)
                except StopIteration:
                    if ref._task is task:
                        ref._task = None
                    turns += 1
                    if turns == _TURNS_PER_PASS:
                        turns = 0
                        await asyncio.sleep(0)
                    continue
                # The busy period suspended: from here this task is the actor's own.
                self._draining = None
                self._hand_out()
                if ref._cancel_pending:  # cancelled during its synchronous part
                    task.cancel()
                try:
                    await _resume(busy, waiting)
                finally:
                    if ref._task is task:
                        ref._task = None
                return
        finally:
            if self._draining is task:
                self._draining = self._parked = None
                self._hand_out()  # only if a BaseException ends this task mid-queue

    def _hand_out(self) -> None:
        """Give each actor still queued a task of its own, started in queue order.

        The actors queued behind a suspended busy period must start before that
        period resumes, as they would have with a task each: one new draining
        task would run them only after whatever the event loop has queued
        meanwhile. This costs what the consumer tasks did, and only when a busy
        period suspends with others queued: never on the in-memory hot paths.
        """
        ready = self._ready
        while ready:
            ref = ready.popleft()
            ref._scheduled = False
            if ref._live:
                ref._task = self._spawn(self._serve_alone(ref), ref._key)

    async def _serve_alone(self, ref: ActorRef) -> None:
        """One busy period of ``ref`` in a task of its own (``ref._task``)."""
        task = ref._task
        try:
            if ref._live:
                await run_busy_period(ref)
        finally:
            if ref._task is task:
                ref._task = None


@types.coroutine
def _resume(busy: Coroutine[Any, Any, None], waiting: Any) -> Generator[Any, Any, None]:
    """Await the rest of ``busy``, a coroutine stepped by hand until it yielded ``waiting``.

    What a plain ``await`` would do had the coroutine been awaited from the
    start: the task waits on what the coroutine yields, then resumes it (or
    throws the task's cancellation into it).
    """
    while True:
        try:
            yield waiting
        except BaseException as error:  # the task's cancellation, passed on
            try:
                waiting = busy.throw(error)
            except StopIteration:
                return
        else:
            try:
                waiting = busy.send(None)
            except StopIteration:
                return
