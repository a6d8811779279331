"""The per-attempt deadline against cancellation from outside, and the task it leaves behind."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVarTuple, Unpack

import anyio
import httpx
import pytest

from cadenza.kernel import FakeClock, Timer
from cadenza.llm import LLMRequest, LLMTimeout, Message, ProviderRegistry, RetryPolicy

Ts = TypeVarTuple("Ts")

HI = LLMRequest("gpt-test", (Message("user", "hi"),))
ENV = {"OPENAI_API_KEY": "test-key"}
OK = {"choices": [{"message": {"content": "ok"}}]}


def _hanging() -> httpx.MockTransport:
    never = asyncio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        await never.wait()
        raise AssertionError("unreachable")

    return httpx.MockTransport(hang)


def _registry(clock: FakeClock, transport: httpx.AsyncBaseTransport) -> ProviderRegistry:
    policy = RetryPolicy(max_attempts=1, deadline=30.0)
    return ProviderRegistry(environ=ENV, clock=clock, policy=policy, transport=transport)


async def test_a_timed_out_attempt_leaves_its_task_uncancelled() -> None:
    """After an LLMTimeout the task has no cancellation pending: it can go on awaiting."""
    clock = FakeClock()

    async def call_then_sleep() -> int:
        with pytest.raises(LLMTimeout):
            await providers.client("openai").complete(HI)
        await asyncio.sleep(0)  # a leftover cancellation would land here
        return asyncio.current_task().cancelling()  # type: ignore[union-attr]

    async with _registry(clock, _hanging()) as providers:
        task = asyncio.create_task(call_then_sleep())
        await clock.advance(30.0)
        assert await task == 0
        assert clock.pending == 0


async def test_a_cancelled_call_is_cancelled_not_timed_out() -> None:
    """Cancelling the caller's task mid-attempt propagates; the deadline timer is withdrawn."""
    clock = FakeClock()
    async with _registry(clock, _hanging()) as providers:
        task = asyncio.create_task(providers.client("openai").complete(HI))
        await clock.advance(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert clock.pending == 0


class _HeldClock(FakeClock):
    """A fake clock that also hands the test its timers' callbacks, to fire by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.callbacks: list[Callable[[], object]] = []

    def call_later(
        self, seconds: float, callback: Callable[[Unpack[Ts]], object], *args: *Ts
    ) -> Timer:
        self.callbacks.append(lambda: callback(*args))
        return super().call_later(seconds, callback, *args)


@pytest.mark.parametrize("outside", ["task.cancel", "anyio scope"])
async def test_a_cancellation_in_the_same_moment_as_the_deadline_wins(outside: str) -> None:
    """The deadline and a cancellation from outside land together: the caller is cancelled."""
    clock = _HeldClock()
    scopes: list[anyio.CancelScope] = []
    reached: list[str] = []

    async def guarded() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await providers.client("openai").complete(HI)
        reached.append("after the scope")

    async with _registry(clock, _hanging()) as providers:
        task = asyncio.create_task(guarded())
        await clock.advance(1.0)
        (deadline,) = clock.callbacks
        deadline()  # the attempt's deadline fires...
        if outside == "task.cancel":  # ...and in the same step, a cancellation from outside
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            scopes[0].cancel()
            await task
            assert reached == ["after the scope"]  # cancelled; no LLMTimeout escaped it


async def test_a_deadline_inside_move_on_after_is_a_timeout() -> None:
    """A caller's generous anyio deadline does not mask the attempt's own."""
    clock = FakeClock()
    async with _registry(clock, _hanging()) as providers:

        async def call() -> None:
            with anyio.move_on_after(3600):
                await providers.client("openai").complete(HI)

        task = asyncio.create_task(call())
        await clock.advance(30.0)
        with pytest.raises(LLMTimeout, match="longer than the 30 s deadline"):
            await task


async def test_an_answer_in_time_cancels_the_deadline() -> None:
    """A prompt answer leaves no timer behind and no cancellation on the task."""
    clock = FakeClock()
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=OK))
    async with _registry(clock, transport) as providers:
        completion = await providers.client("openai").complete(HI)
        assert completion.content == "ok"
        assert clock.pending == 0
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
