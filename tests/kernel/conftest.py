"""Helpers for the runtime tests: letting the event loop settle without a wall clock."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from cadenza.kernel import Actor, FakeClock

Settle = Callable[[], Awaitable[None]]
"""The ``settle`` fixture."""


class Ping:
    """A message type with a recognisable name."""


class Echo(Actor):
    """Answers every message with itself, without awaiting anything."""

    async def receive(self, message: Any) -> Any:
        return message


@pytest.fixture
def settle() -> Settle:
    """Run every runnable task until all are blocked (no time passes)."""
    clock = FakeClock()

    async def settle() -> None:
        await clock.advance(0)

    return settle
