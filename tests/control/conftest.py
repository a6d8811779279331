"""Fixtures for the control-loop tests: a loop's workflow files, runs, and their events."""

from __future__ import annotations

import asyncio
import itertools
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cadenza import RunResult, Runtime
from cadenza.protocols import Event

_modules = itertools.count()

PLANNER = """
name: planner
inputs: {objective: {}, criteria: {}, feedback: {}, history: {}}
steps: [{id: plan, handler: "HANDLERS:plan"}]
output: steps.plan.result
"""

ACTOR = """
name: actor
inputs: {objective: {}, plan: {}, feedback: {}, iteration: {type: integer}}
steps: [{id: act, handler: "HANDLERS:act"}]
output: steps.act.result
"""

DELEGATE = """
name: delegate
inputs: {objective: {}, plan: {}, feedback: {}, iteration: {type: integer}}
steps: [{id: act, handler: "HANDLERS:delegate"}]
output: steps.act.result
"""

EVALUATOR = """
name: evaluator
inputs: {objective: {}, criteria: {}, result: {type: object}}
steps: [{id: judge, handler: "HANDLERS:judge"}]
output: steps.judge.result
"""

CHILDREN = {
    "planner.yaml": PLANNER,
    "actor.yaml": ACTOR,
    "delegate.yaml": DELEGATE,
    "evaluator.yaml": EVALUATOR,
}

ControlFlow = Callable[..., Path]
RunFlow = Callable[..., Awaitable[RunResult]]
RunWithEvents = Callable[..., Awaitable[tuple[RunResult, list[Event]]]]


@pytest.fixture
def control_flow(tmp_path: Path) -> ControlFlow:
    """Writes a control workflow, its child workflows and a handler module; returns its path.

    The standard children (``planner.yaml``, ``actor.yaml``, ``delegate.yaml``,
    ``evaluator.yaml``) call the handlers ``plan``, ``act``, ``delegate`` and
    ``judge``; ``children`` adds or replaces files. ``HANDLERS`` in any file
    becomes the handler module's unique name.
    """

    def write(flow: str, *, handlers: str = "", children: dict[str, str] | None = None) -> Path:
        module = f"control_handlers_{next(_modules)}"
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(handlers))
        for name, text in {**CHILDREN, **(children or {})}.items():
            (tmp_path / name).write_text(textwrap.dedent(text).replace("HANDLERS", module))
        path = tmp_path / "flow.yaml"
        path.write_text(textwrap.dedent(flow).replace("HANDLERS", module))
        return path

    return write


@pytest.fixture
def run_flow() -> RunFlow:
    """Runs a workflow to its result on a fresh runtime."""

    async def run(workflow: Path | Any, **kwargs: Any) -> RunResult:
        async with Runtime() as runtime:
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


class Watch:
    """Collects events and lets a test wait for one of them."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._waiters: list[tuple[str, str | None, asyncio.Future[Event]]] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        for waiter in list(self._waiters):
            kind, step_id, future = waiter
            if event.type == kind and step_id in (None, event.step_id) and not future.done():
                future.set_result(event)
                self._waiters.remove(waiter)

    async def wait_for(self, kind: str, step_id: str | None = None) -> Event:
        """The first event of ``kind`` (at ``step_id``), waiting for it if need be."""
        for event in self.events:
            if event.type == kind and step_id in (None, event.step_id):
                return event
        future: asyncio.Future[Event] = asyncio.get_running_loop().create_future()
        self._waiters.append((kind, step_id, future))
        return await future
