"""``cadenza fleet``: the supervisors of a store, their workers and the queue, at a glance.

What the store's roll says (`cadenza.Runtime.fleet`): each live supervisor
with its capacity, the runs it drives and its steps waiting for a worker and
on workers; each worker connected to one, with its credits and the steps it
has in flight; and the queue, by priority, with the age of its oldest run.
``--json`` prints the same as one JSON object (``GET /api/fleet``'s body);
``--watch`` reads it again every few seconds until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import msgspec

from cadenza._redact import redact
from cadenza.errors import CadenzaError
from cadenza.store import Fleet, SupervisorRow, describe_store

from ._paths import STORE_HELP, StoreSpec, existing_store, store_spec

if TYPE_CHECKING:
    from cadenza.api import Runtime

__all__ = ["DEFAULT_EVERY", "add_fleet_command", "fleet_command", "print_fleet"]

DEFAULT_EVERY = 2.0
"""Seconds between two looks of ``--watch``: a supervisor beats every second at most."""

_CLEAR = "\x1b[H\x1b[2J"
_encode = msgspec.json.Encoder().encode


def _seconds(text: str) -> float:
    with contextlib.suppress(ValueError):
        if 0 < (value := float(text)) < float("inf"):
            return value
    raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")


def add_fleet_command(commands: Any, store: StoreSpec) -> None:
    """Adds ``cadenza fleet`` to the command line's subcommands."""
    what = "the supervisors of a store, their workers and the queue"
    fleet = commands.add_parser("fleet", help=what)
    fleet.add_argument("--store", type=store_spec, default=store, help=STORE_HELP)
    fleet.add_argument("--json", action="store_true", help="one JSON object (per look)")
    fleet.add_argument(
        "--watch",
        nargs="?",
        type=_seconds,
        const=DEFAULT_EVERY,
        metavar="SECONDS",
        help=f"look again every SECONDS (default {DEFAULT_EVERY:g}) until Ctrl-C",
    )


async def fleet_command(args: argparse.Namespace) -> int:
    """Prints the fleet once, or every ``--watch`` seconds until a signal; returns 0.

    Raises:
        InputError: No SQLite store at the path.
        StoreError: The store cannot be read (with ``--watch``: at the first look only;
            later, each failed look is one line on stderr, and the watch goes on).
    """
    from cadenza.api import Runtime  # the runtime loads only for the commands that use it

    async with Runtime(store=existing_store(args.store)) as runtime:
        fleet = await runtime.fleet()
        if args.watch is None:
            _show(fleet, args, sys.stdout)
            return 0
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with anyio.create_task_group() as group:
                group.start_soon(_watch, runtime, fleet, args, group.cancel_scope)
                async for _ in signals:
                    group.cancel_scope.cancel()
                    break
    return 0


async def _watch(
    runtime: Runtime, fleet: Fleet, args: argparse.Namespace, scope: anyio.CancelScope
) -> None:
    """Shows ``fleet``, then the fleet every ``--watch`` seconds, until cancelled or the
    reader of stdout goes away (``| head``)."""
    while True:
        try:
            _show(fleet, args, sys.stdout)
        except BrokenPipeError:
            scope.cancel()
            return
        await anyio.sleep(args.watch)
        try:
            fleet = await runtime.fleet()
        except CadenzaError as error:  # a store blip: say so, and look again
            sys.stderr.write(f"cadenza fleet: cannot read the store: {redact(str(error))}\n")
            sys.stderr.flush()


def _show(fleet: Fleet, args: argparse.Namespace, stream: TextIO) -> None:
    if args.json:
        stream.write(_encode(fleet).decode() + "\n")
    else:
        if args.watch is not None and stream.isatty():
            stream.write(_CLEAR)
        elif args.watch is not None:
            stream.write("\n")
        print_fleet(fleet, stream, store=describe_store(args.store))
    stream.flush()


def print_fleet(fleet: Fleet, stream: TextIO, *, store: str) -> None:
    """The fleet as three small tables: supervisors, workers, the queue."""
    queue = fleet.queue
    lines = [f"fleet of {store} at {time.strftime('%H:%M:%S', time.localtime(fleet.at))}", ""]
    lines.append(f"supervisors: {len(fleet.supervisors)}")
    rows = [_supervisor(row, fleet.at) for row in fleet.supervisors]
    columns = ("ID", "HOST:PID", "WORKERS AT", "CAPACITY", "RUNS", "WAITING", "ON WORKERS", "SEEN")
    lines.extend(_table(columns, rows) if rows else ["  (none on the roll)"])
    workers = [
        (worker.name, row.supervisor_id, str(worker.capacity), str(worker.in_flight))
        for row in fleet.supervisors
        for worker in row.pool
    ]
    lines.extend(["", f"workers: {len(workers)}"])
    titles = ("NAME", "SUPERVISOR", "CAPACITY", "IN FLIGHT")
    lines.extend(_table(titles, workers) if workers else ["  (none connected)"])
    lines.extend(["", f"queue: {queue.runs} run{'' if queue.runs == 1 else 's'} waiting"])
    if queue.runs:
        by = ", ".join(f"{runs} at {priority}" for priority, runs in queue.by_priority.items())
        lines.append(f"  by priority: {by}")
        lines.append(f"  oldest waiting {_ago(queue.oldest_age)}")
    stream.write("".join(f"{line}\n" for line in lines))


def _supervisor(row: SupervisorRow, now: float) -> tuple[str, ...]:
    return (
        row.supervisor_id,
        f"{row.host}:{row.pid}",
        row.workers or "-",
        "-" if row.capacity is None else str(row.capacity),
        str(row.runs),
        str(row.waiting),
        str(row.running),
        f"{_ago(now - row.seen_at)} ago",
    )


def _ago(seconds: float) -> str:
    """A wait, to the second past a minute: ``0.4s``, ``12s``, ``3m05s``, ``2h01m``."""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    minutes, whole = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{whole:02d}s" if minutes else f"{whole}s"


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows under a header, each column as wide as its widest cell, two spaces apart."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return [
        (
            "  " + "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        ).rstrip()
        for line in (header, *rows)
    ]
