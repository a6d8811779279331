"""Retries end to end: backoff, Retry-After, resets, slow bodies and giving up."""

from __future__ import annotations

import asyncio
import random
import socket

import httpx
import pytest

from cadenza.kernel import Clock, FakeClock, SystemClock
from cadenza.llm import (
    Completion,
    LLMConnectionError,
    LLMHTTPError,
    LLMRequest,
    LLMTimeout,
    Message,
    ProviderRegistry,
    RetryPolicy,
)
from cadenza.testing import ScriptedLLMServer, ScriptedTransport, ServerRule
from cadenza.testing.pytest_plugin import StartLLMServer

POLICY = RetryPolicy(max_attempts=3, base_delay=0.5, max_delay=10.0, deadline=10.0)
HI = LLMRequest("gpt-test", (Message("user", "hi"),))
OK = {"choices": [{"message": {"content": "ok"}}]}
ENV = {"OPENAI_API_KEY": "test-key"}


async def call(
    server: ScriptedLLMServer,
    clock: Clock,
    *,
    policy: RetryPolicy = POLICY,
    retries: list[tuple[int, str]] | None = None,
) -> Completion:
    hook = None if retries is None else lambda attempt, reason: retries.append((attempt, reason))
    provider = "openai" if "OPENAI_BASE_URL" in server.environ() else "anthropic"
    async with ProviderRegistry(environ=server.environ(), clock=clock, policy=policy) as providers:
        return await providers.client(provider).complete(HI, on_retry=hook)


async def test_429_waits_as_long_as_retry_after(
    llm_server: StartLLMServer, clock: Clock, sleeps: list[float]
) -> None:
    """A 429 with Retry-After: 2 is retried after exactly 2 s, and both attempts count."""
    server = llm_server([ServerRule([{"status": 429, "headers": {"Retry-After": "2"}}, "ok"])])
    retries: list[tuple[int, str]] = []
    completion = await call(server, clock, retries=retries)
    assert completion.content == "ok"
    assert completion.attempts == 2
    assert sleeps == [2.0]
    assert retries == [(1, "HTTP 429")]
    assert len(server.requests) == 2


async def test_retry_after_is_capped_at_max_delay(
    llm_server: StartLLMServer, clock: Clock, sleeps: list[float]
) -> None:
    """A Retry-After longer than max_delay waits max_delay."""
    server = llm_server([ServerRule([{"status": 503, "headers": {"Retry-After": "3600"}}, "ok"])])
    await call(server, clock)
    assert sleeps == [10.0]


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [
        ("soon", None),
        ("Thu, 01 Jan 2099 00:00:00 GMT", 10.0),
        ("Mon, 01 Jan 2001 00:00:00 GMT", 0.0),
    ],
)
async def test_retry_after_http_date(
    retry_after: str, expected: float | None, clock: Clock, sleeps: list[float]
) -> None:
    """Retry-After as an HTTP-date waits until then (capped); an unreadable one means backoff."""
    http = ScriptedTransport(httpx.Response(429, headers={"Retry-After": retry_after}), OK)
    async with ProviderRegistry(environ=ENV, clock=clock, policy=POLICY, transport=http) as p:
        assert (await p.client("openai").complete(HI)).attempts == 2
    if expected is None:
        assert 0.0 <= sleeps[0] <= POLICY.base_delay
    else:
        assert sleeps == [expected]


async def test_the_wait_runs_on_the_run_clock() -> None:
    """With a FakeClock the retry happens when fake time reaches Retry-After, not before."""
    clock = FakeClock()
    http = ScriptedTransport(httpx.Response(429, headers={"Retry-After": "2"}), OK)
    async with ProviderRegistry(environ=ENV, clock=clock, policy=POLICY, transport=http) as p:
        task = asyncio.create_task(p.client("openai").complete(HI))
        await clock.advance(1.9)
        assert not task.done()
        assert len(http.requests) == 1
        await clock.advance(0.1)
        assert task.done()
        assert (await task).attempts == 2
    assert len(http.requests) == 2


async def test_server_error_then_success(
    llm_server: StartLLMServer, clock: Clock, sleeps: list[float]
) -> None:
    """A 500 is retried after a jittered wait of at most base_delay."""
    server = llm_server([ServerRule([{"status": 500}, "ok"])])
    completion = await call(server, clock)
    assert (completion.content, completion.attempts) == ("ok", 2)
    assert len(sleeps) == 1
    assert 0.0 <= sleeps[0] <= POLICY.base_delay


async def test_connection_reset_then_success(llm_server: StartLLMServer, clock: Clock) -> None:
    """A connection dropped without an answer is retried."""
    server = llm_server([ServerRule([{"reset": True}, "ok"])])
    retries: list[tuple[int, str]] = []
    completion = await call(server, clock, retries=retries)
    assert (completion.content, completion.attempts) == ("ok", 2)
    assert retries[0][1].startswith("connection error")


async def test_anthropic_overloaded_then_success(llm_server: StartLLMServer, clock: Clock) -> None:
    """The Anthropic provider retries a 529 (overloaded) like any 5xx."""
    server = llm_server([ServerRule([{"status": 529}, "ok"])], wire="anthropic")
    completion = await call(server, clock)
    assert (completion.content, completion.attempts) == ("ok", 2)


async def test_giving_up_raises_the_last_status(
    llm_server: StartLLMServer, clock: Clock, sleeps: list[float]
) -> None:
    """After max_attempts 503s the call raises LLMHTTPError with every attempt counted."""
    server = llm_server([ServerRule([{"status": 503}])])
    with pytest.raises(LLMHTTPError) as caught:
        await call(server, clock)
    assert caught.value.status == 503
    assert caught.value.attempts == 3
    assert "HTTP 503 (after 3 attempts): scripted failure" in str(caught.value)
    assert len(server.requests) == 3
    assert len(sleeps) == 2
    assert all(0.0 <= wait <= POLICY.base_delay * 2**n for n, wait in enumerate(sleeps))


async def test_client_errors_are_not_retried(
    llm_server: StartLLMServer, clock: Clock, sleeps: list[float]
) -> None:
    """A 401 fails at once: no wait, one request."""
    server = llm_server([ServerRule([{"status": 401}, "ok"])])
    with pytest.raises(LLMHTTPError) as caught:
        await call(server, clock)
    assert (caught.value.status, caught.value.attempts) == (401, 1)
    assert sleeps == []
    assert len(server.requests) == 1


async def test_trickling_body_hits_the_deadline(llm_server: StartLLMServer) -> None:
    """A server sending one byte every 0.2 s fails the 0.5 s attempt deadline with LLMTimeout."""
    server = llm_server([ServerRule([{"content": "x" * 500, "trickle": 0.2}])])
    policy = RetryPolicy(max_attempts=1, deadline=0.5)
    with pytest.raises(LLMTimeout) as caught:
        await call(server, SystemClock(), policy=policy)
    assert "longer than the 0.5 s deadline" in str(caught.value)
    assert caught.value.attempts == 1


async def test_the_deadline_runs_on_the_run_clock() -> None:
    """An attempt that never answers fails as soon as the clock passes the deadline."""
    clock = FakeClock()
    never = asyncio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        await never.wait()
        raise AssertionError("unreachable")

    policy = RetryPolicy(max_attempts=1, deadline=30.0)
    transport = httpx.MockTransport(hang)
    async with ProviderRegistry(environ=ENV, clock=clock, policy=policy, transport=transport) as p:
        task = asyncio.create_task(p.client("openai").complete(HI))
        await clock.advance(29.9)
        assert not task.done()
        await clock.advance(0.1)
        with pytest.raises(LLMTimeout, match="longer than the 30 s deadline"):
            await task


async def test_a_timed_out_attempt_is_retried(llm_server: StartLLMServer) -> None:
    """An attempt past its deadline is retried like any transient failure."""
    server = llm_server([ServerRule([{"content": "x" * 500, "trickle": 0.2}, "ok"])])
    policy = RetryPolicy(max_attempts=2, base_delay=0.0, deadline=0.3)
    retries: list[tuple[int, str]] = []
    completion = await call(server, SystemClock(), policy=policy, retries=retries)
    assert (completion.content, completion.attempts) == ("ok", 2)
    assert retries == [(1, "deadline of 0.3 s exceeded")]


async def test_unreachable_server(clock: Clock, sleeps: list[float]) -> None:
    """Nothing listening: every attempt fails to connect, then LLMConnectionError."""
    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environ = {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"}
    async with ProviderRegistry(environ=environ, clock=clock, policy=POLICY) as providers:
        with pytest.raises(LLMConnectionError) as caught:
            await providers.client("openai").complete(HI)
    assert caught.value.attempts == 3
    assert f"cannot reach http://127.0.0.1:{port}/v1/chat/completions" in str(caught.value)
    assert len(sleeps) == 2


def test_backoff_is_full_jitter_under_a_doubling_cap() -> None:
    """Each wait is between zero and min(max_delay, base_delay * 2**(attempt-1))."""
    policy = RetryPolicy(base_delay=0.5, max_delay=4.0)
    rng = random.Random(7)
    for attempt in range(1, 12):
        waits = [policy.backoff(attempt, rng) for _ in range(50)]
        cap = min(4.0, 0.5 * 2 ** (attempt - 1))
        assert all(0.0 <= wait <= cap for wait in waits)
        assert max(waits) > cap / 2  # jittered across the range, not pinned to zero


@pytest.mark.parametrize("fields", [{"max_attempts": 0}, {"base_delay": -1.0}, {"deadline": 0.0}])
def test_policy_rejects_nonsense(fields: dict[str, float]) -> None:
    """A policy with no attempts, a negative delay or no deadline cannot be built."""
    with pytest.raises(ValueError):
        RetryPolicy(**fields)  # type: ignore[arg-type]
