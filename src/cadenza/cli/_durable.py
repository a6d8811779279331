"""The command line's durable-run parts: ``resume``, ``fork``, ``signal``, ``runs prune|check``.

``cadenza resume RUN_ID`` reports like ``cadenza run`` (same output, same exit
codes); ``--all`` resumes every interrupted run in the store, and every
waiting run whose question has been answered since. A run whose workflow
names Python code this process lacks (built with ``cadenza.build``) is left
untouched: exit 2 for ``resume RUN_ID``; a warning, then the next run, for
``--all``. ``cadenza fork RUN_ID --at ADDRESS`` starts a new run that reuses
what the run recorded before ADDRESS started and runs live from there, reported
like ``cadenza run``. ``cadenza signal RUN_ID ADDRESS --data JSON`` records a person's
answer (exit 2, nothing recorded, when it does not fit the step's schema).
``cadenza runs prune`` deletes finished runs (``--older-than 7d`` and/or
``--keep N``); ``cadenza runs check`` checks the store's integrity (exit 1 when
it finds a problem).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cadenza.errors import CadenzaError, InputError, RunNeedsCode
from cadenza.store import describe_store
from cadenza.workflow import THINKING_LEVELS, parse_duration

from ._inputs import add_input_options, parse_edits, parse_inputs
from ._paths import (
    PRICES_HELP,
    STORE_HELP,
    THINKING_HELP,
    StoreSpec,
    existing_store,
    store_spec,
)
from ._permissions import TerminalAsker, add_permission_options, tool_policy

if TYPE_CHECKING:
    from cadenza.api import Runtime

__all__ = [
    "add_durable_commands",
    "cancel_command",
    "fork_command",
    "maintain_runs",
    "parse_age",
    "resume_command",
    "signal_command",
]

_DAYS = re.compile(r"^(\d+)d(.*)$")


def parse_age(text: str) -> float:
    """Seconds in an age like ``7d``, ``36h``, ``1d12h``, ``90m``.

    Raises:
        argparse.ArgumentTypeError: The text is not such an age.
    """
    match = _DAYS.match(text)
    days, rest = (int(match.group(1)), match.group(2)) if match else (0, text)
    try:
        return days * 86400 + (parse_duration(rest) if rest else 0.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age like 7d, 36h or 90m") from None


def add_durable_commands(
    commands: Any, runs: argparse.ArgumentParser, positive: Any, store: StoreSpec
) -> None:
    """Adds ``resume`` and ``signal``, and the ``runs prune|check`` options."""
    resume = commands.add_parser("resume", help="continue an interrupted or waiting run")
    resume.add_argument("run_id", nargs="?", help="the run (or --all)")
    resume.add_argument("--all", action="store_true", help="every run that can continue")
    resume.add_argument("--json", action="store_true", help="print the result JSON only")
    resume.add_argument("--events", action="store_true", help="write NDJSON events to stderr")
    resume.add_argument("--store", type=store_spec, default=store, help=STORE_HELP)
    resume.add_argument("--max-concurrency", type=positive, help="steps in parallel")
    resume.add_argument("--model", help="model for steps without an agent (provider:model)")
    resume.add_argument("--thinking", choices=THINKING_LEVELS, help=THINKING_HELP)
    resume.add_argument("--prices", type=Path, metavar="FILE", help=PRICES_HELP)
    add_permission_options(resume)

    fork = commands.add_parser("fork", help="run again from a step of a run, as a new run")
    fork.add_argument("run_id", help="the run to fork")
    fork.add_argument("--at", required=True, metavar="ADDRESS", help="the step to run again from")
    add_input_options(fork)
    fork.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="ADDRESS=TEXT",
        help="a reused step's new text (its result becomes null)",
    )
    fork.add_argument(
        "--set-json",
        action="append",
        default=[],
        metavar="ADDRESS=JSON",
        help="a reused step's new result (its text becomes the JSON)",
    )
    fork.add_argument("--run-id", dest="run_id_new", help="record the new run under this id")
    fork.add_argument("--json", action="store_true", help="print the result JSON only")
    fork.add_argument("--events", action="store_true", help="write NDJSON events to stderr")
    fork.add_argument("--store", type=store_spec, default=store, help=STORE_HELP)
    fork.add_argument("--model", help="model for steps without an agent (provider:model)")
    fork.add_argument("--thinking", choices=THINKING_LEVELS, help=THINKING_HELP)
    fork.add_argument("--prices", type=Path, metavar="FILE", help=PRICES_HELP)
    add_permission_options(fork)

    signal = commands.add_parser("signal", help="answer a step waiting for a person")
    signal.add_argument("run_id")
    signal.add_argument("address", help="the waiting step's address (loop.2.approve)")
    signal.add_argument("--data", required=True, help="the answer, as JSON")
    signal.add_argument("--store", type=store_spec, default=store, help=STORE_HELP)

    cancel = commands.add_parser("cancel", help="cancel a run, whichever process drives it")
    cancel.add_argument("run_id")
    cancel.add_argument("--reason", default="cancelled with cadenza cancel", help="recorded")
    cancel.add_argument("--store", type=store_spec, default=store, help=STORE_HELP)

    runs.add_argument("--older-than", type=parse_age, metavar="AGE", help="prune: e.g. 7d")
    runs.add_argument("--keep", type=positive, metavar="N", help="prune: the N newest finished")


def _store(args: argparse.Namespace) -> StoreSpec:
    return existing_store(args.store)


async def resume_command(args: argparse.Namespace) -> int:
    """``cadenza resume``: reports like ``cadenza run``; returns the exit code."""
    if bool(args.run_id) == bool(args.all):
        raise InputError("resume needs a RUN_ID, or --all (not both)")
    from cadenza.api import Runtime  # loaded by the commands that need it

    asker = TerminalAsker() if args.ask else None
    policy = tool_policy(args, asker)
    async with Runtime(
        store=_store(args),
        default_model=args.model,
        default_thinking=args.thinking,
        permissions=policy,
        prices=args.prices,
    ) as runtime:
        if not args.all:
            return await _resume_one(runtime, args.run_id, args, asker)
        codes = []
        rows = await runtime.resumable()
        for row in rows:
            try:
                codes.append(await _resume_one(runtime, row.run_id, args, asker))
            except RunNeedsCode as error:  # untouched: its application resumes it, not an error
                sys.stderr.write(f"cadenza: skipped: {error}\n")
            except CadenzaError as error:  # one run that cannot go on does not stop the rest
                sys.stderr.write(f"cadenza: {row.run_id}: {error}\n")
                codes.append(2)
        if not rows:
            sys.stderr.write("cadenza: no run to resume\n")
        # Worst first: a failed run, then one that could not resume, then one still waiting.
        return next((code for code in (1, 2, 3) if code in codes), 0)


async def _resume_one(
    runtime: Runtime, run_id: str, args: argparse.Namespace, asker: TerminalAsker | None
) -> int:
    """Resumes one run, watched and reported like ``cadenza run``; its exit code."""
    from ._output import LiveProgress, follow, watch_run

    async with watch_run(events=args.events, json_only=args.json) as on_event:
        if asker is not None and isinstance(on_event, LiveProgress):
            asker.progress = on_event
        handle = await runtime.resume(
            run_id, max_concurrency=args.max_concurrency, on_event=on_event
        )
        return await follow(handle, args)


async def fork_command(args: argparse.Namespace) -> int:
    """``cadenza fork``: a new run from ADDRESS on, reported like ``cadenza run``."""
    inputs = parse_inputs(args)
    edits = parse_edits(args)
    from cadenza.api import Runtime  # loaded by the commands that need it

    from ._output import LiveProgress, follow, watch_run

    asker = TerminalAsker() if args.ask else None
    policy = tool_policy(args, asker)
    async with (
        Runtime(
            store=_store(args),
            default_model=args.model,
            default_thinking=args.thinking,
            permissions=policy,
            prices=args.prices,
        ) as runtime,
        watch_run(events=args.events, json_only=args.json) as on_event,
    ):
        if asker is not None and isinstance(on_event, LiveProgress):
            asker.progress = on_event
        handle = await runtime.fork(
            args.run_id,
            at=args.at,
            inputs=inputs or None,
            set=edits,
            new_run_id=args.run_id_new,
            on_event=on_event,
        )
        if on_event is None:  # no progress on the terminal to say it: the new run's id
            sys.stderr.write(f"cadenza: run {handle.run_id} forks {args.run_id} at {args.at}\n")
        return await follow(handle, args)


async def signal_command(args: argparse.Namespace) -> int:
    """``cadenza signal``: records the answer; exit 2 (nothing recorded) if it does not fit."""
    try:
        data = json.loads(args.data)
    except ValueError as error:
        raise InputError(f"--data is not JSON: {error}") from None
    from cadenza.api import Runtime  # loaded by the commands that need it

    async with Runtime(store=_store(args)) as runtime:
        await runtime.signal(args.run_id, args.address, data)
    from ._output import command_hint

    resume = command_hint("resume", args.run_id, store=args.store)
    sys.stdout.write(
        f"recorded the answer for {args.address} of run {args.run_id}; continue it with: {resume}\n"
    )
    return 0


async def maintain_runs(args: argparse.Namespace) -> int:
    """``cadenza runs prune`` and ``cadenza runs check``."""
    from cadenza.api import Runtime  # loaded by the commands that need it

    async with Runtime(store=_store(args)) as runtime:
        if args.action == "check":
            problems = await runtime.check()
            for problem in problems:
                sys.stdout.write(f"{problem}\n")
            if not problems:
                sys.stdout.write(f"{describe_store(args.store)}: ok\n")
            return 1 if problems else 0
        if args.older_than is None and args.keep is None:
            raise InputError("runs prune needs --older-than AGE and/or --keep N")
        pruned = await runtime.prune(older_than=args.older_than, keep=args.keep)
        for run_id in pruned:
            sys.stdout.write(f"{run_id}\n")
        sys.stderr.write(f"pruned {len(pruned)} finished run(s)\n")
        return 0


async def cancel_command(args: argparse.Namespace) -> int:
    """``cadenza cancel``: cancels the run where it is driven; exit 2 if it has finished."""
    from cadenza.api import Runtime  # loaded by the commands that need it

    async with Runtime(store=_store(args)) as runtime:
        handle = await runtime.cancel(args.run_id, args.reason)
        if handle is not None:  # nobody drove it: it was taken up here to be cancelled
            result = await handle.result()
            sys.stdout.write(f"run {args.run_id} is {result.status}\n")
            return 0
    sys.stdout.write(
        f"asked the process that drives run {args.run_id} to cancel it: it does within "
        "a second (or, if that process is gone, whoever takes the run over does)\n"
    )
    return 0
