"""``cadenza supervise``: starts queued runs, and takes over those whose owner stopped
renewing its lease; ``cadenza submit``: queues a run for a supervisor.

A supervisor is a `cadenza.Runtime` with ``recover=True`` and nothing else to
do: every few seconds it looks in the store for runs of status ``running``
whose lease expired (their process died, or was paused or cut off past the
lease's time to live), takes each one's lease and resumes it, replaying what
was recorded. Several supervisors may share one store (PostgreSQL): the lease
decides which of them takes a run, and its fencing token keeps a former owner
that comes back from writing to it. SIGTERM or Ctrl-C stops the supervisor;
the runs it was driving are left resumable, for another supervisor to take.

A supervisor also starts queued runs (``cadenza submit``, `cadenza.Runtime.submit`)
while it drives fewer than ``--capacity`` runs: the highest priority first, then
the oldest. Taking one is taking its lease, in the statement that picks it, so two
supervisors never start one run.

With ``--workers EP`` a supervisor runs every step of the runs it drives (started
from the queue or taken over) on remote workers that connect to EP, and records
on the store's roll where they connect (``--advertise``, else EP with this host's
address for ``0.0.0.0``) and how much it has waiting: ``cadenza worker --store``
finds it there, with every other supervisor of the fleet.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from cadenza._logging import configure_logging
from cadenza.errors import CadenzaError
from cadenza.store import DEFAULT_LEASE_TTL, describe_store
from cadenza.workflow import load_workflow

from ._inputs import add_input_options, parse_inputs
from ._paths import PRICES_HELP, STORE_HELP, StoreSpec, store_spec
from ._remote import add_run_options

if TYPE_CHECKING:
    from cadenza.remote import Dispatcher

__all__ = [
    "DEFAULT_CAPACITY",
    "add_supervise_command",
    "run_count",
    "submit_command",
    "supervise_command",
]

DEFAULT_CAPACITY = 10
"""Runs a supervisor drives at once before it leaves queued runs to others."""


def _seconds(text: str) -> float:
    """A number of seconds above 0 (``--lease-ttl 15``)."""
    with contextlib.suppress(ValueError):
        if (value := float(text)) > 0:
            return value
    raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")


def add_supervise_command(commands: Any, store: StoreSpec) -> None:
    """Adds ``cadenza supervise`` to the command line's subcommands."""
    what = "take over and finish runs whose process died (lease expired)"
    supervise = commands.add_parser("supervise", help=what)
    supervise.add_argument("--store", type=store_spec, default=store, help=STORE_HELP)
    ttl = (
        "the lease of the runs this supervisor takes over, renewed every third of it "
        f"(default: $CADENZA_LEASE_TTL, else {DEFAULT_LEASE_TTL:g}); a dead owner's run is "
        "taken once the lease that owner took expires"
    )
    supervise.add_argument("--lease-ttl", type=_seconds, metavar="SECONDS", help=ttl)
    supervise.add_argument("--model", help="model for steps without an agent (provider:model)")
    supervise.add_argument("--prices", type=Path, metavar="FILE", help=PRICES_HELP)
    capacity = (
        "start queued runs (cadenza submit) while this supervisor drives fewer than N runs "
        f"(default {DEFAULT_CAPACITY})"
    )
    supervise.add_argument(
        "--capacity", type=run_count, default=DEFAULT_CAPACITY, metavar="N", help=capacity
    )
    add_run_options(supervise)
    advertise = (
        "with --workers: the endpoint workers of other hosts connect to, as the store's "
        "roll records it for `cadenza worker --store` (default: --workers, with this "
        "host's address for 0.0.0.0 or *)"
    )
    supervise.add_argument("--advertise", metavar="EP", help=advertise)

    what = "queue a run of a workflow file for a supervisor (cadenza supervise); print its id"
    submit = commands.add_parser("submit", help=what)
    submit.add_argument("file", type=Path)
    add_input_options(submit)
    submit.add_argument("--store", type=store_spec, default=store, help=STORE_HELP)
    submit.add_argument("--run-id", help="record the run under this id")
    submit.add_argument(
        "--priority",
        type=int,
        metavar="N",
        help="supervisors start higher priorities first, then the oldest (default 0)",
    )


def run_count(text: str) -> int:
    """A whole number of runs, at least 1 (``--capacity 50``)."""
    with contextlib.suppress(ValueError):
        if (value := int(text)) >= 1:
            return value
    raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of runs above 0")


async def submit_command(args: argparse.Namespace) -> int:
    """Records the run as queued and prints its id; returns the exit code."""
    from cadenza.api import Runtime

    document = load_workflow(args.file)
    inputs = parse_inputs(args)
    async with Runtime(store=args.store) as runtime:
        run_id = await runtime.submit(
            document, inputs=inputs, run_id=args.run_id, priority=args.priority
        )
    sys.stdout.write(f"{run_id}\n")
    return 0


async def supervise_command(args: argparse.Namespace) -> int:
    """Takes over orphaned runs until SIGTERM or SIGINT; returns the exit code."""
    from cadenza.api import Runtime

    # Takeovers are what a supervisor is for: shown unless the user chose a level.
    if not args.debug:
        configure_logging(None if "CADENZA_LOG_LEVEL" in os.environ else "info")
    workers = _dispatcher(args)
    async with Runtime(
        store=args.store,
        lease_ttl=args.lease_ttl,
        recover=True,
        default_model=args.model,
        prices=args.prices,
        capacity=args.capacity,
        workers=workers,
    ) as runtime:
        every = runtime.recovery_interval
        remote = "" if workers is None else f"; steps run on workers at {workers.advertised}"
        sys.stderr.write(
            f"cadenza supervise: taking over orphaned runs of {describe_store(args.store)} "
            f"every {every:g} s (lease {runtime.lease_ttl:g} s), and queued runs while it "
            f"drives fewer than {args.capacity}{remote}; SIGTERM or Ctrl-C stops\n"
        )
        sys.stderr.flush()
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                break
    return 0


def _dispatcher(args: argparse.Namespace) -> Dispatcher | None:
    """The dispatcher ``--workers`` asks for, or None.

    Raises:
        CadenzaError: A worker option without ``--workers``; an unsafe endpoint
            (`InsecureEndpoint`) or an incomplete key directory (`KeysError`).
    """
    if args.workers is None:
        given = [flag for flag in ("curve_keys", "advertise", "insecure") if getattr(args, flag)]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise CadenzaError(f"{flag} is for --workers: give --workers EP too")
        return None
    from cadenza.remote import Dispatcher  # pyzmq only for a supervisor with workers

    return Dispatcher(
        args.workers, curve_keys=args.curve_keys, insecure=args.insecure, advertise=args.advertise
    )
