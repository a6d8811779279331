"""The in-memory run store: everything in this process, fast, and gone at exit.

What `cadenza.Runtime` uses without a ``store``, and what a worker runs its
one step against (``actors/steps/_work_order.py``). It keeps the promises of
`RunStore` that make sense in one process: leases are fenced (a second
runtime of this process can take a run over), message commands are bounded.

Its memory follows a run's size as little as it can, since nothing resumes a
memory store once its process ends: a run's events are kept in a window of
the last `DEFAULT_MAX_EVENTS` (``max_events``; live subscribers still see
every event, as the journal hands them over, not the store), and step records
are kept as msgpack bytes (their fields' values), equal small bodies shared:
a no-op step's record costs its address and a slot, some 100 bytes, where a
record object took 300. A run whose
events went past the window cannot be resumed or forked from this store (the
replay finds its first events missing and says so); every record stays.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from collections.abc import Sequence

import msgspec

from cadenza.protocols import CallRecord, Event, RunResult, RunStatus, StepRecord

from ._base import (
    ANSWERED,
    WAITING_COMMAND_BYTES,
    WAITING_COMMANDS,
    Command,
    MessageCommand,
    QueueDepth,
    RunRow,
    SupervisorRow,
    encode_command,
    is_under,
    refuse_command,
)
from ._lease import DEFAULT_LEASE_TTL, Lease, LeaseHolder, check_takeover, lease_lost

__all__ = ["DEFAULT_MAX_EVENTS", "MemoryRunStore"]

DEFAULT_MAX_EVENTS = 100_000
"""Events a memory store keeps per run: the newest, some 30 MB of them at most.
A run of a few thousand steps keeps all of its events; a million-item forEach
(four events an item) keeps its last 25,000 items'."""

_SHARED_BODY = 64
"""Record bodies at most this long are shared between addresses when equal."""

_SHARED_BODIES = 4096
"""How many distinct bodies are shared (the rest are kept one per address)."""

_FIELDS = msgspec.structs.fields(StepRecord)
_NAMES = tuple(field.name for field in _FIELDS)
_encode_record = msgspec.msgpack.Encoder().encode
# A record is kept as the msgpack array of its fields' values, without their names:
# a no-op step's is 22 bytes, where the map of names and values took 72.
_decode_values = msgspec.msgpack.Decoder(tuple[tuple(field.type for field in _FIELDS)]).decode  # type: ignore[misc]


def _pack(record: StepRecord) -> bytes:
    return _encode_record(msgspec.structs.astuple(record))


def _unpack(body: bytes) -> StepRecord:
    return StepRecord(**dict(zip(_NAMES, _decode_values(body), strict=True)))


class MemoryRunStore:
    """A store that keeps everything in this process: fast, and gone at exit.

    Args:
        max_events: The newest events kept per run (None: every event).
    """

    def __init__(self, *, max_events: int | None = DEFAULT_MAX_EVENTS) -> None:
        self.max_events = max_events
        self._runs: dict[str, RunRow] = {}
        self._events: dict[str, deque[Event]] = {}
        self._steps: dict[str, dict[str, bytes]] = {}
        self._bodies: dict[bytes, bytes] = {}  # the shared record bodies
        self._documents: dict[str, bytes] = {}
        self._leases: dict[str, Lease] = {}
        self._expiry: dict[str, float] = {}
        self._fences: dict[str, int] = {}
        self._commands: list[tuple[str, Command]] = []
        self._calls: dict[str, dict[tuple[str, int, int], CallRecord]] = {}
        self._supervisors: dict[str, SupervisorRow] = {}

    async def open(self) -> None:
        """Nothing to prepare."""

    async def close(self) -> None:
        """Nothing to release."""

    def begin_run(self, row: RunRow) -> None:
        """Records a new run row."""
        self._runs[row.run_id] = row
        self._events.setdefault(row.run_id, deque(maxlen=self.max_events))
        self._steps.setdefault(row.run_id, {})

    def append_event(self, event: Event) -> None:
        """Records an event (the run's oldest one goes when the window is full)."""
        self._events[event.run_id].append(event)

    def put_step(self, run_id: str, address: str, record: StepRecord) -> None:
        """Records the latest state of an address, as bytes."""
        body = _pack(record)
        if len(body) <= _SHARED_BODY:
            shared = self._bodies.get(body)
            if shared is not None:
                body = shared
            elif len(self._bodies) < _SHARED_BODIES:
                self._bodies[body] = body
        self._steps[run_id][address] = body

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

    async def forks(self, run_id: str) -> list[RunRow]:
        """The runs forked from ``run_id``, oldest first."""
        forked = [row for row in self._runs.values() if row.parent_run_id == run_id]
        return sorted(forked, key=lambda r: r.created_at)

    async def events(
        self, run_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """The run's events after ``after_seq`` (the first ``limit`` of them, if given)."""
        after = (e for e in self._events.get(run_id, ()) if e.seq > after_seq)
        return list(after if limit is None else itertools.islice(after, limit))

    async def steps(
        self, run_id: str, *, after: str | None = None, limit: int | None = None
    ) -> dict[str, StepRecord]:
        """The run's step records (a page of them in address order, with ``limit``)."""
        kept = self._steps.get(run_id, {})
        if limit is None and after is None:
            return {a: _unpack(body) for a, body in kept.items()}
        chosen = (a for a in kept if after is None or a > after)
        page = sorted(chosen) if limit is None else heapq.nsmallest(limit, chosen)
        return {a: _unpack(kept[a]) for a in page}

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

    async def take_queued(
        self, holder: LeaseHolder, *, ttl: float = DEFAULT_LEASE_TTL
    ) -> tuple[RunRow, Lease] | None:
        """Takes the lease of the queued run to start next (highest priority, then oldest)."""
        now = time.monotonic()
        free = [
            row
            for row in self._runs.values()
            if row.status == "queued" and now >= self._expiry.get(row.run_id, 0.0)
        ]
        if not free:
            return None
        row = min(free, key=lambda r: (-(r.priority or 0), r.created_at))
        return row, await self.acquire_lease(row.run_id, holder, ttl=ttl)

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

    def put_call(self, run_id: str, call: CallRecord) -> None:
        """Keeps the call (the body too: memory holds no duplicates worth sharing)."""
        self._calls.setdefault(run_id, {})[call.address, call.attempt, call.seq] = call

    async def calls(self, run_id: str, address: str | None = None) -> list[CallRecord]:
        """The run's calls (of ``address`` only, when given), by address, attempt and seq."""
        kept = self._calls.get(run_id, {})
        return [kept[key] for key in sorted(kept) if address is None or key[0] == address]

    def forget_steps(self, run_id: str, prefix: str) -> None:
        """Drops the records and the calls at ``prefix`` and below it."""
        steps = self._steps.get(run_id, {})
        for address in [a for a in steps if is_under(a, prefix)]:
            del steps[address]
        calls = self._calls.get(run_id, {})
        for key in [key for key in calls if is_under(key[0], prefix)]:
            del calls[key]

    async def delete_runs(self, run_ids: Sequence[str]) -> None:
        """Forgets the runs."""
        for run_id in run_ids:
            self._runs.pop(run_id, None)
            self._events.pop(run_id, None)
            self._steps.pop(run_id, None)
            self._documents.pop(run_id, None)
            self._calls.pop(run_id, None)
            self._leases.pop(run_id, None)
            self._expiry.pop(run_id, None)
        doomed = set(run_ids)
        self._commands = [item for item in self._commands if item[0] not in doomed]

    async def check(self) -> list[str]:
        """Memory cannot rot."""
        return []

    async def beat_supervisor(self, row: SupervisorRow, *, ttl: float) -> None:
        """Keeps ``row`` live for ``ttl`` seconds; forgets the supervisors that expired."""
        now = time.time()
        self._supervisors = {
            key: kept for key, kept in self._supervisors.items() if kept.expires_at > now
        }
        stamped = msgspec.structs.replace(row, seen_at=now, expires_at=now + ttl)
        self._supervisors[row.supervisor_id] = stamped

    async def live_supervisors(self) -> list[SupervisorRow]:
        """The supervisors whose row has not expired, by id."""
        now = time.time()
        live = (row for row in self._supervisors.values() if row.expires_at > now)
        return sorted(live, key=lambda row: row.supervisor_id)

    async def forget_supervisor(self, supervisor_id: str) -> None:
        """Forgets the supervisor's row."""
        self._supervisors.pop(supervisor_id, None)

    async def queue_depth(self) -> QueueDepth:
        """The queued runs by priority, and how long the oldest has waited."""
        groups: dict[int, tuple[int, float]] = {}
        for row in self._runs.values():
            if row.status == "queued":
                count, oldest = groups.get(row.priority or 0, (0, row.created_at))
                groups[row.priority or 0] = count + 1, min(oldest, row.created_at)
        found = [(priority, count, oldest) for priority, (count, oldest) in groups.items()]
        return QueueDepth.of(found, time.time())
