"""The evaluator of control-coding.yaml: real pytest on the actor's code, in a sandbox.

The actor's code is written into a fresh scratch directory beside a fixed test
file and tested by pytest in a subprocess that runs in its own session, under
resource limits (CPU seconds, address space, file size, open files, no core
dumps) and a wall-clock timeout after which the whole process group is killed.
The verdict is read out of band, from the JUnit XML report pytest writes into
a directory the code under test is not told about, never from the output the
code can print to.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

from cadenza import StepContext

TIMEOUT_SECONDS = 60.0
"""Wall-clock limit of one pytest run; the process group is killed after it."""

LIMITS = {"RLIMIT_CPU": 20, "RLIMIT_AS": 2 << 30, "RLIMIT_FSIZE": 8 << 20, "RLIMIT_NOFILE": 256}
"""Resource limits of the pytest process: CPU seconds, bytes of memory and of files, fds."""

TESTS = """from solution import slugify


def test_lowercases() -> None:
    assert slugify("Hello World") == "hello-world"


def test_strips_punctuation() -> None:
    assert slugify("Ready, set: go!") == "ready-set-go"


def test_collapses_spaces() -> None:
    assert slugify("  many   spaces  ") == "many-spaces"
"""

# Sets the limits, then becomes pytest: no preexec_fn (unsafe with threads).
_LAUNCHER = """
import os, resource, sys
limits = {limits!r}
for name, value in limits.items():
    resource.setrlimit(getattr(resource, name), (value, value))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


async def run_tests(context: StepContext) -> dict[str, Any]:
    """Tests the actor's ``result.code``; returns ``{passed, score, feedback}``."""
    code = str(context.inputs["result"].get("code", ""))
    workdir = Path(tempfile.mkdtemp(prefix="cadenza-coding-"))
    reports = Path(tempfile.mkdtemp(prefix="cadenza-verdict-"))
    try:
        (workdir / "solution.py").write_text(code)
        (workdir / "test_solution.py").write_text(TESTS)
        report = reports / "junit.xml"
        timed_out = await _pytest(workdir, report)
        if timed_out:
            feedback = f"pytest timed out after {TIMEOUT_SECONDS:g}s"
            return {"passed": False, "score": 0.0, "feedback": feedback}
        return _verdict(report)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(reports, ignore_errors=True)


async def _pytest(workdir: Path, report: Path) -> bool:
    """Runs pytest in ``workdir``; True when it had to be killed for taking too long."""
    launcher = _LAUNCHER.format(limits=LIMITS)
    command = [sys.executable, "-c", launcher, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += [f"--junitxml={report}", str(workdir)]
    environment = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONDONTWRITEBYTECODE": "1",
        "HOME": str(workdir),
    }
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=workdir,
        env=environment,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,  # never read: the verdict comes from the report
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        await asyncio.wait_for(process.wait(), TIMEOUT_SECONDS)
    except TimeoutError:
        return True
    finally:  # whatever the code started in its session goes too
        _kill_group(process.pid)
        await process.wait()
    return False


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # gone already, with all it started
        os.killpg(pid, signal.SIGKILL)


def _verdict(report: Path) -> dict[str, Any]:
    """``{passed, score, feedback}`` from pytest's JUnit XML report."""
    if not report.is_file():
        return {"passed": False, "score": 0.0, "feedback": "pytest wrote no report"}
    root = ElementTree.parse(report).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {"passed": False, "score": 0.0, "feedback": "the report has no test suite"}
    cases = list(suite.iter("testcase"))
    total = len(cases)
    failures: list[str] = []
    for case in cases:
        for problem in (*case.findall("failure"), *case.findall("error")):
            message = (problem.get("message") or "").splitlines()[:1]
            failures.append(f"{case.get('name')}: {' '.join(message)}".strip())
    passed = total > 0 and not failures
    score = (total - len(failures)) / total if total else 0.0
    feedback = "all tests pass" if passed else "failing: " + "; ".join(failures)
    return {"passed": passed, "score": round(score, 3), "feedback": feedback}
