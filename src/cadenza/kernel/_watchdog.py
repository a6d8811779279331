"""A watchdog outside the event loop: interrupts a task that holds the loop past its deadline.

A step's timeout is a timer on the event loop, so it cannot fire while the loop is
blocked: an ``async def`` handler that calls ``time.sleep(3600)`` (or spins in pure
Python) would hold every run of the process for an hour. `LoopWatchdog` watches from
a thread. The loop ticks a heartbeat every ``interval`` seconds; a task guarded with
`LoopWatchdog.guard` has a deadline. When the heartbeat is stale (the loop has not
ticked for ``stall`` seconds) and the task holding the loop is a guarded task past
its own deadline, the watchdog interrupts it:

* loop on the main thread: it sends ``signum`` (SIGUSR2) to the main thread; the
  Python handler raises `LoopBlocked` where that task is executing, which also
  wakes a blocking ``time.sleep`` (the system call returns with EINTR);
* loop on another thread: it schedules `LoopBlocked` in that thread with
  ``PyThreadState_SetAsyncExc``, which pure-Python code sees at its next bytecode
  (a blocking C call is not woken).

`LoopBlocked` derives from ``BaseException``, so a handler's ``except Exception``
does not swallow it; the step machinery records it as a ``Timeout`` failure. The
handler is installed only if SIGUSR2 has no handler yet (an application's own
handler is kept, and the thread fallback used instead). One watchdog serves each
event loop (`LoopWatchdog.for_running_loop`); its thread ends when the loop closes.
"""

from __future__ import annotations

import asyncio
import ctypes
import signal
import threading
import time
import weakref
from dataclasses import dataclass, field
from types import FrameType
from typing import ClassVar

from cadenza._logging import get_logger

__all__ = ["LoopBlocked", "LoopGuard", "LoopWatchdog"]

_log = get_logger("cadenza.kernel")


class LoopBlocked(BaseException):
    """Raised inside a task that held the event loop past its deadline.

    A control signal, not an error of the task's own making: it derives from
    ``BaseException`` (like ``KeyboardInterrupt``) so a blanket ``except
    Exception`` in user code does not swallow it. The step that ran the task is
    recorded ``failed`` with a ``Timeout`` error carrying this message.
    """


@dataclass(eq=False, slots=True)
class LoopGuard:
    """A registered deadline for one task; `release` it when the guarded work ends."""

    task: asyncio.Task[object]
    deadline: float
    seconds: float
    watchdog: LoopWatchdog = field(repr=False)

    def release(self) -> None:
        """The work ended: stop watching this deadline. Idempotent."""
        self.watchdog._guards.discard(self)


class LoopWatchdog:
    """Watches one event loop from a daemon thread (see the module docstring).

    Args:
        loop: The loop to watch.
        interval: Seconds between heartbeats and between checks.
        stall: Seconds without a heartbeat that count as a blocked loop.
        signum: The signal used to interrupt a loop on the main thread.
    """

    _instances: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWatchdog]] = (
        weakref.WeakKeyDictionary()
    )
    _installed: ClassVar[bool] = False
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        interval: float = 0.1,
        stall: float = 0.25,
        signum: int | None = getattr(signal, "SIGUSR2", None),  # None: no signals (Windows)
    ) -> None:
        self._loop = weakref.ref(loop)
        self._interval = interval
        self._stall = stall
        self._signum = signum
        self._guards: set[LoopGuard] = set()
        self._beat = time.monotonic()
        self._victim: asyncio.Task[object] | None = None
        self._message = ""
        self._loop_thread = threading.get_ident()
        self._stopped = threading.Event()
        self.interruptions = 0
        """How many times the watchdog interrupted a task (for tests and statistics)."""
        self._use_signal = (
            threading.current_thread() is threading.main_thread() and self._install_handler()
        )
        loop.call_soon(self._tick)
        self._thread = threading.Thread(
            target=self._watch, name="cadenza-loop-watchdog", daemon=True
        )
        self._thread.start()

    @classmethod
    def for_running_loop(cls) -> LoopWatchdog:
        """The watchdog of the running loop, started on first use."""
        loop = asyncio.get_running_loop()
        watchdog = cls._instances.get(loop)
        if watchdog is None or watchdog._stopped.is_set():
            watchdog = cls._instances[loop] = cls(loop)
        return watchdog

    def guard(self, task: asyncio.Task[object], seconds: float) -> LoopGuard:
        """Watch ``task`` until the returned guard is released; its deadline is ``seconds`` away."""
        entry = LoopGuard(task, time.monotonic() + seconds, seconds, self)
        self._guards.add(entry)
        return entry

    def stop(self) -> None:
        """Stop watching; the thread ends within one interval."""
        self._stopped.set()

    # The loop's side ----------------------------------------------------------

    def _tick(self) -> None:
        self._beat = time.monotonic()
        loop = self._loop()
        if loop is not None and not self._stopped.is_set():
            loop.call_later(self._interval, self._tick)

    def _install_handler(self) -> bool:
        if self._signum is None:
            return False
        with LoopWatchdog._lock:
            if LoopWatchdog._installed:
                return True
            if signal.getsignal(self._signum) not in (signal.SIG_DFL, None):
                return False  # the application's own handler stays
            signal.signal(self._signum, _on_signal)
            LoopWatchdog._installed = True
            return True

    def _raise_if_victim(self) -> None:
        """In the loop's thread: raise `LoopBlocked` if the running task is the victim."""
        victim = self._victim
        if victim is None:
            return
        try:
            current = asyncio.current_task()
        except RuntimeError:
            return
        if current is victim and any(g.task is victim for g in self._guards):
            self._victim = None
            self.interruptions += 1
            raise LoopBlocked(self._message)

    # The watching thread ------------------------------------------------------

    def _watch(self) -> None:
        while not self._stopped.wait(self._interval):
            loop = self._loop()
            if loop is None or loop.is_closed():
                self._stopped.set()
                return
            now = time.monotonic()
            stalled = now - self._beat
            if stalled < self._stall or not self._guards:
                continue
            current = asyncio.current_task(loop)  # a dict lookup: safe from this thread
            held = next((g for g in list(self._guards) if g.task is current), None)
            if held is None or held.deadline > now:
                # Held by code that is not a step, or by a step still within its own
                # timeout: nothing to enforce (a starved step times out once it runs).
                continue
            self._message = (
                f"blocked the event loop for {stalled:.1f}s, past its timeout of "
                f"{held.seconds:g}s (the watchdog interrupted it)"
            )
            self._victim = held.task
            _log.warning("loop_blocked", stalled_s=round(stalled, 2), timeout_s=held.seconds)
            self._interrupt()
            # Give the interrupt time to land before trying again.
            self._stopped.wait(max(self._stall, self._interval))

    def _interrupt(self) -> None:
        if self._use_signal and self._signum is not None:
            signal.pthread_kill(threading.main_thread().ident or 0, self._signum)
            return
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(self._loop_thread), ctypes.py_object(_AsyncLoopBlocked)
        )


class _AsyncLoopBlocked(LoopBlocked):
    """Raised by ``PyThreadState_SetAsyncExc`` (which can only pass a class)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args or ("blocked the event loop past a step timeout",))


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """The SIGUSR2 handler: interrupts the victim if this thread's loop has one."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    watchdog = LoopWatchdog._instances.get(loop)
    if watchdog is not None:
        watchdog._raise_if_victim()
