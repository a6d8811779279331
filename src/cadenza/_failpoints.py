"""Failpoints: named places where a crash test can kill (or pause) this process.

A crash test sets ``CADENZA_FAILPOINT=name:count`` (several separated by
commas); the ``count``-th time this process passes the failpoint ``name``, it
sends itself SIGKILL — no cleanup, no ``finally``, no flush: exactly what
``kill -9`` or a power cut leaves behind. ``name:count:stop`` sends SIGSTOP
instead: the process is paused right there, as by ``kill -STOP`` or a frozen
VM, until the test continues it (SIGCONT). Unset, a failpoint costs one global
lookup. The names:

``event``
    The journal has just queued an event (not yet durable).
``store.before_commit`` / ``store.after_commit``
    The store's writer thread has written a batch but not committed it / has
    committed it but not yet told the waiting steps.
``store.in_transaction``
    The PostgreSQL writer is inside a batch's transaction, its runs' lease
    rows locked, nothing written yet (a batch that is not one statement).
``step.before_work``
    A step (or container) is recorded as started; its work begins next.
``step.before_record`` / ``step.after_record``
    A step's outcome is about to be recorded / is durable, but its controller
    has not heard of it yet.
``call.after_record``
    An agent's tool call, and every call before it, is durable.
``call.before_confirm``
    A supervisor has a call a worker made (queued, not yet committed) and has not
    confirmed it to the worker.

`arm` re-reads a specification at run time, for processes forked from one that
imported Cadenza before the variable was set (the crash harness does this).
"""

from __future__ import annotations

import os
import signal

__all__ = ["ARMED", "FAILPOINTS", "FAILPOINT_VARIABLE", "arm", "failpoint"]

FAILPOINT_VARIABLE = "CADENZA_FAILPOINT"
"""The environment variable that arms failpoints: ``name:count[,name:count...]``."""

FAILPOINTS = frozenset(
    (
        "event",
        "store.before_commit",
        "store.after_commit",
        "store.in_transaction",
        "step.before_work",
        "step.before_record",
        "step.after_record",
        "call.after_record",
        "call.before_confirm",
    )
)
"""Every failpoint name Cadenza passes through."""

# name -> hits still to go before the kill; empty when nothing is armed.
_armed: dict[str, int] = {}
ARMED = _armed
"""The armed failpoints (changed in place by `arm`): a hot path tests it before the call."""

_stopping: set[str] = set()  # the armed names that pause the process rather than kill it


def arm(specification: str | None) -> None:
    """Arms the failpoints in ``specification`` (``name:count[:stop],...``), disarming the rest.

    Raises:
        ValueError: An unknown name, or a count that is not a positive integer.
    """
    armed: dict[str, int] = {}
    stopping: set[str] = set()
    for part in (specification or "").split(","):
        if not part.strip():
            continue
        point, stop = part.strip(), False
        if point.endswith(":stop"):
            point, stop = point.removesuffix(":stop"), True
        name, _, count = point.rpartition(":")
        if name not in FAILPOINTS or not count.isdigit() or int(count) < 1:
            raise ValueError(
                f"{FAILPOINT_VARIABLE}: {part.strip()!r} is not NAME:COUNT[:stop] with NAME one of "
                f"{', '.join(sorted(FAILPOINTS))} and COUNT at least 1"
            )
        armed[name] = int(count)
        if stop:
            stopping.add(name)
    _armed.clear()
    _armed.update(armed)
    _stopping.clear()
    _stopping.update(stopping)


def failpoint(name: str) -> None:
    """Passes the failpoint ``name``: the process dies (or pauses) here if it is armed and due."""
    if not _armed:
        return
    left = _armed.get(name)
    if left is None:
        return
    if left > 1:
        _armed[name] = left - 1
        return
    if name in _stopping:
        del _armed[name]  # continued, the process goes on past it
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    os.kill(os.getpid(), signal.SIGKILL)


arm(os.environ.get(FAILPOINT_VARIABLE))
