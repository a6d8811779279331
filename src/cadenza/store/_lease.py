"""Run leases: which process drives a run, so that two never do at once.

A run is driven by exactly one process: the one that started it, or the one
that resumed it. That process holds the run's lease in the store for as long
as it drives the run. A lease names its holder (host, process id and the
process's start time, plus a token unique to the holder) so that another
process can tell a live holder from a dead one: after ``kill -9`` nobody
releases the lease, and waiting for an expiry would keep the run down for no
reason. A lease held on this host by a process that no longer exists (or is a
zombie, or is a different process under a reused id) is stale and is taken
over at once.

A lease also expires: its holder renews it (every third of its time to live)
for as long as it drives the run, and a lease not renewed in time is free for
anyone, from any host: a holder that is paused, partitioned away or dead on
another machine stops owning the run. Each acquisition of a run's lease by a
new holder raises its fencing token (`Lease.fence`) by one, and every write
batch of a run is committed only if the lease row still carries its writer's
fence: a former holder that wakes up after losing the lease finds its writes
refused (`LeaseLost`), however late they arrive.

A holder whose writes of a run the store failed (the server went away in the
middle of a commit, the disk filled up) stops too (`Lease.failed`): what it
did since its last commit may or may not be stored, so it must not go on
writing as if it were. Unlike a lost lease, a failed one is still this
holder's, and it gives it back, so that the run is taken up again (by this
process or another) once the store answers.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable

import msgspec

from cadenza.errors import CadenzaError, LeaseHeld, LeaseLost, StoreFailed

__all__ = [
    "DEFAULT_LEASE_TTL",
    "LEASE_TTL_VARIABLE",
    "HeldLeases",
    "Lease",
    "LeaseHolder",
    "check_takeover",
    "lease_failed",
    "lease_lost",
    "lease_ttl_from_environment",
]

DEFAULT_LEASE_TTL = 15.0
"""Seconds a lease lasts unless renewed; its holder renews it every third of that."""

LEASE_TTL_VARIABLE = "CADENZA_LEASE_TTL"
"""The environment variable that sets the lease where no ``lease_ttl`` is given."""


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), or None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After the command name: state is field 3, starttime field 22 (1-based, man proc).
    if fields[0] == b"Z":
        return -1  # a zombie: dead, only not yet reaped
    return int(fields[19]) if len(fields) > 19 else None


class LeaseHolder(msgspec.Struct, frozen=True):
    """Who holds a run's lease.

    Attributes:
        token: Unique to this holder (one runtime's drive of one run).
        host: The holder's host name.
        pid: The holder's process id.
        started: The process's start time in clock ticks, when the OS tells it.
    """

    token: str
    host: str
    pid: int
    started: int | None = None

    @classmethod
    def for_this_process(cls) -> LeaseHolder:
        """A new holder identity for this process."""
        pid = os.getpid()
        return cls(secrets.token_hex(8), socket.gethostname(), pid, _start_ticks(pid))

    def is_alive(self) -> bool:
        """False only when this host can tell that the holder's process is gone."""
        if self.host != socket.gethostname():
            return True  # cannot look at another host's processes: honour the lease
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # exists, owned by someone else
        ticks = _start_ticks(self.pid)
        if ticks == -1:
            return False
        return self.started is None or ticks is None or ticks == self.started

    def describe(self) -> str:
        """``process 4242 on host-a``."""
        return f"process {self.pid} on {self.host}"


class Lease:
    """A run's lease as its holder knows it: what it renews, and what fences its writes.

    Attributes:
        run_id: The run.
        holder: Who holds it.
        fence: The fencing token: one more than the previous holder's. A write
            batch of the run is committed only while the lease row still has it.
        ttl: Seconds the lease lasts after each renewal.
        lost: Why the holder no longer holds it (None while it does): set by
            the store when a renewal or a write finds another fence.
        failed: Why the store could not record the holder's writes of the run
            (None while it can): set by the store's writer when a commit fails.
        on_stop: Called once, when the lease is found lost or failed, from
            whatever thread found it (the SQLite store's writer thread, say):
            it must only hand the news over (``loop.call_soon_threadsafe``).
    """

    __slots__ = ("failed", "fence", "holder", "lost", "on_stop", "run_id", "ttl")

    def __init__(self, run_id: str, holder: LeaseHolder, fence: int, ttl: float) -> None:
        self.run_id = run_id
        self.holder = holder
        self.fence = fence
        self.ttl = ttl
        self.lost: str | None = None
        self.failed: str | None = None
        self.on_stop: Callable[[], None] | None = None

    @property
    def stopped(self) -> bool:
        """Whether the holder's writes of the run are over: the lease was lost, or failed."""
        return self.lost is not None or self.failed is not None

    def __repr__(self) -> str:
        return f"Lease({self.run_id!r}, fence={self.fence}, {self.holder.describe()})"


class HeldLeases:
    """The leases one store object holds, by run: what fences that store's writes of each run.

    A store object serves one runtime, so "the lease this store holds for the
    run" is the lease its writes of that run were made under.
    """

    def __init__(self) -> None:
        self._held: dict[str, Lease] = {}

    def hold(self, lease: Lease) -> Lease:
        """Notes ``lease`` as the one this store's writes of its run are fenced by."""
        self._held[lease.run_id] = lease
        return lease

    def get(self, run_id: str) -> Lease | None:
        """The lease held for the run, or None (its writes are not fenced)."""
        return self._held.get(run_id)

    def drop(self, run_id: str, holder: LeaseHolder) -> Lease | None:
        """Forgets ``holder``'s lease of the run and returns it (None if it held none)."""
        lease = self._held.get(run_id)
        if lease is None or lease.holder.token != holder.token:
            return None
        del self._held[run_id]
        return lease

    def raise_if_stopped(self, run_id: str | None) -> None:
        """Raises if the lease held for ``run_id`` has been lost (`LeaseLost`) or its
        writes failed (`StoreFailed`)."""
        lease = None if run_id is None else self._held.get(run_id)
        if lease is None:
            return
        if lease.lost is not None:
            raise lease_lost(lease, lease.lost)
        if lease.failed is not None:
            raise lease_failed(lease, lease.failed)


def _stop(lease: Lease) -> None:
    if lease.on_stop is not None:
        lease.on_stop()


def lease_lost(lease: Lease, why: str) -> LeaseLost:
    """Marks ``lease`` lost (``why``); returns the error its holder's writes raise from now on."""
    if lease.lost is None:
        lease.lost = why
        if lease.failed is None:
            _stop(lease)
    return LeaseLost(
        f"this process ({lease.holder.describe()}) no longer holds the lease of run "
        f"{lease.run_id!r}: {lease.lost}; its writes are refused, and it stops driving the run"
    )


def lease_failed(lease: Lease, why: str) -> StoreFailed:
    """Marks ``lease`` failed: the store could not record its holder's writes (``why``).

    Returns the error the run's writes raise from now on.
    """
    if lease.failed is None:
        lease.failed = why
        if lease.lost is None:
            _stop(lease)
    return StoreFailed(
        f"run {lease.run_id!r} stopped: {lease.failed}",
        run_id=lease.run_id,
        resumable=True,
    )


def check_takeover(
    run_id: str, current: LeaseHolder | None, claimant: LeaseHolder, *, expired: bool = False
) -> None:
    """Decides whether ``claimant`` may take the lease ``current`` holds.

    Args:
        expired: The lease was not renewed in time: anyone may take it.

    Raises:
        LeaseHeld: A live process other than the claimant holds it, unexpired.
    """
    if expired or current is None or current.token == claimant.token or not current.is_alive():
        return
    raise LeaseHeld(
        f"run {run_id!r} is being driven by {current.describe()}; two processes may not "
        "run or resume one run at once (wait for it to finish, or stop it first; a lease "
        "its holder stops renewing expires)"
    )


def lease_ttl_from_environment() -> float:
    """``CADENZA_LEASE_TTL``, or `DEFAULT_LEASE_TTL` when it is unset.

    One setting for every process of a fleet: how soon a dead owner's run is
    taken over is the lease that owner took, not the taker's, since a taker
    cannot shorten a lease its live owner renews at its own pace.

    Raises:
        CadenzaError: It is not a number of seconds above 0.
    """
    text = os.environ.get(LEASE_TTL_VARIABLE, "").strip()
    if not text:
        return DEFAULT_LEASE_TTL
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise CadenzaError(
            f"{LEASE_TTL_VARIABLE}={text!r} is not a number of seconds above 0 (e.g. 15)"
        )
    return value
