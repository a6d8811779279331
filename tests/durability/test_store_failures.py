"""When the store fails a run: one line, exit 1, the store intact, and resume finishes it.

``cadenza run`` against a PostgreSQL server that restarts under it, and against
a SQLite file whose disk fills up. Either the run goes on (the server came back
before the run next wrote), or it ends with one line on stderr naming what
failed and the command that resumes it, exit 1; ``cadenza resume`` then brings
it to the result an uninterrupted run has. The restarts happen on a cluster of
this module's own, so that the session's cluster, which other tests share,
never goes down.

The full disk is a 4 MiB tmpfs filled to the last byte (ENOSPC) where the test
may mount one (as root), and everywhere a file size limit on the ``cadenza``
process (``RLIMIT_FSIZE``, SIGXFSZ ignored: EFBIG), which SQLite reports alike.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from cadenza.protocols import RunResult
from cadenza.testing import compare_results
from tests._postgres import Cluster, started_cluster, unavailable
from tests.conftest import WriteFlow, new_database

DEADLINE = 60.0
"""Seconds a run may take to reach what a test waits for: a bound on a hang."""

BIG = 300_000
"""Bytes of the second step's output: more than a 4 MiB tmpfs filled up, or the
file size limit, leave room for in the store's log."""

FLOW = """
name: steady
steps:
  - id: first
    command: echo first
  - id: second
    dependsOn: [first]
    command: >-
      touch {started}; while [ ! -e {go} ]; do sleep 0.02; done;
      head -c {size} /dev/zero | tr '\\0' x
  - id: third
    dependsOn: [second]
    command: echo third
"""

pytestmark = pytest.mark.timeout(300)


def cadenza(*args: str, cwd: Path, prefix: list[str] | None = None) -> subprocess.Popen[str]:
    """``python -m cadenza ARGS`` (or ``PREFIX ARGS``), started, its output piped."""
    argv = prefix or [sys.executable, "-m", "cadenza"]
    return subprocess.Popen(
        [*argv, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finished(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=DEADLINE)
    return process.returncode, out, err


def wait_for_file(path: Path, process: subprocess.Popen[str]) -> None:
    """Waits until ``path`` exists; fails if the process ended first or it takes too long."""
    give_up = time.monotonic() + DEADLINE
    while not path.exists():
        if process.poll() is not None:
            pytest.fail(f"the run ended before {path.name}: {finished(process)}")
        if time.monotonic() > give_up:
            pytest.fail(f"gave up waiting for {path.name}")
        time.sleep(0.02)


def result_of(stdout: str) -> RunResult:
    return msgspec.json.decode(stdout.strip().splitlines()[-1], type=RunResult)


def golden(tmp_path: Path, write_flow: WriteFlow, store: str) -> RunResult:
    """The result of the flow run without interruption (its ``go`` already there)."""
    flow = write_flow(
        FLOW.format(started=tmp_path / "g-started", go=tmp_path / "g-go", size=BIG),
        name="golden.yaml",
    )
    (tmp_path / "g-go").touch()
    code, out, err = finished(cadenza("run", str(flow), "--json", "--store", store, cwd=tmp_path))
    assert code == 0, err
    return result_of(out)


def assert_one_line_naming_the_resume(err: str, store_hint: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("cadenza: error: run 'x' stopped: the run store "), err
    assert "could not commit its writes" in lines[0], err
    assert f"cadenza resume x --store {store_hint}" in lines[0], err


# -- PostgreSQL restarts -------------------------------------------------------------


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[Cluster]:
    """A PostgreSQL server of this module's own: its tests stop and start it."""
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    with started_cluster() as cluster:
        yield cluster


@pytest.mark.parametrize("when", ["between-writes", "at-a-write"])
def test_a_server_restart_mid_run_is_survived_or_ends_in_one_line_and_resumes(
    tmp_path: Path, write_flow: WriteFlow, own_cluster: Cluster, when: str
) -> None:
    """between-writes: the server restarts while a step runs and is back before its
    result is written: the run goes on. at-a-write: the server is down when the step's
    result is written: one line, exit 1; once it is back, resume finishes the run."""
    url = new_database(own_cluster)
    expected = golden(tmp_path, write_flow, new_database(own_cluster))
    started, go = tmp_path / "started", tmp_path / "go"
    flow = write_flow(FLOW.format(started=started, go=go, size=BIG))
    running = cadenza("run", str(flow), "--json", "--run-id", "x", "--store", url, cwd=tmp_path)
    wait_for_file(started, running)
    own_cluster.stop()
    try:
        if when == "between-writes":
            own_cluster.start()
            go.touch()
            code, out, err = finished(running)
            assert (code, err) == (0, ""), err
            assert compare_results(expected, result_of(out)) == []
            return
        go.touch()
        code, out, err = finished(running)  # the server is still down
    finally:
        with contextlib.suppress(RuntimeError):  # started already
            own_cluster.start()
    assert (code, out) == (1, ""), err
    assert_one_line_naming_the_resume(err, "'postgresql://postgres:***@127.0.0.1:")
    assert own_cluster.password not in err
    code, out, err = finished(cadenza("resume", "x", "--json", "--store", url, cwd=tmp_path))
    assert code == 0, err
    assert compare_results(expected, result_of(out)) == []


# -- SQLite on a full disk -----------------------------------------------------------

FILE_SIZE_LIMIT = 128 * 1024

LIMITED = (
    "import resource, runpy, signal, sys; "
    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "  # EFBIG, not death, past the limit
    f"resource.setrlimit(resource.RLIMIT_FSIZE, ({FILE_SIZE_LIMIT}, {FILE_SIZE_LIMIT})); "
    "sys.argv[0] = 'cadenza'; runpy.run_module('cadenza', run_name='__main__')"
)
"""``python -m cadenza`` with no file of its own growing past `FILE_SIZE_LIMIT` bytes."""


class SmallDisk:
    """Where the store goes, and how the disk under it fills up and is freed again."""

    def __init__(self, directory: Path, *, mounted: bool) -> None:
        self.directory = directory
        self.mounted = mounted
        self.filler = directory / "filler"

    @property
    def prefix(self) -> list[str] | None:
        """How ``cadenza`` is started: under the file size limit unless on the tmpfs."""
        return None if self.mounted else [sys.executable, "-c", LIMITED]

    def fill(self) -> None:
        """Takes every free byte of the tmpfs (the limit needs nothing done)."""
        if not self.mounted:
            return
        block = b"\0" * 4096
        with self.filler.open("wb", buffering=0) as filler, contextlib.suppress(OSError):
            while True:  # until ENOSPC: full
                filler.write(block)

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)


@pytest.fixture(params=["tmpfs", "file-size-limit"])
def small_disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SmallDisk]:
    directory = tmp_path / "disk"
    directory.mkdir()
    if request.param == "file-size-limit":
        yield SmallDisk(directory, mounted=False)
        return
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the file-size-limit case covers a full disk")
    mount = ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(directory)]
    done = subprocess.run(mount, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): the limit case covers")
    try:
        yield SmallDisk(directory, mounted=True)
    finally:
        subprocess.run(["umount", str(directory)], check=True)


def test_a_full_disk_ends_the_run_in_one_line_and_resume_finishes_it(
    tmp_path: Path, write_flow: WriteFlow, small_disk: SmallDisk
) -> None:
    expected = golden(tmp_path, write_flow, str(tmp_path / "golden.db"))
    store = str(small_disk.directory / "runs.db")
    started, go = tmp_path / "started", tmp_path / "go"
    flow = write_flow(FLOW.format(started=started, go=go, size=BIG))
    running = cadenza(
        "run", str(flow), "--run-id", "x", "--store", store, cwd=tmp_path, prefix=small_disk.prefix
    )
    wait_for_file(started, running)
    small_disk.fill()
    go.touch()
    code, out, err = finished(running)
    small_disk.free()
    assert (code, out) == (1, ""), err
    assert_one_line_naming_the_resume(err, store)
    assert "disk" in err  # SQLite's words: "database or disk is full", "disk I/O error"

    check = finished(cadenza("runs", "check", "--store", store, cwd=tmp_path))
    assert check[0] == 0, check
    code, out, err = finished(cadenza("resume", "x", "--json", "--store", store, cwd=tmp_path))
    assert code == 0, err
    assert compare_results(expected, result_of(out)) == []


# -- --debug -------------------------------------------------------------------------


def test_debug_shows_the_traceback_that_the_one_line_leaves_out(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    url = f"postgresql://cadenza:not-shown-1@127.0.0.1:{closed}/nowhere"
    plain = finished(cadenza("runs", "list", "--store", url, cwd=tmp_path))
    debug = finished(cadenza("--debug", "runs", "list", "--store", url, cwd=tmp_path))
    line = plain[2].splitlines()
    assert len(line) == 1, plain
    assert line[0].startswith("cadenza: error: cannot open the run store"), plain
    assert plain[0] == debug[0] == 2
    assert "Traceback (most recent call last)" in debug[2]
    assert debug[2].splitlines()[-1] == line[0]
    assert "not-shown-1" not in plain[2] + debug[2]
