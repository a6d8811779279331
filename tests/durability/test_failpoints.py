"""Failpoints: how crash tests choose where a process dies, and what a typo does."""

from __future__ import annotations

import os
from pathlib import Path

from cadenza.testing import CrashHarness, KillPoint
from tests._helpers import cadenza
from tests.conftest import WriteFlow


def test_a_misspelt_failpoint_stops_cadenza_at_once(tmp_path: Path, write_flow: WriteFlow) -> None:
    """An unknown CADENZA_FAILPOINT is an error naming the variable, never silently ignored."""
    flow = write_flow("name: one\nsteps:\n  - id: a\n    command: 'true'\n")
    env = {**os.environ, "CADENZA_FAILPOINT": "step.befor_work:1"}
    proc = cadenza("validate", str(flow), cwd=tmp_path, env=env)
    assert proc.returncode != 0
    assert "CADENZA_FAILPOINT: 'step.befor_work:1' is not NAME:COUNT" in proc.stderr


def test_a_failpoint_never_reached_lets_the_run_finish(
    tmp_path: Path, write_flow: WriteFlow
) -> None:
    """A kill point past the end of the run kills nothing: the run completes."""
    flow = write_flow("name: one\nsteps:\n  - id: a\n    command: 'true'\n")
    with CrashHarness(flow, directory=tmp_path / "runs") as harness:
        outcome = harness.run("r", kill=KillPoint.after_events(1000))
    assert not outcome.killed
    assert outcome.result is not None
    assert outcome.result.status == "completed"


def test_resume_needs_a_run_or_all(tmp_path: Path) -> None:
    """`cadenza resume` with neither RUN_ID nor --all is a usage error (exit 2)."""
    (tmp_path / "runs.db").touch()
    proc = cadenza("resume", "--store", "runs.db", cwd=tmp_path)
    assert proc.returncode == 2
    assert "resume needs a RUN_ID, or --all" in proc.stderr
