"""The run store interface (`RunStore`), the rows it lists and the commands it carries.

A store keeps what a run must not lose: the run row, every event, and the latest
record of every executed address. Writes are queued without waiting (they are
cheap and ordered); `RunStore.flush` is the durability point: when it returns,
everything queued before it is on disk. Controllers flush at step boundaries,
before anything that depends on the step starts.

For resuming, a store also keeps the run's document (the workflow and inputs it
was started with, so a resumed run replays what actually ran, whatever happened
to the file since) and the run's lease (`Lease`: which process drives it, until
when, and the fencing token its writes carry; ``_lease.py``).

And a store carries commands to whoever drives a run (`CancelCommand`,
`MessageCommand`): a process that does not drive the run records one
(`RunStore.send_command`), and the run's owner takes it (`RunStore.take_commands`)
when it next looks, every `cadenza.Runtime.command_interval` seconds. That is
how ``cancel`` and ``post_message`` reach a run driven by another replica, and
why they outlive a takeover: the command waits for the run's next owner.

The messages waiting in a store for a run are bounded (`WAITING_COMMANDS`,
`WAITING_COMMAND_BYTES`): a run whose owner is stalled or gone, with nobody
taking it over, must not let posts fill the store. Past the bound
`RunStore.send_command` refuses a message (`MessageRefused`) and records
nothing; a cancel is always recorded.

Last, a store keeps the fleet's roll of supervisors (`SupervisorRow`): each
supervisor with remote workers says, every third of its lease, where its
workers connect, its capacity and how much it has waiting
(`RunStore.beat_supervisor`); a row not renewed within its time to live is a
supervisor that died, left out of `RunStore.live_supervisors` and deleted by
the next beat. That roll is how ``cadenza worker --store`` finds every
supervisor of the fleet, and, with the queue's depth (`RunStore.queue_depth`),
what ``cadenza fleet`` shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import msgspec

from cadenza._logging import get_logger
from cadenza.errors import MessageRefused
from cadenza.protocols import CallRecord, Event, RunResult, RunStatus, SignalReceived, StepRecord

from ._lease import DEFAULT_LEASE_TTL, Lease, LeaseHolder

__all__ = [
    "ANSWERED",
    "NO_POOL",
    "WAITING_COMMANDS",
    "WAITING_COMMAND_BYTES",
    "CancelCommand",
    "Command",
    "Fleet",
    "MessageCommand",
    "QueueDepth",
    "RunRow",
    "RunStore",
    "SupervisorRow",
    "WorkerLoad",
    "command_bounds",
    "encode_command",
    "encode_pool",
    "is_under",
    "read_commands",
    "read_supervisor",
    "refuse_command",
]


class RunRow(msgspec.Struct, frozen=True):
    """A run as the store lists it.

    Attributes:
        run_id: The run's id.
        workflow: The workflow's ``name``.
        path: The workflow file the run came from, when there is one.
        status: ``queued``, ``running``, ``completed``, ``failed``, ``cancelled`` or
            ``waiting``.
        inputs: The run's inputs after defaults and coercion.
        created_at: Epoch seconds when the run started.
        updated_at: Epoch seconds of the last status change.
        result: The result JSON once the run has ended, else None.
        parent_run_id: The run this one was forked from (`Runtime.fork`), else None.
        parent_address: The address it was forked at: what ran from there on is its own.
        priority: A queued run's priority (`cadenza.Runtime.submit`): supervisors take
            the highest first (None counts as 0), then the oldest.
    """

    run_id: str
    workflow: str
    path: str | None
    status: RunStatus
    inputs: dict[str, Any]
    created_at: float
    updated_at: float
    result: RunResult | None = None
    parent_run_id: str | None = None
    parent_address: str | None = None
    priority: int | None = None


ANSWERED = SignalReceived.event_type
"""The type of the event a person's answer adds to a waiting run's log."""


class WorkerLoad(msgspec.Struct, frozen=True, rename="camel"):
    """A worker connected to a supervisor, as the supervisor's dispatcher sees it.

    Attributes:
        name: The worker's name (``cadenza worker --name``, else ``host-pid``).
        capacity: The steps it said it takes at once from this supervisor (its credits).
        in_flight: This supervisor's steps on it now.
    """

    name: str
    capacity: int
    in_flight: int


NO_POOL: tuple[WorkerLoad, ...] = ()
"""The workers of a supervisor that has none connected."""


class SupervisorRow(msgspec.Struct, frozen=True, rename="camel"):
    """A live supervisor of the fleet, as it last told the store (camelCase in JSON).

    Attributes:
        supervisor_id: Unique to one supervisor process's lifetime.
        host: Its host name.
        pid: Its process id.
        workers: The endpoint its workers connect to (what ``cadenza worker
            --store`` connects to), or None when it runs steps itself.
        capacity: The runs it drives at most (None: it takes no queued runs).
        runs: The runs it drives now.
        waiting: Its steps waiting for a worker's free credit.
        running: Its steps on workers now.
        seen_at: When it last told the store (epoch seconds, the store's clock;
            set by the store).
        expires_at: When the row stops counting unless told again (set by the store).
        pool: The workers connected to it, in the order they came.
    """

    supervisor_id: str
    host: str
    pid: int
    workers: str | None = None
    capacity: int | None = None
    runs: int = 0
    waiting: int = 0
    running: int = 0
    seen_at: float = 0.0
    expires_at: float = 0.0
    pool: tuple[WorkerLoad, ...] = NO_POOL


class QueueDepth(msgspec.Struct, frozen=True, rename="camel"):
    """The queued runs of a store (`RunStore.queue_depth`): how many, and how long waiting.

    Attributes:
        runs: Queued runs, all priorities together.
        by_priority: Queued runs per priority (None counts as 0), highest priority first.
        oldest_at: When the oldest queued run was submitted (epoch seconds), or None.
        oldest_age: Seconds it has waited (0 with none queued).
    """

    runs: int = 0
    by_priority: dict[int, int] = msgspec.field(default_factory=dict)
    oldest_at: float | None = None
    oldest_age: float = 0.0

    @classmethod
    def of(cls, groups: Sequence[Sequence[Any]], now: Any) -> QueueDepth:
        """The depth of ``(priority, runs, oldest created_at)`` groups, at ``now`` (epoch
        seconds; PostgreSQL says them as a decimal)."""
        ordered = sorted(groups, key=lambda group: -int(group[0] or 0))
        by_priority = {int(priority or 0): int(count) for priority, count, _ in ordered}
        oldest = min((float(group[2]) for group in ordered), default=None)
        age = 0.0 if oldest is None else max(0.0, float(now) - oldest)
        return cls(sum(by_priority.values()), by_priority, oldest, age)


class Fleet(msgspec.Struct, frozen=True, rename="camel"):
    """The fleet as its store shows it: ``cadenza fleet``, ``GET /api/fleet``.

    Attributes:
        supervisors: The live supervisors, by id, each with its workers.
        queue: The queued runs.
        at: When it was read (epoch seconds).
    """

    supervisors: list[SupervisorRow]
    queue: QueueDepth
    at: float


_encode_pool = msgspec.json.Encoder().encode
_decode_pool = msgspec.json.Decoder(tuple[WorkerLoad, ...]).decode


def encode_pool(pool: tuple[WorkerLoad, ...]) -> str | None:
    """A row's workers as its ``pool`` column keeps them (JSON; NULL for none)."""
    return _encode_pool(pool).decode() if pool else None


def read_supervisor(values: Sequence[Any]) -> SupervisorRow:
    """The `SupervisorRow` of a stored row (the fields in order, ``pool`` as its JSON).

    A pool this Cadenza cannot read (written by a newer one) is shown empty: the
    row lives a few seconds and says nothing a run depends on.
    """
    *fields, pool = values
    workers = NO_POOL
    if pool:
        try:
            workers = _decode_pool(pool)
        except msgspec.DecodeError:
            _log.debug("unreadable pool of workers", supervisor=fields[0])
    return msgspec.structs.replace(SupervisorRow(*fields), pool=workers)


class CancelCommand(msgspec.Struct, frozen=True, tag_field="command", tag="cancel"):
    """Cancel the run (`cadenza.RunHandle.cancel`), recording ``reason``."""

    reason: str


class MessageCommand(msgspec.Struct, frozen=True, tag_field="command", tag="message"):
    """Post a message to a step of the run (`cadenza.RunHandle.post_message`)."""

    target: str
    text: str
    kind: str = "info"


Command = CancelCommand | MessageCommand
"""What one process asks of the process driving a run, through the store."""

WAITING_COMMANDS = 20_000
"""Messages (`MessageCommand`) a store keeps for one run before it refuses more.

As many as a run itself holds waiting for delivery (``RUN_MAIL_SIZE`` in
``cadenza.actors.run``): the owner takes them every ``command_interval``, so
only a stalled or dead owner ever lets them pile up to this.
"""

WAITING_COMMAND_BYTES = 4 << 20
"""Bytes of commands (their JSON) a store keeps for one run before it refuses a message.

As many as a run holds waiting for delivery (``RUN_MAIL_BYTES``), give or take
the JSON around each text.
"""

_log = get_logger("cadenza.store")

encode_command = msgspec.json.Encoder().encode
_command_decoder: msgspec.json.Decoder[Command] = msgspec.json.Decoder(Command)


def read_commands(rows: Sequence[Sequence[Any]]) -> list[tuple[str, Command]]:
    """The ``(run_id, command)`` of each stored ``(id, run_id, body)`` row, in order.

    A body this Cadenza cannot read (written by a newer one, say) is left out,
    with a warning: one bad command must not stop the run's owner.
    """
    commands = []
    for _, run_id, body in rows:
        try:
            commands.append((run_id, _command_decoder.decode(body)))
        except msgspec.DecodeError as error:
            _log.warning("unreadable command dropped", run_id=run_id, error=str(error))
    return commands


def command_bounds(command: Command) -> tuple[int, int]:
    """The bounds ``command`` is recorded under: commands and bytes already waiting, at most.

    A message meets `WAITING_COMMANDS` and `WAITING_COMMAND_BYTES`; a cancel
    none (it must reach a stalled owner whatever waits before it).
    """
    if isinstance(command, MessageCommand):
        return WAITING_COMMANDS, WAITING_COMMAND_BYTES
    return 1 << 62, 1 << 62


def refuse_command(run_id: str, body: bytes) -> MessageRefused:
    """The error for a message ``body`` the store does not keep for ``run_id`` (bound reached)."""
    return MessageRefused(
        f"run {run_id!r} refuses the message of {len(body)} bytes: the store already keeps"
        f" {WAITING_COMMANDS} messages or {WAITING_COMMAND_BYTES} bytes of them for it"
        " (is the process that drives it stalled?)"
    )


class RunStore(Protocol):
    """Where runs are recorded. Every implementation passes tests/test_store_conformance.py."""

    async def open(self) -> None:
        """Prepares the store (creates the schema); call once before use."""

    async def close(self) -> None:
        """Flushes what is queued and releases the store."""

    def begin_run(self, row: RunRow) -> None:
        """Queues a new run row."""

    def append_event(self, event: Event) -> None:
        """Queues an event; its ``seq`` orders it within the run."""

    def put_step(self, run_id: str, address: str, record: StepRecord) -> None:
        """Queues the latest record of an executed address (replacing an older one)."""

    def end_run(self, run_id: str, status: RunStatus, result: RunResult | None) -> None:
        """Queues the run's new status and, when it has ended, its result."""

    async def flush(self, run_id: str | None = None) -> None:
        """Returns once everything queued so far is durable.

        Args:
            run_id: The run the caller drives: its writes must have been committed.

        Raises:
            LeaseLost: This store held ``run_id``'s lease and lost it: the run's
                writes were refused (the store's other runs are not affected).
        """

    async def get_run(self, run_id: str) -> RunRow | None:
        """The run row, or None when there is no such run."""

    async def list_runs(self, *, limit: int = 100) -> list[RunRow]:
        """The most recent runs first."""

    async def forks(self, run_id: str) -> list[RunRow]:
        """The runs forked from ``run_id`` (whose ``parent_run_id`` it is), oldest first."""

    async def events(
        self, run_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """The run's events in order, those with ``seq > after_seq``; with ``limit``, the
        first ``limit`` of them (a page: the next one is after the last one's ``seq``)."""

    async def steps(
        self, run_id: str, *, after: str | None = None, limit: int | None = None
    ) -> dict[str, StepRecord]:
        """The latest record of every executed address of the run.

        With ``limit``, a page: the records of the first ``limit`` addresses after
        ``after`` (None: from the first) in the store's own order of addresses, in that
        order; the next page is after the last address of this one. A page of fewer
        than ``limit`` is the last.
        """

    def save_document(self, run_id: str, body: bytes) -> None:
        """Queues the run's document: what a resume needs to replay it (JSON)."""

    async def document(self, run_id: str) -> bytes | None:
        """The run's document, or None when it has none."""

    async def acquire_lease(
        self, run_id: str, holder: LeaseHolder, *, ttl: float = DEFAULT_LEASE_TTL
    ) -> Lease:
        """Makes ``holder`` the process driving the run for ``ttl`` seconds, durably.

        The lease is free when nobody holds it, when it expired (not renewed in
        time), or when its holder is a process of this host that is gone. Taking
        it from another holder raises the run's fencing token by one; from then
        on this store's writes of the run carry the new token.

        Raises:
            LeaseHeld: Another live process holds the lease, unexpired.
        """

    async def renew_lease(self, lease: Lease) -> None:
        """Extends ``lease`` by its ``ttl`` from now, if it still holds the run.

        Raises:
            LeaseLost: Another holder took the lease (its fencing token changed).
        """

    def release_lease(self, run_id: str, holder: LeaseHolder) -> None:
        """Queues the release of ``holder``'s lease (a no-op if it no longer holds it)."""

    async def take_queued(
        self, holder: LeaseHolder, *, ttl: float = DEFAULT_LEASE_TTL
    ) -> tuple[RunRow, Lease] | None:
        """Makes ``holder`` the driver of the queued run to start next, atomically.

        That run is the one of status ``queued`` nobody holds (no lease, or an
        expired one) with the highest priority (None counts as 0), then the
        oldest. Two processes never take one run: the lease is taken in the
        statement that picks it (PostgreSQL: ``FOR UPDATE SKIP LOCKED``). The
        run stays ``queued`` until its taker records its start: a taker that
        dies first leaves it to be taken again once the lease expires.

        Returns:
            The run's row and its lease; None when no queued run is free.
        """

    async def orphaned_runs(self, *, limit: int = 100) -> list[RunRow]:
        """Runs of status ``running`` that nobody drives: no lease, or an expired one.

        Oldest first. These are what a supervisor with takeover resumes.
        """

    async def answered_runs(self, *, limit: int = 100) -> list[RunRow]:
        """Waiting runs whose newest event is an answer (``signal_received``), oldest first.

        A person answered since the run stopped to wait: a supervisor with
        takeover resumes them, as it resumes orphaned runs.
        """

    async def send_command(self, run_id: str, command: Command) -> None:
        """Records ``command`` for whoever drives the run; durable when it returns.

        Raises:
            MessageRefused: ``command`` is a message and the store already keeps
                `WAITING_COMMANDS` commands, or `WAITING_COMMAND_BYTES` with it,
                for the run; nothing is recorded.
        """

    async def take_commands(self, run_ids: Sequence[str]) -> list[tuple[str, Command]]:
        """Removes the commands waiting for these runs and returns them, oldest first.

        Each command is taken once: by the run's owner, which carries it out.
        A body this Cadenza cannot read is removed and left out.
        """

    def put_call(self, run_id: str, call: CallRecord) -> None:
        """Queues one completed call of a step's execution, fenced like the run's other writes.

        A call already recorded (the same address, attempt and seq) is replaced. A
        body over `CALL_BODY_LIMIT` bytes is kept once per run, by its digest.
        """

    async def calls(self, run_id: str, address: str | None = None) -> list[CallRecord]:
        """The run's recorded calls (those of ``address`` only, when given), ordered by
        address, attempt and seq."""

    def forget_steps(self, run_id: str, prefix: str) -> None:
        """Queues the removal of the records, and the calls, at ``prefix`` and below it
        (loop ``keepLast``)."""

    async def delete_runs(self, run_ids: Sequence[str]) -> None:
        """Removes the runs and everything recorded about them, durably."""

    async def check(self) -> list[str]:
        """Every integrity problem found in the store; empty when it is sound."""

    async def beat_supervisor(self, row: SupervisorRow, *, ttl: float) -> None:
        """Records ``row`` as live for ``ttl`` seconds from now, durably; replaces the
        supervisor's earlier row, and deletes the rows of supervisors that expired."""

    async def live_supervisors(self) -> list[SupervisorRow]:
        """The supervisors whose row has not expired, by id."""

    async def forget_supervisor(self, supervisor_id: str) -> None:
        """Deletes the supervisor's row, durably (it is shutting down)."""

    async def queue_depth(self) -> QueueDepth:
        """The runs of status ``queued``, by priority, and how long the oldest has waited."""


def is_under(address: str, prefix: str) -> bool:
    """Whether ``address`` is ``prefix`` itself or inside it (``loop.3`` holds ``loop.3.a``)."""
    if not address.startswith(prefix):
        return False
    return len(address) == len(prefix) or address[len(prefix)] in ".["
