"""The command line's remote-worker parts: ``cadenza worker``, ``cadenza keys``, run flags.

``cadenza worker --connect EP`` runs a `cadenza.remote.Worker` until SIGTERM
(drain: finish what is in flight, take no more) or SIGINT / a second SIGTERM
(stop now; the supervisor re-dispatches). ``cadenza worker --store URL`` runs a
`cadenza.remote.FleetWorker` the same way: it serves every supervisor on the
store's roll (``cadenza supervise --workers``), following them as they come and
go. ``cadenza keys generate DIR`` writes CURVE key pairs (`cadenza.remote.generate_keys`).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

import anyio

from cadenza.errors import CadenzaError

__all__ = ["add_remote_commands", "add_run_options", "keys_command", "worker_command"]


def add_run_options(run: argparse.ArgumentParser) -> None:
    """``cadenza run``'s options for remote workers."""
    run.add_argument("--workers", metavar="EP", help="run steps on workers that connect here")
    run.add_argument("--curve-keys", type=Path, metavar="DIR", help="CURVE keys for --workers")
    run.add_argument(
        "--insecure",
        action="store_true",
        help="allow --workers on a non-loopback address without --curve-keys",
    )


def add_remote_commands(commands: Any, positive: Any) -> None:
    """Adds ``worker`` and ``keys`` to the ``cadenza`` subcommands."""
    worker = commands.add_parser("worker", help="run steps for a supervisor, or a fleet of them")
    where = worker.add_mutually_exclusive_group(required=True)
    where.add_argument("--connect", metavar="EP", help="the supervisor's endpoint")
    where.add_argument(
        "--store",
        metavar="URL",
        help="serve every live supervisor of this run store (cadenza supervise --workers): "
        "a postgresql:// URL, or a SQLite file for supervisors of this machine",
    )
    worker.add_argument("--concurrency", type=positive, default=4, help="steps at once")
    worker.add_argument("--curve-keys", type=Path, metavar="DIR", help="CURVE key directory")
    worker.add_argument("--name", help="how events and results name this worker")

    keys = commands.add_parser("keys", help="CURVE keys for supervisor and workers")
    keys.add_argument("action", choices=("generate",))
    keys.add_argument("directory", type=Path)
    keys.add_argument("--name", default="worker", help="the worker key pair's name")


def keys_command(args: argparse.Namespace) -> int:
    """``cadenza keys generate DIR``: prints each file written."""
    from cadenza.remote import generate_keys

    for path in generate_keys(args.directory, name=args.name):
        sys.stdout.write(f"{path}\n")
    return 0


def worker_command(args: argparse.Namespace) -> int:
    """``cadenza worker``: serves until drained or stopped; its exit code."""
    from cadenza.remote import FleetWorker, Worker
    from cadenza.workflow import step_kinds

    from ._paths import existing_store, store_spec

    step_kinds()  # a kind CADENZA_STEP_KINDS names that cannot load: exit 2 now, not per step
    worker: Worker | FleetWorker
    if args.store is not None:
        worker = FleetWorker(
            existing_store(store_spec(args.store)),
            concurrency=args.concurrency,
            name=args.name,
            curve_keys=args.curve_keys,
        )
    else:
        worker = Worker(
            args.connect, concurrency=args.concurrency, name=args.name, curve_keys=args.curve_keys
        )

    async def run_worker() -> int:
        failure: CadenzaError | None = None  # said as itself, not inside a task group's error
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as group:

                async def on_signal() -> None:
                    async for signum in signals:
                        if signum == signal.SIGTERM:
                            worker.drain()  # a second SIGTERM stops
                        else:
                            worker.stop()

                group.start_soon(on_signal)
                try:
                    code = await worker.run()
                except CadenzaError as error:  # the store cannot be opened
                    failure, code = error, 2
                group.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return code

    return anyio.run(run_worker)
