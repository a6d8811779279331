"""``cadenza replay RUN_ID``: a recorded run, run again offline against its record.

The run's agents are answered from its call journal, its other leaves from
their recorded outcomes; no model is called and no key is needed; nothing is
written to the store (`cadenza.api.replay_run`). ``--workflow FILE`` replays an
edited copy of the run's workflow instead: how a prompt or a condition edit is
tested without a model. Exit codes: 0 the replay made every decision the run
made and came to an equal result (its summary is printed, as ``cadenza run``
prints one); 1 it differs (one line says where and what); 2 the run cannot be
replayed (no such run or store, not ended, cancelled, recorded without a call
journal) or the workflow or command line is invalid.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import msgspec

from cadenza.workflow import THINKING_LEVELS

from ._paths import STORE_HELP, StoreSpec, existing_store, store_spec

__all__ = ["add_replay_command", "replay_command"]


def add_replay_command(commands: Any, store: StoreSpec) -> None:
    """Adds ``replay``."""
    replay = commands.add_parser(
        "replay", help="run a recorded run again offline and report where it differs"
    )
    replay.add_argument("run_id")
    replay.add_argument("--store", type=store_spec, default=store, help=STORE_HELP)
    replay.add_argument(
        "--workflow", type=Path, help="replay this edited copy of the run's workflow instead"
    )
    replay.add_argument(
        "--model", help="model for steps without an agent (default: the one the run used)"
    )
    replay.add_argument(
        "--thinking",
        choices=THINKING_LEVELS,
        help="thinking level of agents that set none (default: the one the run used)",
    )
    replay.add_argument("--json", action="store_true", help="print the report JSON only")
    replay.add_argument("--events", action="store_true", help="write NDJSON events to stderr")


async def replay_command(args: argparse.Namespace) -> int:
    """``cadenza replay``: 0 the replay matches the record, 1 it differs."""
    from cadenza.api import replay_run  # loaded by the commands that need it

    from ._output import print_summary, watch_run

    async with watch_run(events=args.events, json_only=args.json) as on_event:
        report = await replay_run(
            existing_store(args.store),
            args.run_id,
            workflow=args.workflow,
            default_model=args.model,
            on_event=on_event,
            default_thinking=args.thinking,
        )
    if args.json:
        body = {
            "runId": report.run_id,
            "matches": report.matches,
            "difference": report.difference,
            "answered": report.answered,
            "result": report.result,
        }
        sys.stdout.write(msgspec.json.encode(body).decode() + "\n")
    elif report.difference is not None:
        sys.stderr.write(f"cadenza: the replay differs from the record: {report.difference}\n")
    else:
        print_summary(report.result, sys.stdout, store=args.store)
        sys.stdout.write(f"replayed offline: {_answered(report.answered)}\n")
    return 0 if report.matches else 1


def _answered(answered: dict[str, int]) -> str:
    """``every decision and the result match the record (3 model calls, ...)``."""
    counts = [
        f"{answered['model']} model call(s)",
        f"{answered['tool']} tool call(s)",
        f"{answered['steps']} other step(s)",
    ]
    return f"every decision and the result match the record ({', '.join(counts)} answered by it)"
