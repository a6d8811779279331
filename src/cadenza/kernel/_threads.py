"""Blocking calls in daemon threads, which a caller may abandon and nothing waits for.

A thread cannot be killed, and a function a step runs in one (a plain ``def``
handler) may never return. anyio's worker threads, like those of
``concurrent.futures``, are not daemon threads: the interpreter waits for every
one of them at exit. A run whose handler was stuck past its timeout was recorded
``failed`` at once, but ``cadenza run`` lived on until the function returned
(for ever, if it never did), and a Ctrl-C then printed a traceback from
``threading._shutdown``. `call_in_thread` runs the function in a daemon thread
instead: a caller that stops waiting (a timeout, a cancellation) abandons the
call, which runs on with its result discarded, and neither the run nor the
process waits for it.

Threads are reused: an idle one takes the next call, and ends after
`IDLE_SECONDS` without one. How many calls run at once is bounded by anyio's
default thread limiter, as for ``anyio.to_thread.run_sync``; an abandoned call
no longer counts. The function runs in a copy of the caller's context
variables. It is not an anyio worker thread: ``anyio.from_thread`` needs an
explicit token there.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import anyio.to_thread

__all__ = ["IDLE_SECONDS", "call_in_thread"]

T = TypeVar("T")

IDLE_SECONDS = 10.0
"""How long an idle worker thread waits for another call before it ends."""

_Job = tuple[
    contextvars.Context,
    Callable[..., Any],
    tuple[Any, ...],
    asyncio.AbstractEventLoop,
    "asyncio.Future[Any]",
]


async def call_in_thread(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` in a daemon worker thread; its value, or what it raised.

    Cancelling the caller returns at once: the call is abandoned (it runs on,
    its outcome discarded).
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    async with anyio.to_thread.current_default_thread_limiter():
        _Worker.take().jobs.put((contextvars.copy_context(), function, args, loop, future))
        return await future


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    """On the caller's loop: hands the outcome over, unless the caller stopped waiting."""
    if future.done():  # abandoned: nobody wants it
        return
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)


class _Worker:
    """A daemon thread running one call at a time, from its own queue."""

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _idle: ClassVar[list[_Worker]] = []  # most recently idle last: it is taken first

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        thread = threading.Thread(target=self._serve, name="cadenza worker", daemon=True)
        thread.start()

    @classmethod
    def take(cls) -> _Worker:
        """An idle worker, or a new one."""
        with cls._lock:
            if cls._idle:
                return cls._idle.pop()
        return cls()

    def _serve(self) -> None:
        while True:
            try:
                context, function, args, loop, future = self.jobs.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self in self._idle:  # nobody took it meanwhile: it ends
                        self._idle.remove(self)
                        return
                continue  # taken just as it timed out: its job is on the way
            value: Any = None
            error: BaseException | None = None
            try:
                value = context.run(function, *args)
            except BaseException as raised:  # delivered to the caller, as anyio does
                error = raised
            # Idle before the caller hears, so that its next call finds this thread.
            with self._lock:
                self._idle.append(self)
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(_settle, future, value, error)
            # Not kept alive while idle: the call's function, arguments and outcome.
            del context, function, args, loop, future, value, error

    @classmethod
    def forget_all(cls) -> None:
        """In a forked child: the parent's workers are not there."""
        cls._lock = threading.Lock()
        cls._idle = []


os.register_at_fork(after_in_child=_Worker.forget_all)
