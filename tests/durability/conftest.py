"""Helpers for the durability tests: a store that loses power, a two-step workflow."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cadenza.protocols import CallRecord, Event, RunResult, RunStatus, StepRecord
from cadenza.store import (
    DEFAULT_LEASE_TTL,
    Command,
    Lease,
    LeaseHolder,
    QueueDepth,
    RunRow,
    SqliteRunStore,
    SupervisorRow,
)

TWO = """
name: two
steps:
  - id: a
    command: "echo a"
  - id: b
    dependsOn: [a]
    command: "echo b"
"""
"""Two command steps, ``b`` after ``a``."""


class PowerCut:
    """A SQLite run store that stops reaching the disk once ``cut`` says so.

    Everything written before the event that trips ``cut`` (that event included)
    stays; everything after it is lost, as if the machine had died right there.
    The run goes on in memory, so a test can let it finish and then resume the
    run from the file in a fresh runtime. Leases still work, as a new process's
    would after a reboot.
    """

    def __init__(self, path: Path, cut: Callable[[Event], bool]) -> None:
        self.inner = SqliteRunStore(path)
        self.cut = cut
        self.dead = False

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    def begin_run(self, row: RunRow) -> None:
        if not self.dead:
            self.inner.begin_run(row)

    def append_event(self, event: Event) -> None:
        if not self.dead:
            self.inner.append_event(event)
            self.dead = self.cut(event)

    def put_step(self, run_id: str, address: str, record: StepRecord) -> None:
        if not self.dead:
            self.inner.put_step(run_id, address, record)

    def end_run(self, run_id: str, status: RunStatus, result: RunResult | None) -> None:
        if not self.dead:
            self.inner.end_run(run_id, status, result)

    async def flush(self, run_id: str | None = None) -> None:
        await self.inner.flush(run_id)

    async def get_run(self, run_id: str) -> RunRow | None:
        return await self.inner.get_run(run_id)

    async def list_runs(self, *, limit: int = 100) -> list[RunRow]:
        return await self.inner.list_runs(limit=limit)

    async def forks(self, run_id: str) -> list[RunRow]:
        return await self.inner.forks(run_id)

    async def events(
        self, run_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        return await self.inner.events(run_id, after_seq=after_seq, limit=limit)

    async def steps(
        self, run_id: str, *, after: str | None = None, limit: int | None = None
    ) -> dict[str, StepRecord]:
        return await self.inner.steps(run_id, after=after, limit=limit)

    def save_document(self, run_id: str, body: bytes) -> None:
        if not self.dead:
            self.inner.save_document(run_id, body)

    async def document(self, run_id: str) -> bytes | None:
        return await self.inner.document(run_id)

    async def acquire_lease(
        self, run_id: str, holder: LeaseHolder, *, ttl: float = DEFAULT_LEASE_TTL
    ) -> Lease:
        return await self.inner.acquire_lease(run_id, holder, ttl=ttl)

    async def renew_lease(self, lease: Lease) -> None:
        await self.inner.renew_lease(lease)

    def release_lease(self, run_id: str, holder: LeaseHolder) -> None:
        self.inner.release_lease(run_id, holder)

    async def take_queued(
        self, holder: LeaseHolder, *, ttl: float = DEFAULT_LEASE_TTL
    ) -> tuple[RunRow, Lease] | None:
        return await self.inner.take_queued(holder, ttl=ttl)

    async def orphaned_runs(self, *, limit: int = 100) -> list[RunRow]:
        return await self.inner.orphaned_runs(limit=limit)

    async def answered_runs(self, *, limit: int = 100) -> list[RunRow]:
        return await self.inner.answered_runs(limit=limit)

    async def send_command(self, run_id: str, command: Command) -> None:
        await self.inner.send_command(run_id, command)

    async def take_commands(self, run_ids: Sequence[str]) -> list[tuple[str, Command]]:
        return await self.inner.take_commands(run_ids)

    def put_call(self, run_id: str, call: CallRecord) -> None:
        if not self.dead:
            self.inner.put_call(run_id, call)

    async def calls(self, run_id: str, address: str | None = None) -> list[CallRecord]:
        return await self.inner.calls(run_id, address)

    def forget_steps(self, run_id: str, prefix: str) -> None:
        if not self.dead:
            self.inner.forget_steps(run_id, prefix)

    async def delete_runs(self, run_ids: Sequence[str]) -> None:
        await self.inner.delete_runs(run_ids)

    async def check(self) -> list[str]:
        return await self.inner.check()

    async def beat_supervisor(self, row: SupervisorRow, *, ttl: float) -> None:
        await self.inner.beat_supervisor(row, ttl=ttl)

    async def live_supervisors(self) -> list[SupervisorRow]:
        return await self.inner.live_supervisors()

    async def forget_supervisor(self, supervisor_id: str) -> None:
        await self.inner.forget_supervisor(supervisor_id)

    async def queue_depth(self) -> QueueDepth:
        return await self.inner.queue_depth()


def event_is(type: str, step_id: str | None = None) -> Callable[[Event], bool]:
    """A ``PowerCut`` trigger: the first event of that type (at that address)."""

    def matches(event: Event) -> bool:
        return event.type == type and (step_id is None or event.step_id == step_id)

    return matches


def steps_of(result: RunResult) -> dict[str, Any]:
    """``{address: (status, content)}``, what most assertions look at."""
    return {address: (r.status, r.content) for address, r in result.steps.items()}
