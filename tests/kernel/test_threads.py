"""`call_in_thread`: blocking calls in daemon threads, abandoned when the caller stops waiting."""

from __future__ import annotations

import contextvars
import threading

import anyio
import pytest

from cadenza.kernel import call_in_thread

REQUEST = contextvars.ContextVar("REQUEST", default="none")


async def test_the_value_or_the_error_comes_back_to_the_caller() -> None:
    assert await call_in_thread(sum, [1, 2, 3]) == 6
    with pytest.raises(ZeroDivisionError):
        await call_in_thread(lambda: 1 / 0)


async def test_the_function_runs_in_a_daemon_thread_with_the_callers_context() -> None:
    REQUEST.set("r-1")

    def where() -> tuple[bool, bool, str]:
        thread = threading.current_thread()
        return thread is threading.main_thread(), thread.daemon, REQUEST.get()

    assert await call_in_thread(where) == (False, True, "r-1")


async def test_a_cancelled_caller_returns_at_once_and_the_call_runs_on() -> None:
    release, finished = threading.Event(), threading.Event()

    def blocked() -> str:
        release.wait()
        finished.set()
        return "too late"

    with anyio.move_on_after(0.05) as scope:  # the caller gives up; the thread cannot
        await call_in_thread(blocked)
    assert scope.cancelled_caught
    assert not finished.is_set()
    release.set()
    assert await anyio.to_thread.run_sync(finished.wait, 30)  # it ran on, unobserved
    assert await call_in_thread(lambda: "next") == "next"  # and nothing is left broken


async def test_an_idle_thread_takes_the_next_call() -> None:
    first = await call_in_thread(threading.get_ident)
    assert await call_in_thread(threading.get_ident) == first
