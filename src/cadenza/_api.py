"""The Python API: a `Runtime` a service owns, and a `RunHandle` per run.

    async with cadenza.Runtime(store=".cadenza/runs.db") as runtime:
        handle = await runtime.start("flow.yaml", inputs={"topic": "loops"})
        async for event in handle.events():
            print(event.type, event.step_id)
        result = await handle.result()

The runtime owns a task group: every run is a task in it, and leaving the
``async with`` block cancels the runs still going (each records ``cancelled``).
A run interrupted by a crash continues with `Runtime.resume`; a run waiting for
a person takes the answer with `Runtime.signal`, then resumes (``_resume.py``).
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
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import httpx

from ._resume import (
    FINISHED,
    finished_result,
    get_row,
    pending_inputs,
    prepare_resume,
    record_signal,
    resumable_runs,
    runs_to_prune,
)
from .actors import EventSink, RunControl, RunJournal, execute_run
from .actors._coordinator import COORDINATOR, PostMessage
from .actors._replay import Replay
from .errors import CadenzaError, InputError, LeaseHeld
from .llm import RetryPolicy
from .protocols import Event, EventType, MessageRecord, RunResult
from .runtime import Clock, MemoryRunStore, RunRow, RunStore, SqliteRunStore, SystemClock
from .runtime._lease import LeaseHolder
from .workflow import (
    DEFAULT_MAX_CONCURRENCY,
    LoadedWorkflow,
    Workflow,
    load_workflow,
    resolve_inputs,
    validate_workflow,
)
from .workflow import WorkflowError as WorkflowError

if TYPE_CHECKING:
    from .remote import Dispatcher

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
        # A resumed run's log holds an earlier workflow_end (a waiting run's): not the end.
        self._resumed_after = 0

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

    async def signal(self, address: str, data: Any) -> None:
        """Records a person's answer for this run's step waiting at ``address``.

        The run must have ended ``waiting``; `Runtime.resume` then continues it.

        Raises:
            SignalRejected: Nothing waits at ``address``, or ``data`` does not fit its schema.
            LeaseHeld: The run is still being driven.
        """
        await record_signal(self._store, self.run_id, address, data)

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
                if event.type == EventType.WORKFLOW_END and last > self._resumed_after:
                    return
            while True:
                while pending:
                    event = pending.popleft()
                    if event.seq <= last:
                        continue
                    last = event.seq
                    yield event
                    if event.type == EventType.WORKFLOW_END and last > self._resumed_after:
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
        workers: Run leaf steps on remote workers: the endpoint to bind for them
            (``tcp://127.0.0.1:5555``), or a configured `cadenza.remote.Dispatcher`.
            The runtime starts and stops it; ``runtime.workers`` is the dispatcher.
        curve_keys: With ``workers`` as an endpoint: the CURVE key directory
            (``cadenza keys generate``); only authorized workers get in.
        insecure: With ``workers`` as an endpoint: allow a non-loopback address
            without keys.

    Raises:
        InsecureEndpoint: ``workers`` is not loopback and has neither keys nor ``insecure``.
        KeysError: ``curve_keys`` is incomplete.
    """

    def __init__(
        self,
        *,
        store: RunStore | str | os.PathLike[str] | None = None,
        clock: Clock | None = None,
        max_concurrency: int | None = None,
        default_model: str | None = None,
        workers: str | Dispatcher | None = None,
        curve_keys: str | os.PathLike[str] | None = None,
        insecure: bool = False,
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
        if isinstance(workers, str):
            from .remote import Dispatcher  # pyzmq is imported only by runtimes that use it

            workers = Dispatcher(
                workers, curve_keys=curve_keys, insecure=insecure, clock=self.clock
            )
        self.workers: Dispatcher | None = workers
        """The remote workers' dispatcher (None: steps run in this process)."""

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
        if self.workers is not None:
            try:
                await self.workers.__aenter__()
            except BaseException:
                await self.store.close()
                raise
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
            if self.workers is not None:
                await self.workers.__aexit__(None, None, None)
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
        handle = RunHandle(run_id, journal, self.store, RunControl())
        await self._launch(handle, document, resolved, limit, LeaseHolder.for_this_process())
        return handle

    async def _launch(
        self,
        handle: RunHandle,
        document: LoadedWorkflow,
        inputs: dict[str, Any],
        limit: int,
        holder: LeaseHolder,
        replay: Replay | None = None,
        *,
        leased: bool = False,
    ) -> None:
        """Starts the run in the task group, under ``holder``'s lease; returns once the
        run is recorded in the store (or has failed), so it can be looked up at once.

        A resumed run has ``leased`` already (its caller must hear of a conflict);
        a new run takes its lease once it is recorded, as nobody else can hold it yet.
        """
        assert self._group is not None
        run_id = handle.run_id
        self._runs[run_id] = handle

        async def run(
            *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
        ) -> None:
            told = False

            def recorded() -> None:
                nonlocal told
                if not told:
                    told = True
                    task_status.started()

            try:
                result = await execute_run(
                    run_id=run_id,
                    document=document,
                    inputs=inputs,
                    journal=handle._journal,
                    store=self.store,
                    clock=self.clock,
                    max_concurrency=limit,
                    default_model=self.default_model,
                    control=handle._control,
                    http=self._shared_http,
                    dispatcher=self.workers,
                    replay=replay,
                    lease=None if leased else holder,
                    recorded=recorded,
                )
                self.store.release_lease(run_id, holder)
                await self.store.flush()  # released before anyone hears the run ended
            except Exception as error:  # delivered to whoever awaits the result
                self.store.release_lease(run_id, holder)
                handle._finish(error)
                return
            except BaseException as error:  # cancellation: the awaiting caller learns it too
                self.store.release_lease(run_id, holder)
                handle._finish(error)
                raise
            finally:
                recorded()
                # A finished run lives on in the store; keeping its handle (and
                # journal) here would grow a long-lived service without bound.
                if self._runs.get(run_id) is handle:
                    del self._runs[run_id]
            handle._finish(result)

        await self._group.start(run, name=f"cadenza run {run_id}")

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

    async def resume(
        self,
        run_id: str,
        *,
        max_concurrency: int | None = None,
        on_event: EventSink | None = None,
    ) -> RunHandle:
        """Continues a run that was interrupted (``kill -9``, a crash) or is waiting.

        Steps that finished are not run again: their recorded outcomes are
        replayed; steps that were in flight run again (``attempt`` one higher).
        A finished run's handle holds its stored result at once.

        Raises:
            RunNotFound: The store has no such run.
            LeaseHeld: Another live process (or this runtime) is driving the run.
            CorruptRecord: A stored record is unreadable or inconsistent; nothing runs.
        """
        if self._group is None:
            raise CadenzaError("the runtime is not running; use it as 'async with Runtime()'")
        row = await get_row(self.store, run_id)
        journal = RunJournal(run_id, row.workflow, self.store)
        if on_event is not None:
            journal.subscribe(on_event)
        handle = RunHandle(run_id, journal, self.store, RunControl())
        if row.status in FINISHED:
            handle._finish(finished_result(row))
            return handle
        running = self._runs.get(run_id)
        if running is not None and not running.done:
            raise LeaseHeld(f"run {run_id!r} is running in this runtime already")
        holder = LeaseHolder.for_this_process()
        await self.store.acquire_lease(run_id, holder)
        try:
            prepared = await prepare_resume(self.store, row)
        except BaseException:
            self.store.release_lease(run_id, holder)
            await self.store.flush()
            raise
        handle._resumed_after = prepared.replay.last_seq
        options = prepared.document.workflow.options
        limit = (
            max_concurrency
            or self.max_concurrency
            or options.max_concurrency
            or DEFAULT_MAX_CONCURRENCY
        )
        await self._launch(
            handle, prepared.document, prepared.inputs, limit, holder, prepared.replay, leased=True
        )
        return handle

    async def signal(self, run_id: str, address: str, data: Any) -> None:
        """Records a person's answer for the step waiting at ``address`` (SPEC 2.6).

        ``data`` is checked against the step's ``schema`` first; nothing is
        recorded if it does not fit. `resume` then continues the run.

        Raises:
            RunNotFound: No such run.
            SignalRejected: The run has finished, nothing waits at ``address``, or
                the answer does not fit (each problem with its JSON path).
            LeaseHeld: A process is driving the run right now.
        """
        await record_signal(self.store, run_id, address, data)

    async def pending_inputs(self, run_id: str) -> dict[str, dict[str, Any]]:
        """What the run waits for: ``{address: {prompt, schema}}``."""
        await self.get_run(run_id)
        return pending_inputs(await self.store.steps(run_id))

    async def resumable(self) -> list[RunRow]:
        """Runs ``resume --all`` continues: interrupted ones, and waiting ones since answered."""
        return await resumable_runs(self.store)

    async def prune(self, *, older_than: float | None = None, keep: int | None = None) -> list[str]:
        """Deletes finished runs last updated over ``older_than`` seconds ago, or beyond the
        ``keep`` newest finished ones; returns their ids. Running and waiting runs stay.
        """
        rows = await self.store.list_runs(limit=1 << 30)
        doomed = runs_to_prune(rows, older_than=older_than, keep=keep)
        await self.store.delete_runs(doomed)
        return doomed

    async def check(self) -> list[str]:
        """Every integrity problem of the store (SQLite: ``PRAGMA integrity_check`` and more)."""
        return await self.store.check()

    def handle(self, run_id: str) -> RunHandle | None:
        """The handle of a run this runtime is driving now; None once it has ended.

        Finished runs are not kept in memory: `result` and `stored_events`
        read them from the store.
        """
        return self._runs.get(run_id)

    async def result(self, run_id: str) -> RunResult:
        """Waits for a run this runtime drives to end, or reads a finished run's result.

        Raises:
            RunNotFound: The store has no such run.
            CadenzaError: The run is neither finished nor driven by this runtime
                (it is waiting for input, or was interrupted: `resume` it).
        """
        running = self._runs.get(run_id)
        if running is not None:
            return await running.result()
        row = await get_row(self.store, run_id)
        if row.status not in FINISHED:
            raise CadenzaError(
                f"run {run_id!r} is {row.status} and not running in this runtime; resume it"
            )
        return finished_result(row)

    async def get_run(self, run_id: str) -> RunRow:
        """A stored run.

        Raises:
            RunNotFound: The store has no such run.
        """
        return await get_row(self.store, run_id)

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
