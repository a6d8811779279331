"""A fleet of ``cadenza supervise`` processes on one store, and the check of what they did.

The runs are durable loops whose every step appends a line (run, address,
execution id) to a file of side effects and answers that execution id, so a
test can tell each execution of a step from the one the store recorded.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import defaultdict
from pathlib import Path

from cadenza import Runtime
from tests._helpers import CLI, opened_store

TTL = 2.0
"""Seconds of the supervisors' leases."""

WORK = """
name: work
steps:
  - id: work
    loop:
      maxIterations: {iterations}
    command: >-
      id=$$.$(date +%s%N); sleep {pause};
      echo "$CADENZA_RUN_ID $CADENZA_STEP_ADDRESS $id" >> {effects}; echo $id
"""
"""A loop of ``iterations`` steps that each take ``pause`` seconds and log to ``effects``."""

Supervisor = tuple[subprocess.Popen[bytes], Path]
"""A supervisor process and the file of what it logged."""


def supervisor(url: str, cwd: Path, n: int, failpoint: str | None = None) -> Supervisor:
    """Starts ``cadenza supervise`` number ``n`` on the store at ``url``, logging at info."""
    log = cwd / f"supervisor-{n}.log"
    environ = {**os.environ, "CADENZA_LOG_LEVEL": "info"}
    if failpoint is not None:
        environ["CADENZA_FAILPOINT"] = failpoint
    with log.open("wb") as stderr:  # the child has its own copy of the descriptor
        process = subprocess.Popen(
            [*CLI, "supervise", "--store", url, "--lease-ttl", str(TTL)],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=environ,
        )
    return process, log


def stop(processes: list[Supervisor]) -> None:
    """Ends every supervisor still running (continuing a stopped one first)."""
    for process, _ in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.terminate()
    for process, _ in processes:
        process.wait(timeout=30)


async def start_orphans(url: str, flow: Path, run_ids: list[str]) -> None:
    """Starts the runs and leaves them at once: this runtime shuts down, so each is
    left running with its lease released, for the supervisors."""
    async with Runtime(store=url, lease_ttl=TTL, shutdown_deadline=0.0) as starter:
        for run_id in run_ids:
            await starter.start(flow, run_id=run_id)


def effect_lines(path: Path) -> list[list[str]]:
    """The side effects so far: ``[run_id, address, execution]`` each."""
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


async def at_least(effects: Path, n: int) -> bool:
    return len(effect_lines(effects)) >= n


async def assert_each_effect_once(
    url: str, effects: Path, run_ids: list[str], iterations: int
) -> int:
    """The store's outcome of every step is one execution, the last one of that step:
    no step ran again once its completion was recorded. Executions beyond one per step
    are only those cut short by a takeover (at most one per takeover of a run).
    Returns the takeovers (``run_resumed`` events) of all runs."""
    executions: dict[tuple[str, str], list[str]] = defaultdict(list)
    for run_id, address, execution in effect_lines(effects):
        executions[run_id, address].append(execution)
    takeovers = 0
    async with opened_store(url) as store:
        for run_id in run_ids:
            records = await store.steps(run_id)
            mine = {a: e for (r, a), e in executions.items() if r == run_id}
            assert len(mine) == iterations, (run_id, sorted(mine))
            for address, ran in mine.items():
                record = records[address]
                assert record.status == "completed", (run_id, address, record)
                recorded = str(record.content).strip()
                assert ran[-1] == recorded, (run_id, address, ran, recorded)
                assert ran.count(recorded) == 1
            resumed = sum(1 for e in await store.events(run_id) if e.type == "run_resumed")
            extra = sum(len(ran) - 1 for ran in mine.values())
            assert extra <= resumed, (run_id, extra, resumed)
            takeovers += resumed
    return takeovers
