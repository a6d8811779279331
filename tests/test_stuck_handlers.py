"""A plain ``def`` handler that never returns cannot keep ``cadenza run`` alive.

A thread cannot be killed: past the step's timeout (or on Ctrl-C) the handler's
thread is abandoned, and the run ends without it. The process must end with the
run, and a signal must end it with the usual summary and no traceback, however
long the abandoned function goes on blocking. Each wait below is a hang
detector: a process that does not end within it is the bug.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import WriteFlow

HANG = 30.0
"""Seconds after which a process that has not ended is taken for hung."""

STUCK = """
import sys
import threading

NEVER = threading.Event()


def forever(context):
    sys.stderr.write("parked\\n")
    sys.stderr.flush()
    NEVER.wait()  # nothing ever sets it
"""


def run_to_its_end(flow: Path, directory: Path) -> subprocess.CompletedProcess[str]:
    """``cadenza run flow`` in ``directory``; a process that outlives ``HANG`` fails the test."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "cadenza", "run", str(flow), "--store", "runs.db"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=HANG,
            check=False,
        )
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"cadenza run outlived its failed run: {hung.stdout!r}")


def test_the_process_ends_when_the_run_is_recorded_failed(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    flow = write_flow(
        "name: stuck\nsteps:\n  - {id: block, handler: 'HANDLERS:forever', timeout: 1s}\n",
        handlers=STUCK,
    )
    proc = run_to_its_end(flow, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "(stuck): failed" in proc.stdout
    assert "Timeout: timed out after 1s" in proc.stdout
    assert proc.stderr == "parked\n"


STUCK_TOOL = """
import sys
import threading

NEVER = threading.Event()


def forever(note: str) -> str:
    \"\"\"Never answers.\"\"\"
    sys.stderr.write("parked\\n")
    sys.stderr.flush()
    NEVER.wait()  # nothing ever sets it
    return note
"""


def test_the_process_ends_when_a_stuck_python_tool_times_out(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """A plain ``def`` Python tool is abandoned like a handler: its thread cannot keep the
    process alive after the run is recorded failed."""
    flow = write_flow(
        "name: stuck\nsteps:\n"
        "  - {id: block, tool: 'HANDLERS:forever', toolInput: {note: x}, timeout: 1s}\n",
        handlers=STUCK_TOOL,
    )
    proc = run_to_its_end(flow, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "(stuck): failed" in proc.stdout
    assert proc.stderr == "parked\n"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_a_run_stuck_in_a_plain_handler(
    write_flow: WriteFlow, tmp_path: Path, signum: signal.Signals
) -> None:
    flow = write_flow(
        "name: stuck\nsteps:\n  - {id: block, handler: 'HANDLERS:forever'}\n", handlers=STUCK
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "cadenza", "run", str(flow), "--store", "runs.db"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline() == "parked\n"  # the handler's thread is blocked now
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"cadenza run outlived its cancelled run: {stdout!r} {stderr!r}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stderr
    assert "(stuck): cancelled" in stdout
    assert f"interrupted by {signum.name}" in stdout
    assert stderr == ""  # no traceback, no "Exception ignored in threading"
