"""Fixtures for the controller tests: run a workflow file, and watch its events."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cadenza import RunResult, Runtime
from cadenza.protocols import Event
from cadenza.testing.pytest_plugin import llm_server as llm_server

WriteFlow = Callable[..., Path]
RunFlow = Callable[..., Awaitable[RunResult]]
RunWithEvents = Callable[..., Awaitable[tuple[RunResult, list[Event]]]]


@pytest.fixture
def run_flow() -> RunFlow:
    """Runs a workflow (a path or a built `Workflow`) to its result on a fresh runtime."""

    async def run(workflow: Path | Any, **kwargs: Any) -> RunResult:
        async with Runtime(max_concurrency=kwargs.pop("max_concurrency", None)) as runtime:
            return await runtime.run(workflow, **kwargs)

    return run


@pytest.fixture
def run_with_events() -> RunWithEvents:
    """Runs a workflow and returns its result with every event it emitted, in order."""

    async def run(workflow: Path | Any, **kwargs: Any) -> tuple[RunResult, list[Event]]:
        events: list[Event] = []
        async with Runtime() as runtime:
            handle = await runtime.start(workflow, on_event=events.append, **kwargs)
            result = await handle.result()
        return result, events

    return run
