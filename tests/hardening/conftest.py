"""Shared pieces of the hardening tests: hypothesis settings, bounds, a child-process meter.

Sizes are the CI sizes; ``CADENZA_FUZZ=long`` runs the fuzzers with many more
examples (the full-size soak and back-pressure runs live in ``benchmarks/``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings

FUZZ = settings(
    # Applied per test (not as a global profile, which would change other suites).
    max_examples=5_000 if os.environ.get("CADENZA_FUZZ") == "long" else 100,
    deadline=None,  # bounds are asserted explicitly, on CPU time
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""Hypothesis settings of the fuzzers: 100 examples, 5,000 with ``CADENZA_FUZZ=long``."""

CPU_LIMIT = 1.0
"""Seconds of CPU one hostile document may cost to validate (the issue's bound)."""
LOOP_LIMIT = 0.1
"""Seconds of CPU one CEL evaluation, refused or not, may hold the event loop (issue 26)."""
WALL_LIMIT = 20.0
"""Wall seconds, far above normal: catches a hang, not a slow machine."""
MEMORY_LIMIT = 100 * 1024 * 1024
"""Bytes one hostile document may cost (Python allocations, or RSS growth of the CLI)."""


@dataclass(frozen=True)
class ChildRun:
    """A finished child process: exit code, output, and what it cost."""

    returncode: int
    stdout: str
    stderr: str
    max_rss: int
    """Peak resident set size in bytes (from the kernel's rusage of this child alone)."""
    seconds: float


def run_child(args: list[str], *, cwd: Path, timeout: float = 60.0) -> ChildRun:
    """Runs ``python args...`` and measures its peak RSS with ``wait4`` (Linux, macOS)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        process = subprocess.Popen([sys.executable, *args], cwd=cwd, stdout=out, stderr=err)
        killer = threading.Timer(timeout, process.kill)  # a hang ends as a failure, not a stall
        killer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            killer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: KiB on Linux
        return ChildRun(
            process.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            usage.ru_maxrss * scale,
            seconds,
        )
