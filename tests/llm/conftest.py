"""Fixtures for the provider tests: a clock that records backoff, and the scripted server."""

from __future__ import annotations

import asyncio

import pytest

from cadenza.kernel import Clock, SystemClock


class _InstantBackoffClock(SystemClock):
    """Real timers (so deadlines work), but ``sleep`` records its length and returns at once."""

    def __init__(self, sleeps: list[float]) -> None:
        self.sleeps = sleeps

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(0)


@pytest.fixture
def sleeps() -> list[float]:
    """The backoff waits the ``clock`` fixture was asked for, in order."""
    return []


@pytest.fixture
def clock(sleeps: list[float]) -> Clock:
    """A clock whose sleeps return at once and are appended to ``sleeps``."""
    return _InstantBackoffClock(sleeps)
