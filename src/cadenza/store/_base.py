"""The run store interface and its in-memory implementation.

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
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

import msgspec

from cadenza._logging import get_logger
from cadenza.errors import MessageRefused
from cadenza.protocols import Event, RunResult, RunStatus, SignalReceived, StepRecord

from ._lease import DEFAULT_LEASE_TTL, Lease, LeaseHolder, check_takeover, lease_lost

__all__ = [
    "ANSWERED",
    "WAITING_COMMANDS",
    "WAITING_COMMAND_BYTES",
    "CancelCommand",
    "Command",
    "MemoryRunStore",
    "MessageCommand",
    "RunRow",
    "RunStore",
    "command_bounds",
    "encode_command",
    "is_under",
    "read_commands",
    "refuse_command",
]


class RunRow(msgspec.Struct, frozen=True):
    """A run as the store lists it.

    Attributes:
        run_id: The run's id.
        workflow: The workflow's ``name``.
        path: The workflow file the run came from, when there is one.
        status: ``running``, ``completed``, ``failed``, ``cancelled`` or ``waiting``.
        inputs: The run's inputs after defaults and coercion.
        created_at: Epoch seconds when the run started.
        updated_at: Epoch seconds of the last status change.
        result: The result JSON once the run has ended, else None.
    """

    run_id: str
    workflow: str
    path: str | None
    status: RunStatus
    inputs: dict[str, Any]
    created_at: float
    updated_at: float
    result: RunResult | None = None


ANSWERED = SignalReceived.event_type
"""The type of the event a person's answer adds to a waiting run's log."""


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

_log = get_logger("cadenza.kernel")

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

    async def events(self, run_id: str, *, after_seq: int = 0) -> list[Event]:
        """The run's events in order, those with ``seq > after_seq``."""

    async def steps(self, run_id: str) -> dict[str, StepRecord]:
        """The latest record of every executed address of the run."""

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

    def forget_steps(self, run_id: str, prefix: str) -> None:
        """Queues the removal of the records at ``prefix`` and below it (loop ``keepLast``)."""

    async def delete_runs(self, run_ids: Sequence[str]) -> None:
        """Removes the runs and everything recorded about them, durably."""

    async def check(self) -> list[str]:
        """Every integrity problem found in the store; empty when it is sound."""


class MemoryRunStore:
    """A store that keeps everything in this process: fast, and gone at exit."""

    def __init__(self) -> None:
        self._runs: dict[str, RunRow] = {}
        self._events: dict[str, list[Event]] = {}
        self._steps: dict[str, dict[str, StepRecord]] = {}
        self._documents: dict[str, bytes] = {}
        self._leases: dict[str, Lease] = {}
        self._expiry: dict[str, float] = {}
        self._fences: dict[str, int] = {}
        self._commands: list[tuple[str, Command]] = []

    async def open(self) -> None:
        """Nothing to prepare."""

    async def close(self) -> None:
        """Nothing to release."""

    def begin_run(self, row: RunRow) -> None:
        """Records a new run row."""
        self._runs[row.run_id] = row
        self._events.setdefault(row.run_id, [])
        self._steps.setdefault(row.run_id, {})

    def append_event(self, event: Event) -> None:
        """Records an event."""
        self._events[event.run_id].append(event)

    def put_step(self, run_id: str, address: str, record: StepRecord) -> None:
        """Records the latest state of an address."""
        self._steps[run_id][address] = record

    def end_run(self, run_id: str, status: RunStatus, result: RunResult | None) -> None:
        """Records the run's new status."""
        self._runs[run_id] = msgspec.structs.replace(
            self._runs[run_id], status=status, result=result, updated_at=time.time()
        )

    async def flush(self, run_id: str | None = None) -> None:
        """Memory is as durable as this store gets.

        Raises:
            LeaseLost: ``run_id``'s lease, as held through this store, was taken over.
        """
        lease = None if run_id is None else self._leases.get(run_id)
        if lease is not None and lease.lost is not None:
            raise lease_lost(lease, lease.lost)

    async def get_run(self, run_id: str) -> RunRow | None:
        """The run row, or None."""
        return self._runs.get(run_id)

    async def list_runs(self, *, limit: int = 100) -> list[RunRow]:
        """Most recent first."""
        rows = sorted(self._runs.values(), key=lambda r: r.created_at, reverse=True)
        return rows[:limit]

    async def events(self, run_id: str, *, after_seq: int = 0) -> list[Event]:
        """The run's events after ``after_seq``."""
        return [e for e in self._events.get(run_id, ()) if e.seq > after_seq]

    async def steps(self, run_id: str) -> dict[str, StepRecord]:
        """A copy of the run's step records."""
        return dict(self._steps.get(run_id, {}))

    def save_document(self, run_id: str, body: bytes) -> None:
        """Keeps the run's document."""
        self._documents[run_id] = body

    async def document(self, run_id: str) -> bytes | None:
        """The run's document, or None."""
        return self._documents.get(run_id)

    async def acquire_lease(
        self, run_id: str, holder: LeaseHolder, *, ttl: float = DEFAULT_LEASE_TTL
    ) -> Lease:
        """Takes the run's lease (only runtimes in this process can compete for it)."""
        now = time.monotonic()
        current = self._leases.get(run_id)
        expired = now >= self._expiry.get(run_id, 0.0)
        check_takeover(run_id, None if current is None else current.holder, holder, expired=expired)
        self._expiry[run_id] = now + ttl
        if current is not None and current.holder.token == holder.token and not expired:
            current.ttl = ttl
            return current
        if current is not None:  # one memory store, one process: tell the former holder now
            lease_lost(current, f"{holder.describe()} took the run over")
        fence = self._fences.get(run_id, 0) + 1
        self._fences[run_id] = fence
        self._leases[run_id] = lease = Lease(run_id, holder, fence, ttl)
        return lease

    async def renew_lease(self, lease: Lease) -> None:
        """Extends ``lease`` if it is still the run's.

        Raises:
            LeaseLost: Another holder took it.
        """
        if self._leases.get(lease.run_id) is not lease:
            raise lease_lost(lease, "another holder took the run over")
        self._expiry[lease.run_id] = time.monotonic() + lease.ttl

    def release_lease(self, run_id: str, holder: LeaseHolder) -> None:
        """Gives the lease up if ``holder`` still holds it."""
        current = self._leases.get(run_id)
        if current is not None and current.holder.token == holder.token:
            del self._leases[run_id]
            self._expiry.pop(run_id, None)

    async def orphaned_runs(self, *, limit: int = 100) -> list[RunRow]:
        """Running runs whose lease is free or expired, oldest first."""
        now = time.monotonic()
        rows = [
            row
            for row in self._runs.values()
            if row.status == "running" and now >= self._expiry.get(row.run_id, 0.0)
        ]
        return sorted(rows, key=lambda r: r.created_at)[:limit]

    async def answered_runs(self, *, limit: int = 100) -> list[RunRow]:
        """Waiting runs whose newest event is an answer, oldest first."""
        rows = [
            row
            for row in self._runs.values()
            if row.status == "waiting"
            and self._events.get(row.run_id)
            and self._events[row.run_id][-1].type == ANSWERED
        ]
        return sorted(rows, key=lambda r: r.created_at)[:limit]

    async def send_command(self, run_id: str, command: Command) -> None:
        """Keeps ``command`` until the run's owner takes it (a message: within the bounds)."""
        if isinstance(command, MessageCommand):
            body = encode_command(command)
            waiting = [encode_command(c) for r, c in self._commands if r == run_id]
            if (
                len(waiting) >= WAITING_COMMANDS
                or sum(map(len, waiting)) + len(body) > WAITING_COMMAND_BYTES
            ):
                raise refuse_command(run_id, body)
        self._commands.append((run_id, command))

    async def take_commands(self, run_ids: Sequence[str]) -> list[tuple[str, Command]]:
        """Removes and returns the commands for these runs, oldest first."""
        wanted = set(run_ids)
        taken = [item for item in self._commands if item[0] in wanted]
        if taken:
            self._commands = [item for item in self._commands if item[0] not in wanted]
        return taken

    def forget_steps(self, run_id: str, prefix: str) -> None:
        """Drops the records at ``prefix`` and below it."""
        steps = self._steps.get(run_id, {})
        for address in [a for a in steps if is_under(a, prefix)]:
            del steps[address]

    async def delete_runs(self, run_ids: Sequence[str]) -> None:
        """Forgets the runs."""
        for run_id in run_ids:
            self._runs.pop(run_id, None)
            self._events.pop(run_id, None)
            self._steps.pop(run_id, None)
            self._documents.pop(run_id, None)
            self._leases.pop(run_id, None)
            self._expiry.pop(run_id, None)
        doomed = set(run_ids)
        self._commands = [item for item in self._commands if item[0] not in doomed]

    async def check(self) -> list[str]:
        """Memory cannot rot."""
        return []


def is_under(address: str, prefix: str) -> bool:
    """Whether ``address`` is ``prefix`` itself or inside it (``loop.3`` holds ``loop.3.a``)."""
    if not address.startswith(prefix):
        return False
    return len(address) == len(prefix) or address[len(prefix)] in ".["
