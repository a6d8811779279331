"""Run leases: which process drives a run, so that two never do at once.

A run is driven by exactly one process: the one that started it, or the one
that resumed it. That process holds the run's lease in the store for as long
as it drives the run. A lease names its holder (host, process id and the
process's start time, plus a token unique to the holder) so that another
process can tell a live holder from a dead one: after ``kill -9`` nobody
releases the lease, and waiting for an expiry would keep the run down for no
reason. A lease held on this host by a process that no longer exists (or is a
zombie, or is a different process under a reused id) is stale and is taken
over at once; a lease held from another host is honoured.
"""

from __future__ import annotations

import os
import secrets
import socket

import msgspec

from cadenza.errors import LeaseHeld

__all__ = ["LeaseHolder", "check_takeover"]


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


def check_takeover(run_id: str, current: LeaseHolder | None, claimant: LeaseHolder) -> None:
    """Decides whether ``claimant`` may take the lease ``current`` holds.

    Raises:
        LeaseHeld: A live process other than the claimant holds it.
    """
    if current is None or current.token == claimant.token or not current.is_alive():
        return
    raise LeaseHeld(
        f"run {run_id!r} is being driven by {current.describe()}; two processes may not "
        "run or resume one run at once (wait for it to finish, or stop it first)"
    )
