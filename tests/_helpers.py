"""Helpers the tests share, in one place: a test file copies none of them.

Fixtures (``write_flow``, ``model_server``, the stores) are in
``tests/conftest.py``; a folder's own ``conftest.py`` holds only what that
folder alone uses.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, NamedTuple, TypeVar

import anyio
import pytest

from cadenza import RunHandle, RunResult, Runtime
from cadenza.kernel import Clock
from cadenza.protocols import Event, StepRecord
from cadenza.store import RunStore, make_store
from cadenza.workflow import LoadedWorkflow, Workflow

T = TypeVar("T")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
"""The repository's examples/ folder."""

Runnable = LoadedWorkflow | Workflow | str | os.PathLike[str]
"""What `Runtime.run` takes: a loaded or built workflow, or its file."""

Store = RunStore | str | os.PathLike[str] | None
"""What `Runtime` takes as its store: one, a file or URL, or None (in memory)."""

CLI = (sys.executable, "-m", "cadenza")
"""The command line as a user runs it, from this interpreter."""

DEADLINE = 30.0
"""Seconds a condition a test awaits may take before the test fails as hung."""


async def eventually(
    what: str, check: Callable[[], Awaitable[bool]], deadline: float = 120.0
) -> None:
    """Polls ``check`` until it is true; fails after ``deadline`` seconds naming ``what``
    (only a hang reaches it: it is no timing assertion)."""
    give_up = time.monotonic() + deadline
    while not await check():
        if time.monotonic() > give_up:
            pytest.fail(f"gave up waiting for {what}")
        await anyio.sleep(0.05)


def effects_of(path: Path) -> list[list[str]]:
    """The lines a test workflow's steps appended to ``path``, each split into words."""
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


async def run_statuses(spec: str | Path) -> Counter[str]:
    """How many of the store's runs are in each status."""
    async with opened_store(spec) as store:
        return Counter(row.status for row in await store.list_runs(limit=10_000))


# -- runs ------------------------------------------------------------------------------


async def run_flow(
    workflow: Runnable,
    *,
    inputs: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    store: Store = None,
) -> RunResult:
    """Runs ``workflow`` to its result (or its first wait) on a fresh runtime, on ``store``
    (default: in memory)."""
    async with Runtime(store=store) as runtime:
        return await runtime.run(workflow, inputs=inputs, run_id=run_id)


def statuses(result: RunResult, *addresses: str) -> list[str]:
    """The status of each step record at ``addresses``, in order (a missing one fails)."""
    return [result.steps[address].status for address in addresses]


async def run_with_events(
    workflow: Runnable, *, inputs: Mapping[str, Any] | None = None
) -> tuple[RunResult, list[Event]]:
    """Runs ``workflow`` and returns its result with every event it emitted, in order."""
    events: list[Event] = []
    async with Runtime() as runtime:
        handle = await runtime.start(workflow, inputs=inputs, on_event=events.append)
        return await handle.result(), events


class Sink(Generic[T]):
    """Collects what it is given (pass it as a sink); a test awaits a condition on that.

    Nothing waits on the wall clock: `until` wakes at each new item, and only a hang
    reaches its `DEADLINE`.
    """

    def __init__(self) -> None:
        self.items: list[T] = []
        self._waiters: list[asyncio.Future[None]] = []

    def __call__(self, item: T) -> None:
        self.items.append(item)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def until(self, condition: Callable[[list[T]], bool], what: str = "") -> None:
        """Returns once ``condition(items)`` holds; fails the test after `DEADLINE`."""
        try:
            with anyio.fail_after(DEADLINE):
                while not condition(self.items):
                    waiter = asyncio.get_running_loop().create_future()
                    self._waiters.append(waiter)
                    await waiter
        except TimeoutError:
            pytest.fail(f"waited {DEADLINE:g} s for {what or 'a condition'}: {self.items}")


class Watch(Sink[Event]):
    """A run's events (``on_event=watch``), with waiting for one of them."""

    @property
    def events(self) -> list[Event]:
        return self.items

    def seen(self, kind: str, step_id: str | None = None) -> Event | None:
        """The first event of type ``kind`` (at ``step_id``) so far, if any."""
        found = (e for e in self.items if e.type == kind and step_id in (None, e.step_id))
        return next(found, None)

    async def wait_for(self, kind: str, step_id: str | None = None) -> Event:
        """The first event of type ``kind`` (at ``step_id``), waiting for it if need be."""
        await self.until(lambda _: self.seen(kind, step_id) is not None, f"{kind} at {step_id}")
        found = self.seen(kind, step_id)
        assert found is not None
        return found


Started = tuple[RunHandle, Watch]
"""A started run's handle and the `Watch` of its events."""


@asynccontextmanager
async def started(
    workflow: Runnable,
    *,
    clock: Clock | None = None,
    inputs: Mapping[str, Any] | None = None,
    run_id: str | None = None,
) -> AsyncIterator[Started]:
    """A run of ``workflow`` started on a fresh runtime (on ``clock``), and a `Watch` of
    its events; the runtime shuts down when the block ends."""
    watch = Watch()
    async with Runtime(clock=clock) as runtime:
        yield await runtime.start(workflow, inputs=inputs, run_id=run_id, on_event=watch), watch


@asynccontextmanager
async def run_on(
    store: Store, workflow: Runnable, run_id: str = "r"
) -> AsyncIterator[tuple[Runtime, RunResult]]:
    """A runtime on ``store`` once ``workflow`` has run on it as ``run_id`` (to its end or
    its first wait), and that result; the runtime stays open for the block."""
    async with Runtime(store=store) as runtime:
        yield runtime, await runtime.run(workflow, run_id=run_id)


# -- the command line ------------------------------------------------------------------


def python(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` (this interpreter) in ``cwd``; its output as text."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def cadenza(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m cadenza ARGS`` in ``cwd``, as a user runs it; its output as text."""
    return python(*CLI[1:], *args, cwd=cwd, env=env, timeout=timeout)


def assert_clean_failure(proc: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    """The command exited with ``code``, said each of ``words``, and showed no traceback."""
    text = proc.stdout + proc.stderr
    assert proc.returncode == code, text
    assert "Traceback" not in text
    for word in words:
        assert word in text, text


def assert_refused(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    """Bad input: exit code 2, and stderr says each of ``words``, with no traceback."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


# -- server-sent events ----------------------------------------------------------------


class EventStream:
    """Reads a server-sent event stream line by line: `feed` returns each message as it
    ends, as its fields (``id``, ``event``, ``data``: those present)."""

    def __init__(self) -> None:
        self._fields: dict[str, str] = {}

    def feed(self, line: str) -> dict[str, str] | None:
        """The message that ``line`` ends, if it ends one (a blank line does)."""
        if not line:
            message, self._fields = self._fields, {}
            return message or None
        if not line.startswith(":"):  # a comment (a keep-alive, say) is no field
            name, _, value = line.partition(":")
            self._fields[name] = value.removeprefix(" ")
        return None


def sse_messages(text: str) -> list[dict[str, str]]:
    """The messages of a whole server-sent event stream."""
    stream = EventStream()
    return [m for line in [*text.splitlines(), ""] if (m := stream.feed(line)) is not None]


# -- modules ---------------------------------------------------------------------------


def import_source(
    directory: Path, source: str, monkeypatch: pytest.MonkeyPatch, *, prefix: str = "steps"
) -> ModuleType:
    """Saves ``source`` as a module of a name no other test uses, and imports it.

    ``sys.path`` and ``sys.modules`` are put back when the test ends.
    """
    name = f"{prefix}_{uuid.uuid4().hex}"
    (directory / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(directory))
    module = importlib.import_module(name)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def load_example(name: str, as_module: str | None = None) -> ModuleType:
    """Runs ``examples/<name>.py`` afresh as a module named ``as_module`` (``example_<name>``)."""
    spec = importlib.util.spec_from_file_location(
        as_module or f"example_{name}", EXAMPLES / f"{name}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- stores ----------------------------------------------------------------------------


@asynccontextmanager
async def opened_store(spec: str | Path) -> AsyncIterator[RunStore]:
    """The run store ``spec`` names (a file, a URL), open for the block, as a reader."""
    store = make_store(spec)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


class StoredRun(NamedTuple):
    """What a store holds of one run."""

    events: list[Event]
    steps: dict[str, StepRecord]
    """The latest record of each address."""

    @property
    def finished(self) -> set[str]:
        """The addresses whose record is final: completed, failed or skipped."""
        return {a for a, r in self.steps.items() if r.status in ("completed", "failed", "skipped")}


def read_run(spec: str | Path, run_id: str) -> StoredRun:
    """What the store at ``spec`` holds of ``run_id`` (from synchronous code)."""

    async def read() -> StoredRun:
        async with opened_store(spec) as store:
            return StoredRun(await store.events(run_id), await store.steps(run_id))

    return asyncio.run(read())
