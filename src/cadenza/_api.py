"""The Python API: a `Runtime` a service owns, and a `RunHandle` per run.

    async with cadenza.Runtime(store=".cadenza/runs.db") as runtime:
        handle = await runtime.start("flow.yaml", inputs={"topic": "loops"})
        async for event in handle.events():
            print(event.type, event.step_id)
        result = await handle.result()

The runtime owns a task group: every run is a task in it, and leaving the
``async with`` block cancels the runs still going (each records ``cancelled``).
The CLI is a thin layer over exactly this API.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import httpx

from .actors import EventSink, RunControl, RunJournal, execute_run
from .actors._coordinator import COORDINATOR, PostMessage
from .errors import CadenzaError, InputError, RunNotFound
from .llm import RetryPolicy
from .protocols import Event, EventType, MessageRecord, RunResult
from .runtime import Clock, MemoryRunStore, RunRow, RunStore, SqliteRunStore, SystemClock
from .workflow import (
    DEFAULT_MAX_CONCURRENCY,
    LoadedWorkflow,
    Workflow,
    load_workflow,
    resolve_inputs,
    validate_workflow,
)
from .workflow import WorkflowError as WorkflowError

__all__ = ["RunHandle", "Runtime", "new_run_id"]

EVENT_BUFFER = 10_000
"""Events a `RunHandle.events` subscriber may fall behind by before the oldest are dropped."""


def new_run_id() -> str:
    """A sortable, unique run id: UTC time plus randomness (``20261121T101500-3f9a1c``)."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class RunHandle:
    """A run in progress: its id, its events, its result, and a way to cancel it."""

    def __init__(
        self, run_id: str, journal: RunJournal, store: RunStore, control: RunControl
    ) -> None:
        self.run_id = run_id
        self._journal = journal
        self._store = store
        self._control = control
        self._result: asyncio.Future[RunResult] = asyncio.get_running_loop().create_future()

    @property
    def done(self) -> bool:
        """True once the run has a result."""
        return self._result.done()

    async def result(self) -> RunResult:
        """Waits for the run to end and returns its result JSON as a `RunResult`."""
        return await asyncio.shield(self._result)

    @property
    def messages(self) -> list[MessageRecord]:
        """Every message carried between agents so far, in order."""
        return list(self._journal.messages)

    async def post_message(self, target: str, text: str, *, kind: str = "info") -> None:
        """Sends a message to a step, as the coordinator would.

        ``target`` is a bare step id (its newest instance) or an address; the
        message lands in that agent's next turn, or waits for the step's next
        instance. Waits while the coordinator's inbox is full (backpressure); a
        step whose own inbox is full drops it with a ``message_dropped`` event.

        Raises:
            CadenzaError: The run has not started its actors yet, or has ended.
        """
        context = self._control.context
        if context is None or self.done:
            raise CadenzaError(f"run {self.run_id!r} is not running; it cannot take messages")
        await context.supervisor.tell(COORDINATOR, PostMessage(target, text, kind))

    def cancel(self, reason: str = "cancelled by the caller") -> None:
        """Cancels the run: running steps stop and are recorded ``cancelled``."""
        self._control.cancel(reason)

    async def events(self, *, buffer: int = EVENT_BUFFER) -> AsyncIterator[Event]:
        """Every event of the run, from its first, ending after ``workflow_end``.

        A late subscriber first gets what the store already holds, then the live
        stream. A consumer slower than the run never slows it down: up to
        ``buffer`` events wait for it; past that the oldest are dropped, and
        `Event.seq` shows the gap.
        """
        pending: deque[Event] = deque(maxlen=buffer)
        wakeup: list[asyncio.Future[None]] = []

        def sink(event: Event) -> None:
            pending.append(event)
            if wakeup and not wakeup[0].done():
                wakeup[0].set_result(None)

        unsubscribe = self._journal.subscribe(sink)
        try:
            await self._store.flush()
            last = 0
            for event in await self._store.events(self.run_id):
                last = event.seq
                yield event
                if event.type == EventType.WORKFLOW_END:
                    return
            while True:
                while pending:
                    event = pending.popleft()
                    if event.seq <= last:
                        continue
                    last = event.seq
                    yield event
                    if event.type == EventType.WORKFLOW_END:
                        return
                wakeup[:] = [asyncio.get_running_loop().create_future()]
                await wakeup[0]
        finally:
            unsubscribe()

    def _finish(self, result: RunResult | BaseException) -> None:
        if self._result.done():
            return
        if isinstance(result, BaseException):
            self._result.set_exception(result)
        else:
            self._result.set_result(result)


class Runtime:
    """Runs workflows; one per process, owned by the service's lifespan.

    Args:
        store: Where runs are recorded: a `RunStore`, a path to a SQLite file, or
            None for an in-memory store.
        clock: The clock for delays and timeouts (tests inject `FakeClock`).
        max_concurrency: Steps in parallel per run when a workflow does not say.
        default_model: The model of steps that name no agent (``provider:model``).
    """

    def __init__(
        self,
        *,
        store: RunStore | str | os.PathLike[str] | None = None,
        clock: Clock | None = None,
        max_concurrency: int | None = None,
        default_model: str | None = None,
    ) -> None:
        if store is None:
            self.store: RunStore = MemoryRunStore()
        elif isinstance(store, str | os.PathLike):
            self.store = SqliteRunStore(Path(store))
        else:
            self.store = store
        self.clock: Clock = clock or SystemClock()
        self.max_concurrency = max_concurrency
        self.default_model = default_model or os.environ.get("CADENZA_MODEL")
        self._group: anyio.abc.TaskGroup | None = None
        self._runs: dict[str, RunHandle] = {}
        self._http: httpx.AsyncClient | None = None
        self._http_lock = anyio.Lock()

    async def _shared_http(self) -> httpx.AsyncClient:
        """The HTTP client every run's model calls share, built on first use.

        Building one loads the CA bundle (tens of milliseconds of blocking work),
        so it happens once per runtime, in a worker thread, not once per run.
        """
        if self._http is None:
            async with self._http_lock:
                if self._http is None:
                    self._http = await anyio.to_thread.run_sync(_new_http_client)
        return self._http

    async def __aenter__(self) -> Runtime:
        await self.store.open()
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        group, self._group = self._group, None
        try:
            if group is None:
                return
            for handle in self._runs.values():
                if not handle.done:
                    handle.cancel("the runtime is shutting down")
            if isinstance(exc, Exception):
                # The caller's own error goes out as itself, not wrapped in a group.
                group.cancel_scope.cancel()
                await group.__aexit__(None, None, None)
            else:
                await group.__aexit__(exc_type, exc, traceback)
        finally:
            if self._http is not None:
                await self._http.aclose()
                self._http = None
            await self.store.close()

    async def start(
        self,
        workflow: LoadedWorkflow | Workflow | str | os.PathLike[str],
        *,
        inputs: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        max_concurrency: int | None = None,
        on_event: EventSink | None = None,
    ) -> RunHandle:
        """Starts a run and returns its handle at once.

        Args:
            workflow: A loaded workflow, one built in Python, or a file path.
            inputs: Values for the workflow's declared inputs.
            run_id: The id to record the run under (default: a new unique id).
            max_concurrency: Overrides the steps-in-parallel limit for this run.
            on_event: Called with every event, from the first; must not block.

        Raises:
            WorkflowError: The workflow is invalid (each problem located).
            InputError: An input is missing, unknown or of the wrong type, or the
                run id is already taken.
        """
        if self._group is None:
            raise CadenzaError("the runtime is not running; use it as 'async with Runtime()'")
        document = _as_document(workflow)
        resolved = resolve_inputs(document.workflow.inputs, inputs or {})
        run_id = run_id or new_run_id()
        if run_id in self._runs or await self.store.get_run(run_id) is not None:
            raise InputError(f"run id {run_id!r} is already taken in this store")
        limit = (
            max_concurrency
            or self.max_concurrency
            or document.workflow.options.max_concurrency
            or DEFAULT_MAX_CONCURRENCY
        )
        journal = RunJournal(run_id, document.workflow.name, self.store)
        if on_event is not None:
            journal.subscribe(on_event)
        control = RunControl()
        handle = RunHandle(run_id, journal, self.store, control)
        self._runs[run_id] = handle

        async def run() -> None:
            try:
                result = await execute_run(
                    run_id=run_id,
                    document=document,
                    inputs=resolved,
                    journal=journal,
                    store=self.store,
                    clock=self.clock,
                    max_concurrency=limit,
                    default_model=self.default_model,
                    control=control,
                    http=self._shared_http,
                )
            except Exception as error:  # delivered to whoever awaits the result
                handle._finish(error)
                return
            except BaseException as error:  # cancellation: the awaiting caller learns it too
                handle._finish(error)
                raise
            handle._finish(result)

        self._group.start_soon(run, name=f"cadenza run {run_id}")
        return handle

    async def run(
        self,
        workflow: LoadedWorkflow | Workflow | str | os.PathLike[str],
        *,
        inputs: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        max_concurrency: int | None = None,
    ) -> RunResult:
        """Starts a run and waits for its result."""
        handle = await self.start(
            workflow, inputs=inputs, run_id=run_id, max_concurrency=max_concurrency
        )
        return await handle.result()

    def handle(self, run_id: str) -> RunHandle | None:
        """The handle of a run started by this runtime, if it is one."""
        return self._runs.get(run_id)

    async def get_run(self, run_id: str) -> RunRow:
        """A stored run.

        Raises:
            RunNotFound: The store has no such run.
        """
        row = await self.store.get_run(run_id)
        if row is None:
            raise RunNotFound(f"no run {run_id!r} in the store")
        return row

    async def list_runs(self, *, limit: int = 100) -> list[RunRow]:
        """Stored runs, most recent first."""
        return await self.store.list_runs(limit=limit)

    async def stored_events(self, run_id: str) -> list[Event]:
        """A stored run's events, in order.

        Raises:
            RunNotFound: The store has no such run.
        """
        await self.get_run(run_id)
        return await self.store.events(run_id)


def _new_http_client() -> httpx.AsyncClient:
    policy = RetryPolicy()
    return httpx.AsyncClient(timeout=httpx.Timeout(policy.deadline, connect=10.0))


def _as_document(workflow: LoadedWorkflow | Workflow | str | os.PathLike[str]) -> LoadedWorkflow:
    if isinstance(workflow, LoadedWorkflow):
        return workflow
    if isinstance(workflow, Workflow):
        problems = validate_workflow(workflow)
        if problems:
            raise WorkflowError(tuple(problems))
        return LoadedWorkflow(workflow=workflow, path=None, base_dir=Path.cwd(), includes={})
    return load_workflow(workflow)
