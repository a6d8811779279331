"""The Python API: a `Runtime` a service owns, and a `RunHandle` per run (``_handle.py``).

    async with cadenza.Runtime(store=".cadenza/runs.db") as runtime:
        handle = await runtime.start("flow.yaml", inputs={"topic": "loops"})
        async for event in handle.events():
            print(event.type, event.step_id)
        result = await handle.result()

The runtime owns a task group: every run is a task in it. Leaving the
``async with`` block (a service shutting down) interrupts the runs still going:
their steps are cancelled as by `RunHandle.cancel`, but the runs are not ended.
Each keeps status ``running`` with every finished step recorded and its lease
released, exactly as after a crash, so `Runtime.resumable` lists it and
`Runtime.resume` finishes it without redoing finished steps. Only an explicit
`RunHandle.cancel` ends a run ``cancelled``. A run waiting for a person takes
the answer with `Runtime.signal`, then resumes (``_resume.py``). The CLI is a
thin layer over exactly this API.

A run is driven under its lease (``cadenza.store._lease``): taken before the
run is recorded, renewed every third of ``lease_ttl`` by a task beside the run,
released when it ends. If the store finds the lease lost (another process took
the run over while this one was paused or cut off), the run is stopped at once,
writes nothing more, and its handle's result raises `LeaseLost`. If the store
fails the run's writes (the server restarted, the disk filled up), the run is
stopped at once too and its lease given back; its handle's result raises
`StoreFailed`, and the run is resumable — unless the store then says that
another process took the run over meanwhile (a process paused inside a write):
that is `LeaseLost`. A runtime made with ``recover=True``
also takes over, every ``recovery_interval`` seconds, the runs of the store
whose owner stopped renewing its lease or gave it back, and resumes them; a run
it took over that the store then failed is taken again only after a pause that
doubles at each failure (``_backoff.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import time
from collections.abc import Awaitable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.abc
import httpx

from cadenza._logging import get_logger
from cadenza._redact import redact
from cadenza.actors import (
    EventSink,
    RunControl,
    RunJournal,
    RunSetup,
    execute_run,
)
from cadenza.actors.run import (
    PermissionHook,
    PricesLike,
    Replay,
    StoredPolicy,
    ToolPolicy,
    caller_prices,
    letter_size,
    resume_refusal,
    resumed_policy,
    run_prices,
    unpriced,
)
from cadenza.errors import (
    CadenzaError,
    CorruptRecord,
    InputError,
    LeaseHeld,
    LeaseLost,
    MessageRefused,
    PolicyRefused,
    RunNeedsCode,
    StoreError,
    StoreFailed,
)
from cadenza.kernel import Clock, SystemClock
from cadenza.llm import Price, ProviderRegistry
from cadenza.protocols import (
    FINISHED,
    Event,
    RunResult,
)
from cadenza.store import (
    CancelCommand,
    Command,
    Fleet,
    Lease,
    LeaseHolder,
    MessageCommand,
    RunRow,
    RunStore,
    WorkerLoad,
    lease_lost,
    lease_ttl_from_environment,
    make_store,
)
from cadenza.workflow import (
    DEFAULT_MAX_CONCURRENCY,
    THINKING_LEVELS,
    WORKTREE_PER_STEP,
    LoadedWorkflow,
    ThinkingLevel,
    Workflow,
    load_workflow,
    resolve_inputs,
    validate_workflow,
)
from cadenza.workflow import WorkflowError as WorkflowError

from ._backoff import Backoff
from ._fork import read_fork, write_fork
from ._handle import SHUTTING_DOWN, DrivenRun, RunHandle
from ._queue import cancel_queued, fail_queued, submit_run
from ._rebuild import check_rebuildable
from ._resume import (
    finished_result,
    get_row,
    pending_inputs,
    prepare_resume,
    record_signal,
    resumable_runs,
    runs_to_prune,
    stored_document,
)
from ._roll import Load, Roll
from ._subscription import SubscriptionStatistics as SubscriptionStatistics

if TYPE_CHECKING:
    from cadenza.remote import Dispatcher
    from cadenza.telemetry import OpenTelemetry

__all__ = ["Runtime", "new_run_id"]

SHUTDOWN_DEADLINE = 10.0
"""Seconds a shutting-down runtime lets its runs' steps stop before stopping them outright."""

COMMAND_INTERVAL = 0.5
"""Seconds between two looks for commands sent through the store to the runs a
runtime drives: the most a `Runtime.cancel` or `Runtime.post_message` made in
another process waits before the run's owner acts (plus one store round trip)."""

RECOVERY_INTERVAL = 5.0
"""Most seconds between two looks for orphaned runs by a runtime with ``recover=True``."""

TAKEOVER_BACKOFF_CAP = 60.0
"""Most seconds a runtime with ``recover=True`` waits before taking over again a run
that the store failed each time it took it (the wait starts at one look's interval
and doubles at each failure, jittered)."""

_log = get_logger("cadenza.runtime")
_T = TypeVar("_T")


def _passing(error: Exception) -> bool:
    """Whether a takeover that failed with ``error`` may work at a later look.

    A store that is busy or unreachable (`StoreError`, or a driver's own error)
    may; a corrupt record or any other refusal of the run itself will not.
    """
    if isinstance(error, CorruptRecord):
        return False
    return isinstance(error, StoreError) or not isinstance(error, CadenzaError)


def _startable_later(error: Exception) -> bool:
    """Whether a queued run that failed to start may start at a later look: the store
    was busy or away, not the run's own record unreadable."""
    return _passing(error) and not isinstance(error, CorruptRecord)


def new_run_id() -> str:
    """A sortable, unique run id: UTC time plus randomness (``20261121T101500-3f9a1c``)."""
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class Runtime:
    """Runs workflows; one per process, owned by the service's lifespan.

    Args:
        store: Where runs are recorded: a `RunStore`, a path to a SQLite file, a
            ``postgresql://`` URL (the ``postgres`` extra; docs/deploying.md), or
            None for an in-memory store.
        clock: The clock for delays and timeouts (tests inject `FakeClock`).
        max_concurrency: Steps in parallel per run when a workflow does not say.
        default_model: The model of steps that name no agent (``provider:model``).
        default_thinking: The ``thinking`` level (``off``, ``low``, ``medium``,
            ``high``) of agents that set none; None leaves the provider's default.
        workers: Run leaf steps on remote workers: the endpoint to bind for them
            (``tcp://127.0.0.1:5555``), or a configured `cadenza.remote.Dispatcher`.
            The runtime starts and stops it; ``runtime.workers`` is the dispatcher.
        curve_keys: With ``workers`` as an endpoint: the CURVE key directory
            (``cadenza keys generate``); only authorized workers get in.
        insecure: With ``workers`` as an endpoint: allow a non-loopback address
            without keys.
        telemetry: OpenTelemetry spans for every run started or resumed
            (`cadenza.telemetry.OpenTelemetry`, the ``otel`` extra), and, for a
            supervisor (``recover`` or ``capacity``), the fleet's metrics. None:
            off, unless ``CADENZA_OTEL=1`` is set (`cadenza.telemetry.from_environment`).
        shutdown_deadline: Seconds the runs still going when the runtime shuts
            down get to stop their steps before they are stopped outright (see
            `RunHandle.cancel`); either way they are left resumable. None: wait
            for the steps however long they take.
        permissions: Asked before every tool call an agent's model makes: a
            hook ``hook(ToolRequest) -> bool | str | None`` (True allows, False
            or a reason denies, None leaves it to the rules; it may be async),
            or a `ToolPolicy` (a hook, the sandbox, rules, a person to ask).
            The workflow's own ``permissions:`` apply besides (docs/tools.md).
        lease_ttl: Seconds the lease of each run this runtime drives lasts
            unless renewed (renewed every third of that). Another process may
            take over a run whose lease expired: a supervisor takes a dead
            owner's run once the lease that owner took expires, whatever its
            own ``lease_ttl``. None: ``CADENZA_LEASE_TTL``, else 15 s;
            docs/durability.md.
        recover: Take over the store's orphaned runs (status ``running``, lease
            expired or free) and resume them, looking every
            ``recovery_interval`` seconds until the runtime stops.
        prices: Model prices over the shipped ones and the workflow's ``prices:``
            (docs/prices.md): a mapping ``model spec -> Price`` (or ``{input, output,
            cachedInput}``, USD per million tokens), or the path of a YAML or JSON
            file of them.
        capacity: Take queued runs (`submit`, from any process) from the store and
            start them while this runtime drives fewer than this many runs:
            the highest priority first, then the oldest, looking every
            ``recovery_interval`` seconds and whenever a run it drives ends.
            None: take none. A runtime with ``recover`` or ``capacity`` is a
            supervisor of the fleet: the store's roll records its capacity and
            load, and with ``workers`` where they connect
            (`Dispatcher.advertised`) and their load, for ``cadenza worker
            --store`` and ``cadenza fleet`` (docs/deploying.md).

    Raises:
        StoreError: ``store`` is a PostgreSQL URL and the ``postgres`` extra is missing.
        InsecureEndpoint: ``workers`` is not loopback and has neither keys nor ``insecure``.
        KeysError: ``curve_keys`` is incomplete.
        TelemetryUnavailable: ``CADENZA_OTEL=1`` but OpenTelemetry is not installed.
        CadenzaError: ``CADENZA_LEASE_TTL`` is not a number of seconds above 0.
    """

    def __init__(  # noqa: PLR0913 -- keyword-only options, each documented in docs/api.md
        self,
        *,
        store: RunStore | str | os.PathLike[str] | None = None,
        clock: Clock | None = None,
        max_concurrency: int | None = None,
        default_model: str | None = None,
        workers: str | Dispatcher | None = None,
        curve_keys: str | os.PathLike[str] | None = None,
        insecure: bool = False,
        telemetry: OpenTelemetry | None = None,
        shutdown_deadline: float | None = SHUTDOWN_DEADLINE,
        permissions: PermissionHook | ToolPolicy | None = None,
        lease_ttl: float | None = None,
        recover: bool = False,
        capacity: int | None = None,
        prices: PricesLike | None = None,
        default_thinking: ThinkingLevel | None = None,
    ) -> None:
        if default_thinking is not None and default_thinking not in THINKING_LEVELS:
            levels = ", ".join(THINKING_LEVELS)
            raise ValueError(f"default_thinking must be one of {levels}, not {default_thinking!r}")
        if lease_ttl is None:
            lease_ttl = lease_ttl_from_environment()
        elif lease_ttl <= 0:
            raise ValueError(f"lease_ttl must be above 0 seconds, not {lease_ttl}")
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be at least 1 run, not {capacity}")
        self.store: RunStore = make_store(store)
        self.capacity = capacity
        self._wake = anyio.Event()  # set when a run ends: room to take a queued one
        self.lease_ttl = lease_ttl
        self.recover = recover
        self.recovery_interval = min(RECOVERY_INTERVAL, lease_ttl / 3)
        """Seconds between two looks for orphaned runs (``recover=True``): a third of
        ``lease_ttl``, at most `RECOVERY_INTERVAL`. A run whose owner died is taken
        over within ``lease_ttl`` plus this after the owner's last renewal."""
        self._recovery: anyio.CancelScope | None = None
        self._roll: Roll | None = None  # a supervisor with workers: on the fleet's roll
        self._roll_scope: anyio.CancelScope | None = None
        self._commands: anyio.CancelScope | None = None
        self.command_interval = COMMAND_INTERVAL
        """Seconds between two looks for commands (`cancel`, `post_message`) that
        other processes sent to the runs this runtime drives."""
        self._unrecoverable: set[str] = set()  # orphans whose resume failed: not retried
        # Runs the store failed when this runtime took them over: when to try again.
        self._backoff = Backoff(self.recovery_interval, TAKEOVER_BACKOFF_CAP)
        self.clock: Clock = clock or SystemClock()
        self.max_concurrency = max_concurrency
        self.shutdown_deadline = shutdown_deadline
        self.tool_policy: ToolPolicy | None = (
            permissions
            if permissions is None or isinstance(permissions, ToolPolicy)
            else ToolPolicy(hook=permissions)
        )
        """What every run adds to its workflow's tool permissions."""
        self.default_model = default_model or os.environ.get("CADENZA_MODEL")
        self.default_thinking: ThinkingLevel | None = default_thinking
        self.prices: dict[str, Price] = caller_prices(prices)
        """The caller's model prices, over the shipped ones and each workflow's."""
        self._group: anyio.abc.TaskGroup | None = None
        self._runs: dict[str, DrivenRun] = {}
        """The runs this runtime drives now, by id (a finished one is dropped)."""
        self._http: httpx.AsyncClient | None = None
        self._http_lock = anyio.Lock()
        if isinstance(workers, str):
            from cadenza.remote import Dispatcher  # pyzmq is imported only by runtimes that use it

            workers = Dispatcher(
                workers, curve_keys=curve_keys, insecure=insecure, clock=self.clock
            )
        self.workers: Dispatcher | None = workers
        """The remote workers' dispatcher (None: steps run in this process)."""
        if telemetry is None:
            from cadenza.telemetry import from_environment  # opentelemetry only if switched on

            telemetry = from_environment()
        self.telemetry: OpenTelemetry | None = telemetry
        """Where runs' spans go (None: nowhere, and runs pay nothing for it)."""

    async def _shared_http(self) -> httpx.AsyncClient:
        """The HTTP client every run's model calls share, built on first use.

        Building one loads the CA bundle (tens of milliseconds of blocking work),
        so it happens once per runtime, in a worker thread, not once per run.
        """
        if self._http is None:
            async with self._http_lock:
                if self._http is None:
                    self._http = await anyio.to_thread.run_sync(ProviderRegistry.http_client)
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
        if self.recover or self.capacity is not None:
            self._recovery = anyio.CancelScope()
            self._group.start_soon(self._recover, self._recovery, name="cadenza recovery")
            self._roll = Roll(
                self.store,
                None if self.workers is None else self.workers.advertised,
                self.capacity,
                self._load,
                self.lease_ttl,
                None if self.telemetry is None else self.telemetry.fleet_metrics(),
            )
            self._roll_scope = anyio.CancelScope()
            self._group.start_soon(
                self._stay_on_roll, self._roll, self._roll_scope, name="cadenza roll"
            )
        self._commands = anyio.CancelScope()
        self._group.start_soon(self._take_commands, self._commands, name="cadenza commands")
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
            if self._recovery is not None:
                self._recovery.cancel()  # takes nothing more over while it shuts down
            if self._roll_scope is not None:
                self._roll_scope.cancel()
            if self._commands is not None:
                self._commands.cancel()
            # Interrupted, not cancelled: each run stays resumable (status running).
            for run in list(self._runs.values()):
                if not run.done:
                    run.interrupt(SHUTTING_DOWN, deadline=self.shutdown_deadline)
            if isinstance(exc, Exception):
                # The caller's own error goes out as itself, not wrapped in a group.
                group.cancel_scope.cancel()
                await group.__aexit__(None, None, None)
            else:
                await group.__aexit__(exc_type, exc, traceback)
        finally:
            if self._roll is not None:  # workers stop looking for this one: it is going
                await self._roll.leave()
                self._roll = None
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
        if self.workers is not None:
            self._check_remote(document)
        self._check_prices(document)
        resolved = resolve_inputs(document.workflow.inputs, inputs or {})
        run_id = run_id or new_run_id()
        if run_id in self._runs or await self.store.get_run(run_id) is not None:
            raise InputError(f"run id {run_id!r} is already taken in this store")
        limit = (
            max_concurrency
            or document.workflow.options.max_concurrency
            or self.max_concurrency
            or DEFAULT_MAX_CONCURRENCY
        )
        journal = RunJournal(run_id, document.workflow.name, self.store)
        if on_event is not None:
            journal.subscribe(on_event)
        run = DrivenRun(run_id, journal, self.store, RunControl(), self.clock)
        await self._launch(run, document, resolved, limit, LeaseHolder.for_this_process())
        return run.handle

    def _check_prices(self, document: LoadedWorkflow) -> None:
        """Refuses a workflow with a cost budget over a model that has no price.

        Raises:
            WorkflowError: A step under a ``maxCost`` calls a model with no price.
        """
        problems = unpriced(document, run_prices(document, self.prices), self.default_model)
        if problems:
            raise WorkflowError(problems)

    def _check_remote(self, document: LoadedWorkflow) -> None:
        """Refuses a workflow that needs the supervisor's process where workers run steps.

        Raises:
            InputError: It declares MCP servers, worktree-per-step isolation or tool
                permissions.
        """
        if document.workflow.mcp_servers:
            raise InputError(
                "this workflow declares mcpServers, and MCP servers run in the supervisor's"
                " process: run it without remote workers (its steps would run elsewhere)"
            )
        if document.workflow.options.isolation == WORKTREE_PER_STEP:
            raise InputError(
                "options.isolation: worktree-per-step makes worktrees of this machine's"
                " repository, and remote workers run steps elsewhere: run it without workers"
            )
        if _has_permissions(document, self.tool_policy):
            raise InputError(
                "tool permissions are checked in the supervisor's process, and remote workers"
                " run agents' tools without them: run this workflow without remote workers"
            )

    async def _launch(
        self,
        driven: DrivenRun,
        document: LoadedWorkflow,
        inputs: dict[str, Any],
        limit: int,
        holder: LeaseHolder,
        replay: Replay | None = None,
        *,
        lease: Lease | None = None,
        policy: tuple[ToolPolicy | None, ToolPolicy | None] | None = None,
    ) -> None:
        """Starts the run in the task group, under ``holder``'s lease; returns once the
        run is recorded in the store (or has failed), so it can be looked up at once.

        A resumed run has its ``lease`` already (its caller must hear of a conflict);
        a new run takes its lease before it is recorded, so that no supervisor
        taking over orphaned runs mistakes it for one. ``policy``: a resumed
        run's own tool policy and what this runtime adds (`resumed_policy`).
        """
        assert self._group is not None
        run_id = driven.run_id
        own, added = policy or (self.tool_policy, None)
        self._runs[run_id] = driven

        async def run(
            *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
        ) -> None:
            told = False

            def recorded() -> None:
                nonlocal told
                if not told:
                    told = True
                    task_status.started()

            def stored() -> None:  # the run's start is committed: the store holds it
                driven.stored = True
                recorded()

            # Spans from the run's events (start and resume both come here).
            detach = None if self.telemetry is None else self.telemetry.attach(driven.journal)
            try:
                held = lease or await self._first_lease(run_id, holder)
                result = await self._drive(
                    driven,
                    held,
                    RunSetup(
                        run_id=run_id,
                        document=document,
                        inputs=inputs,
                        journal=driven.journal,
                        store=self.store,
                        clock=self.clock,
                        max_concurrency=limit,
                        default_model=self.default_model,
                        default_thinking=self.default_thinking,
                        prices=run_prices(document, self.prices),
                        control=driven.control,
                        http=self._shared_http,
                        dispatcher=self.workers,
                        replay=replay,
                        recorded=stored,
                        tool_policy=own,
                        added_policy=added,
                    ),
                )
                self.store.release_lease(run_id, holder)
                await self.store.flush(run_id)  # released before anyone hears the run ended
            except Exception as error:  # delivered to whoever awaits the result
                self.store.release_lease(run_id, holder)
                driven.finish(error)
                return
            except BaseException as error:  # cancellation: the awaiting caller learns it too
                self.store.release_lease(run_id, holder)
                driven.finish(driven.abandoned(error))
                raise
            finally:
                recorded()
                if detach is not None:
                    detach()  # ends the spans a cancelled or crashed run left open
                # A finished run lives on in the store; keeping its handle (and
                # journal) here would grow a long-lived service without bound.
                if self._runs.get(run_id) is driven:
                    del self._runs[run_id]
            driven.finish(result)

        await self._group.start(run, name=f"cadenza run {run_id}")

    async def _first_lease(self, run_id: str, holder: LeaseHolder) -> Lease:
        """A new run's lease, taken before anything of the run is recorded.

        Raises:
            StoreFailed: The store could not be reached: nothing of the run is stored.
        """
        try:
            return await self.store.acquire_lease(run_id, holder, ttl=self.lease_ttl)
        except LeaseHeld:
            raise
        except StoreError as error:
            raise _unrecorded(run_id, str(error), resumable=False) from error

    async def _drive(self, driven: DrivenRun, lease: Lease, setup: RunSetup) -> RunResult:
        """Runs ``setup`` to its end while a task beside it renews ``lease``.

        Raises:
            LeaseLost: The lease was lost: the run was stopped where it stood
                (found so too when the store failed its writes meanwhile).
            StoreFailed: The store failed the run's writes: the run was stopped
                where it stood, and its lease is given back by the caller.
        """
        loop = asyncio.get_running_loop()
        driven.lease = lease

        def stop() -> None:  # any thread: the SQLite store finds it in its writer thread
            with contextlib.suppress(RuntimeError):  # a closed loop: nothing left to stop
                loop.call_soon_threadsafe(driven.lose)

        lease.on_stop = stop
        result: RunResult | None = None
        failure: Exception | None = None
        async with anyio.create_task_group() as renewal:
            renewal.start_soon(_renew, self.store, lease, name=f"cadenza lease {setup.run_id}")
            with anyio.CancelScope() as scope:  # cancelled by a deadline, or a stopped lease
                driven.scope = scope
                if not lease.stopped:
                    try:
                        result = await execute_run(setup)
                    except Exception as raised:  # raised below as itself, not in a task group's
                        failure = raised
            renewal.cancel_scope.cancel()
        store_failed = lease.failed is not None or isinstance(failure, StoreError)
        if store_failed and lease.lost is None:
            await _lost_meanwhile(self.store, lease)
        if lease.lost is not None:
            error = lease_lost(lease, lease.lost)
            _log.warning(
                "lease lost: stopped driving the run", run_id=setup.run_id, error=str(error)
            )
            raise error
        if store_failed:
            resumable = setup.replay is not None or driven.stored
            why = lease.failed or str(failure)
            raise _unrecorded(setup.run_id, why, resumable=resumable) from failure
        if failure is not None:
            raise failure
        if result is None:  # its deadline passed: stopped outright
            result = await driven.stopped_outright()
        return result

    async def _recover(self, scope: anyio.CancelScope) -> None:
        """Takes over orphaned and answered runs (``recover``), and takes queued runs
        (``capacity``), every ``recovery_interval`` seconds; queued ones also as soon
        as a run ends."""
        with scope:
            while True:
                self._wake = anyio.Event()  # before the look: a run ending during it counts
                if self.recover:
                    await self._take_over()
                if self.capacity is not None:
                    await self._take_queued(self.capacity)
                with anyio.move_on_after(self.recovery_interval):
                    await self._wake.wait()

    async def _stay_on_roll(self, roll: Roll, scope: anyio.CancelScope) -> None:
        """Keeps this supervisor on the fleet's roll until the runtime shuts down."""
        with scope:
            await roll.beat_until_cancelled()

    def _load(self) -> Load:
        """The runs this runtime drives, its steps waiting for a worker and on workers, and
        its workers' load."""
        runs = sum(not run.done for run in self._runs.values())
        if self.workers is None:
            return Load(runs)
        statistics = self.workers.statistics()
        pool = tuple(
            WorkerLoad(worker.name, worker.capacity, worker.in_flight)
            for worker in self.workers.workers
        )
        return Load(runs, statistics.queued, statistics.in_flight, pool)

    async def _take_queued(self, capacity: int) -> None:
        """Starts queued runs of the store while this runtime drives fewer than ``capacity``."""
        while sum(not run.done for run in self._runs.values()) < capacity:
            holder = LeaseHolder.for_this_process()
            try:
                taken = await self.store.take_queued(holder, ttl=self.lease_ttl)
            except Exception as error:
                _log.warning("cannot take a queued run", error=redact(str(error)))
                return
            if taken is None:
                return  # none waits
            row, lease = taken
            try:
                driven = await self._start_queued(row, holder, lease)
            except Exception as error:
                if _startable_later(error):  # left queued: look again at the next look
                    why = redact(str(error))
                    _log.warning("cannot start the queued run yet", run_id=row.run_id, error=why)
                    return
                _log.error("cannot start the queued run", run_id=row.run_id, error=str(error))
                continue
            driven.when_ended(lambda _: self._wake.set())
            _log.info("took a queued run", run_id=row.run_id, priority=row.priority)

    async def _start_queued(self, row: RunRow, holder: LeaseHolder, lease: Lease) -> DrivenRun:
        """Starts a queued run this runtime took (``lease``): a new run, from its document.

        A run that cannot start here at all (its workflow names code this process
        lacks, its document is unreadable, this runtime's policy refuses it) ends
        ``failed``, saying why, rather than stay at the head of the queue.

        Raises:
            Exception: The store failed (the lease is given back, the run stays queued),
                or the run cannot start (it is ended failed, as above).
        """
        run_id = row.run_id
        try:
            document, inputs, policy = await stored_document(self.store, row)
            check_rebuildable(run_id, document)
            self._check_policy(run_id, document, policy)
            if self.workers is not None:
                self._check_remote(document)
            self._check_prices(document)
        except Exception as error:
            if not _startable_later(error):
                fail_queued(self.store, row, error)
            self.store.release_lease(run_id, holder)
            await self.store.flush()
            raise
        journal = RunJournal(run_id, row.workflow, self.store)
        driven = DrivenRun(run_id, journal, self.store, RunControl(), self.clock)
        limit = (
            document.workflow.options.max_concurrency
            or self.max_concurrency
            or DEFAULT_MAX_CONCURRENCY
        )
        own = resumed_policy(policy, self.tool_policy)
        await self._launch(driven, document, inputs, limit, holder, lease=lease, policy=own)
        return driven

    async def submit(
        self,
        workflow: LoadedWorkflow | Workflow | str | os.PathLike[str],
        *,
        inputs: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        priority: int | None = None,
    ) -> str:
        """Queues a run and returns its id at once: a runtime with a ``capacity`` (this
        one or another sharing the store: ``cadenza supervise``) will start it.

        The run is recorded ``queued`` with its workflow, inputs and this runtime's
        tool policy, as `start` records them. Runs with a higher ``priority``
        (None counts as 0) are taken first, then the oldest.

        Raises:
            WorkflowError: The workflow is invalid (each problem located).
            InputError: An input is missing, unknown or of the wrong type, or the
                run id is already taken.
        """
        if self._group is None:
            raise CadenzaError("the runtime is not running; use it as 'async with Runtime()'")
        document = _as_document(workflow)
        self._check_prices(document)
        resolved = resolve_inputs(document.workflow.inputs, inputs or {})
        run_id = run_id or new_run_id()
        await submit_run(
            self.store, document, resolved, run_id, priority=priority, policy=self.tool_policy
        )
        return run_id

    async def _take_over(self) -> None:
        """Resumes each run of the store that nobody drives and that can go on.

        Those are orphaned runs (their owner stopped renewing its lease, or gave
        it back) and waiting runs a person answered since they stopped
        (`signal`, through any replica). A run that the store failed when this
        runtime last took it waits out its backoff first.
        """
        try:
            rows = await self.store.orphaned_runs(limit=1000)
            rows += await self.store.answered_runs(limit=1000)
        except Exception as error:
            _log.warning("cannot look for runs to take over", error=redact(str(error)))
            return
        now = time.monotonic()
        self._backoff.forget_stale(now)
        for row in rows:
            run_id = row.run_id
            if run_id in self._runs or run_id in self._unrecoverable:
                continue
            if not self._backoff.ready(run_id, now):
                continue
            try:
                driven = await self._resume(run_id)
            except LeaseHeld:
                continue  # another supervisor won the race (or its owner came back)
            except RunNeedsCode as error:  # left as it was, for the application that built it
                self._unrecoverable.add(row.run_id)
                _log.warning("cannot take the run over here", run_id=row.run_id, error=str(error))
                continue
            except Exception as error:
                if _passing(error):  # busy, or away for a moment: look again later
                    wait = self._backoff.failed(run_id, time.monotonic())
                    _log.warning(
                        "cannot take the run over yet",
                        run_id=run_id,
                        error=redact(str(error)),
                        retry_in=round(wait, 1),
                    )
                else:  # a corrupt record, an invalid workflow: resuming again will not help
                    self._unrecoverable.add(run_id)
                    _log.error("cannot take the run over", run_id=run_id, error=str(error))
                continue
            # Nobody awaits a run taken over: its end is in the store, and in the log.
            driven.when_ended(functools.partial(self._taken_run_ended, run_id))
            _log.info("took the run over", run_id=run_id)

    def _taken_run_ended(self, run_id: str, result: asyncio.Future[RunResult]) -> None:
        """Notes how a run this runtime took over ended: a store failure backs off."""
        error = None if result.cancelled() else result.exception()
        if not isinstance(error, StoreFailed):
            self._backoff.succeeded(run_id)
            return
        wait = self._backoff.failed(run_id, time.monotonic())
        _log.warning(
            "cannot record the run: stopped driving it and gave it back",
            run_id=run_id,
            error=redact(str(error)),
            retry_in=round(wait, 1),
        )

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

        The run keeps the tool permission policy it was started with; this
        runtime's ``permissions`` may add deny rules, the sandbox, a hook or a
        person that refuse more (docs/tools.md, "On resume").

        Raises:
            RunNotFound: The store has no such run.
            LeaseHeld: Another live process (or this runtime) is driving the run.
            CorruptRecord: A stored record is unreadable or inconsistent; nothing runs.
            RunNeedsCode: The run's workflow names Python code (a predicate, a
                handler) this process does not have: build the workflow here
                first. Nothing runs and nothing is written.
            PolicyRefused: The run was started with a permission hook and this
                runtime has none, or this runtime's allow rules would widen
                the run's; nothing of the run changes.
        """
        driven = await self._resume(run_id, max_concurrency=max_concurrency, on_event=on_event)
        return driven.handle

    async def _resume(
        self,
        run_id: str,
        *,
        max_concurrency: int | None = None,
        on_event: EventSink | None = None,
        cancel: str | None = None,
    ) -> DrivenRun:
        """`resume`; with ``cancel``, the run is cancelled before any step starts."""
        if self._group is None:
            raise CadenzaError("the runtime is not running; use it as 'async with Runtime()'")
        row = await get_row(self.store, run_id)
        journal = RunJournal(run_id, row.workflow, self.store)
        if on_event is not None:
            journal.subscribe(on_event)
        driven = DrivenRun(run_id, journal, self.store, RunControl(), self.clock)
        if cancel is not None:
            driven.control.cancel(cancel)
        if row.status in FINISHED:
            driven.finish(finished_result(row))
            return driven
        if row.status == "queued":
            raise CadenzaError(
                f"run {run_id!r} is queued: a supervisor with capacity starts it"
                " (cadenza supervise --capacity N); there is nothing to resume"
            )
        running = self._runs.get(run_id)
        if running is not None and not running.done:
            raise LeaseHeld(f"run {run_id!r} is running in this runtime already")
        holder = LeaseHolder.for_this_process()
        lease = await self.store.acquire_lease(run_id, holder, ttl=self.lease_ttl)
        try:
            prepared = await _renewing(self.store, lease, prepare_resume(self.store, row))
            if cancel is None:  # a run cancelled before any step starts needs none of its code
                check_rebuildable(run_id, prepared.document)
                self._check_policy(run_id, prepared.document, prepared.policy)
        except BaseException:
            self.store.release_lease(run_id, holder)
            await self.store.flush()
            raise
        driven.resumed_after = prepared.replay.last_seq
        options = prepared.document.workflow.options
        limit = (
            max_concurrency
            or options.max_concurrency
            or self.max_concurrency
            or DEFAULT_MAX_CONCURRENCY
        )
        await self._launch(
            driven,
            prepared.document,
            prepared.inputs,
            limit,
            holder,
            prepared.replay,
            lease=lease,
            policy=resumed_policy(prepared.policy, self.tool_policy),
        )
        return driven

    async def fork(
        self,
        run_id: str,
        *,
        at: str,
        inputs: Mapping[str, Any] | None = None,
        set: Mapping[str, Any] | None = None,
        new_run_id: str | None = None,
        on_event: EventSink | None = None,
    ) -> RunHandle:
        """Starts a new run that goes again from ``at``, reusing what run ``run_id``
        recorded before ``at`` first started (time travel; docs/durability.md).

        The new run copies the source's workflow and inputs, its events up to the
        start of ``at``, and the records (and recorded calls) of the addresses that
        had finished by then: those are replayed, not run; ``at`` and everything
        after it run live. Its row names its parent (``parent_run_id``,
        ``parent_address``). Nothing of the source is written or locked: a run
        still going, here or in another process, can be forked.

        Args:
            run_id: The run to fork.
            at: The address to run again from (``draft``, ``review.2.write``): one
                the source started.
            inputs: Inputs that replace the source's (the others stay), checked as
                a new run's are.
            set: New outputs of reused steps, by address: a string is the step's
                text (its result null), any other JSON value its result (its text
                that value as JSON); the step counts as ``completed``.
            new_run_id: The fork's id (default: a new unique id).
            on_event: Called with every event of the fork, from the first; must not block.

        Raises:
            RunNotFound: The store has no run ``run_id``.
            ForkRefused: The source never started ``at``, or ``set`` names a step
                the fork does not reuse. Nothing is written.
            InputError: An input or an output given does not fit; the id is taken.
            CorruptRecord: A record of the source does not read back; nothing is written.
            RunNeedsCode: The workflow names Python code this process lacks.
            PolicyRefused: As for `resume`: the source's tool policy cannot be kept here.
        """
        if self._group is None:
            raise CadenzaError("the runtime is not running; use it as 'async with Runtime()'")
        source = await get_row(self.store, run_id)
        fork_id = new_run_id or _fresh_run_id()
        if fork_id in self._runs or await self.store.get_run(fork_id) is not None:
            raise InputError(f"run id {fork_id!r} is already taken in this store")
        fork = await read_fork(self.store, source, at, inputs=inputs, edits=set)
        check_rebuildable(run_id, fork.document)
        self._check_policy(run_id, fork.document, fork.policy)
        journal = RunJournal(fork_id, source.workflow, self.store)
        if on_event is not None:
            journal.subscribe(on_event)
        driven = DrivenRun(fork_id, journal, self.store, RunControl(), self.clock)
        holder = LeaseHolder.for_this_process()
        lease = await self._first_lease(fork_id, holder)  # taken before it is recorded
        try:
            replay = write_fork(self.store, fork, fork_id)
            await self.store.flush(fork_id)
        except BaseException:
            self.store.release_lease(fork_id, holder)
            await self.store.flush()
            raise
        driven.resumed_after = replay.last_seq
        options = fork.document.workflow.options
        limit = options.max_concurrency or self.max_concurrency or DEFAULT_MAX_CONCURRENCY
        policy = resumed_policy(fork.policy, self.tool_policy)
        await self._launch(
            driven, fork.document, fork.inputs, limit, holder, replay, lease=lease, policy=policy
        )
        return driven.handle

    async def forks(self, run_id: str) -> list[RunRow]:
        """The runs forked from ``run_id``, oldest first.

        Raises:
            RunNotFound: The store has no such run.
        """
        await self.get_run(run_id)
        return await self.store.forks(run_id)

    def _check_policy(
        self, run_id: str, document: LoadedWorkflow, stored: StoredPolicy | None
    ) -> None:
        """Refuses to resume a run whose tool permission policy this runtime cannot keep.

        Raises:
            PolicyRefused: Its hook is not here, an allow rule of this runtime
                would widen it, or remote workers would run its tools unchecked.
        """
        problem = resume_refusal(stored, self.tool_policy)
        if problem is not None:
            raise PolicyRefused(f"run {run_id!r} is left as it is: {problem}")
        own, added = resumed_policy(stored, self.tool_policy)
        if self.workers is not None and _has_permissions(document, own or added):
            raise PolicyRefused(
                f"run {run_id!r} is left as it is: it has tool permissions, which are checked"
                " in the supervisor's process, and remote workers run agents' tools without"
                " them: resume it in a runtime without remote workers"
            )

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

    async def cancel(
        self, run_id: str, reason: str = "cancelled by the caller"
    ) -> RunHandle | None:
        """Cancels a run wherever it is driven; it ends ``cancelled`` (see `RunHandle.cancel`).

        A run this runtime drives is cancelled at once. A run another process
        drives (a replica sharing the store) is cancelled by that process when
        it next looks for commands, within its `command_interval`; the request
        waits in the store, so if that process dies first, whoever takes the
        run over cancels it. A run nobody drives (waiting for a person, or
        interrupted) is taken up here only to be cancelled: no step starts.

        Returns:
            The run's handle when this runtime drives it (its result tells when
            the run has ended), or None when another process was asked.

        Raises:
            RunNotFound: No such run.
            CadenzaError: The run has finished.
        """
        driven = self._runs.get(run_id)
        if driven is not None and not driven.done:
            driven.handle.cancel(reason)
            return driven.handle
        row = await get_row(self.store, run_id)
        if row.status in FINISHED:
            raise CadenzaError(f"run {run_id!r} has finished ({row.status}); nothing to cancel")
        try:
            if row.status == "queued" and (ended := await cancel_queued(self.store, row, reason)):
                queued = DrivenRun(
                    run_id,
                    RunJournal(run_id, row.workflow, self.store),
                    self.store,
                    RunControl(),
                    self.clock,
                )
                queued.finish(ended)
                return queued.handle
            return (await self._resume(run_id, cancel=reason)).handle
        except LeaseHeld:  # another process drives it: that process cancels it
            await self.store.send_command(run_id, CancelCommand(reason))
            return None

    async def post_message(
        self, run_id: str, target: str, text: str, *, kind: str = "info"
    ) -> None:
        """Sends a message to a step of a run wherever it is driven (`RunHandle.post_message`).

        A run this runtime drives gets it at once; a run another process drives
        gets it when that process next looks for commands (within its
        `command_interval`), or, if that process dies first, from whoever takes
        the run over. The store keeps at most `WAITING_COMMANDS` messages
        (`WAITING_COMMAND_BYTES`) for a run; the process that takes them
        applies the run's own bound, and logs what that refuses.

        Raises:
            MessageRefused: The run (or the store, for a run driven elsewhere)
                already holds as many messages waiting as it may, or the text is
                larger than a step's inbox holds. Nothing is recorded.
            RunNotFound: No such run.
            CadenzaError: The run is not running (it has finished or waits for a person).
        """
        driven = self._runs.get(run_id)
        if driven is not None and driven.takes_messages:
            await driven.handle.post_message(target, text, kind=kind)
            return
        letter_size(run_id, text)  # too large for any inbox: refused here, not by the owner
        row = await get_row(self.store, run_id)
        if row.status != "running":
            raise CadenzaError(f"run {run_id!r} is {row.status}; it takes no messages")
        await self.store.send_command(run_id, MessageCommand(target, text, kind))

    async def _take_commands(self, scope: anyio.CancelScope) -> None:
        """Carries out, every `command_interval`, what other processes sent to our runs."""
        with scope:
            while True:
                await anyio.sleep(self.command_interval)
                ready = [run_id for run_id, driven in self._runs.items() if driven.takes_messages]
                if not ready:
                    continue
                try:
                    commands = await self.store.take_commands(ready)
                except Exception as error:  # the store away for a moment: the runs' writes
                    # fail too if it stays away, and say so; this look is tried again
                    _log.info("cannot look for commands", error=redact(str(error)))
                    continue
                refused: dict[str, int] = {}
                for run_id, command in commands:
                    await self._carry_out(run_id, command, refused)
                for run_id, count in refused.items():  # one line for a flood, not one a message
                    _log.warning("messages refused", run_id=run_id, refused=count)

    async def _carry_out(self, run_id: str, command: Command, refused: dict[str, int]) -> None:
        driven = self._runs.get(run_id)
        if driven is None or driven.done:  # it ended since we looked: nothing left to do
            _log.info("command for an ended run dropped", run_id=run_id, command=command)
            return
        if isinstance(command, CancelCommand):
            driven.handle.cancel(command.reason)
            return
        try:
            await driven.handle.post_message(command.target, command.text, kind=command.kind)
        except MessageRefused:  # the run's backlog is full: counted, logged once a look
            refused[run_id] = refused.get(run_id, 0) + 1
        except CadenzaError as error:
            _log.warning("message not delivered", run_id=run_id, error=str(error))

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
        driven = self._runs.get(run_id)
        return None if driven is None else driven.handle

    async def result(self, run_id: str) -> RunResult:
        """Waits for a run this runtime drives to end, or reads a finished run's result.

        Raises:
            RunNotFound: The store has no such run.
            CadenzaError: The run is neither finished nor driven by this runtime
                (it is waiting for input, or was interrupted: `resume` it).
        """
        running = self._runs.get(run_id)
        if running is not None:
            return await running.handle.result()
        row = await get_row(self.store, run_id)
        if row.status == "queued":
            raise CadenzaError(f"run {run_id!r} is queued: a supervisor with capacity starts it")
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

    async def fleet(self) -> Fleet:
        """The fleet of the store: its live supervisors, with their load and their
        workers', and its queued runs (what ``cadenza fleet`` shows).

        Raises:
            StoreError: The store cannot be read.
        """
        supervisors = await self.store.live_supervisors()
        return Fleet(supervisors, await self.store.queue_depth(), time.time())

    async def stored_events(self, run_id: str) -> list[Event]:
        """A stored run's events, in order.

        Raises:
            RunNotFound: The store has no such run.
        """
        await self.get_run(run_id)
        return await self.store.events(run_id)


_fresh_run_id = new_run_id  # `Runtime.fork`'s keyword of that name hides the function


def _unrecorded(run_id: str, why: str, *, resumable: bool) -> StoreFailed:
    """The error of a run that the store failed: ``why``, and whether it can be resumed."""
    if resumable:
        return StoreFailed(f"run {run_id!r} stopped: {why}", run_id=run_id, resumable=True)
    return StoreFailed(
        f"run {run_id!r} could not be recorded: {why}", run_id=run_id, resumable=False
    )


async def _renew(store: RunStore, lease: Lease) -> None:
    """Renews ``lease`` every third of its ttl until cancelled, lost or failed.

    A renewal that fails for another reason (the database unreachable for a
    moment) is tried again at the next third: two misses in a row still leave
    the lease a third of its ttl. If it does expire meanwhile and another
    process takes the run, the fence refuses this one's writes all the same.
    The miss is logged at info only: if the store stays away, the run's next
    write fails and says so (`StoreFailed`).
    """
    while not lease.stopped:
        await anyio.sleep(lease.ttl / 3)
        try:
            await store.renew_lease(lease)
        except LeaseLost:
            return  # the store marked it lost: the run is being stopped
        except StoreError as error:
            _log.info("cannot renew a lease", run_id=lease.run_id, error=redact(str(error)))


async def _renewing(store: RunStore, lease: Lease, work: Awaitable[_T]) -> _T:
    """Awaits ``work`` while a task beside it renews ``lease``.

    Reading a large run's journal before it resumes takes longer than a short
    ttl (about 4 s for 50,000 recorded items on PostgreSQL): unrenewed, the lease
    would expire meanwhile and another supervisor take the run, and so on for ever.
    """
    failure: Exception | None = None
    async with anyio.create_task_group() as renewal:
        renewal.start_soon(_renew, store, lease, name=f"cadenza lease {lease.run_id}")
        try:
            done = await work
        except Exception as raised:  # raised below as itself, not in a task group's
            failure = raised
        finally:
            renewal.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return done


async def _lost_meanwhile(store: RunStore, lease: Lease) -> None:
    """After the store failed the run's writes: marks ``lease`` lost if another process
    took the run over meanwhile.

    A process paused inside a write transaction (SIGSTOP, a frozen VM) finds, once
    continued, its session ended by the server (``IDLE_IN_TRANSACTION``) and its
    batch failed. Its run may well have been taken over meanwhile: then it has lost
    the run, not a write, and must say so rather than give the lease back. A
    renewal asks the store (it refuses a changed fence); a store that does not
    answer within the lease's ttl leaves the run failed, as before.
    """
    with anyio.move_on_after(lease.ttl), contextlib.suppress(LeaseLost, StoreError):
        await store.renew_lease(lease)


def _as_document(workflow: LoadedWorkflow | Workflow | str | os.PathLike[str]) -> LoadedWorkflow:
    if isinstance(workflow, LoadedWorkflow):
        return workflow
    if isinstance(workflow, Workflow):
        problems = validate_workflow(workflow)
        if problems:
            raise WorkflowError(tuple(problems))
        return LoadedWorkflow(workflow=workflow, path=None, base_dir=Path.cwd(), includes={})
    return load_workflow(workflow)


def _has_permissions(document: LoadedWorkflow, policy: ToolPolicy | None) -> bool:
    """Whether a run of ``document`` would check any tool call."""
    workflow = document.workflow
    rules = workflow.permissions
    return (
        policy is not None
        or bool(rules.allow or rules.deny)
        or any(agent.permissions is not None for agent in workflow.agents.values())
    )
