"""``cadenza fleet``: the supervisors of a store, their workers and the queue.

Real ``cadenza`` processes on a SQLite file: a supervisor with no workers of
its own (it is on the roll all the same), runs queued by ``cadenza submit``.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests._helpers import CLI, cadenza, eventually, opened_store

pytestmark = pytest.mark.timeout(180)

FLOW = """
name: one
steps:
  - id: a
    command: echo a
"""


def _spawn(cwd: Path, out: Path, *argv: str) -> subprocess.Popen[bytes]:
    """``cadenza ARGV`` in ``cwd``, stdout into ``out``, stderr beside it (``.err``)."""
    with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
        return subprocess.Popen([*CLI, *argv], cwd=cwd, stdout=stdout, stderr=stderr)


def test_the_queue_by_priority_and_no_supervisor(tmp_path: Path) -> None:
    """Three runs submitted, none taken: the table says so, the JSON has the figures."""
    (tmp_path / "one.yaml").write_text(FLOW)
    store = str(tmp_path / "runs.db")
    for priority in ("5", "0", "0"):
        submitted = cadenza(
            "submit", "one.yaml", "--store", store, "--priority", priority, cwd=tmp_path
        )
        assert submitted.returncode == 0, submitted.stderr
    table = cadenza("fleet", "--store", store, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert table.stderr == ""
    lines = table.stdout.splitlines()
    assert lines[0].startswith(f"fleet of {store} at ")
    assert "supervisors: 0" in lines
    assert "  (none on the roll)" in lines
    assert "workers: 0" in lines
    assert "queue: 3 runs waiting" in lines
    assert "  by priority: 1 at 5, 2 at 0" in lines
    shown = cadenza("fleet", "--store", store, "--json", cwd=tmp_path)
    fleet = json.loads(shown.stdout)
    assert fleet["supervisors"] == []
    queue = fleet["queue"]
    assert (queue["runs"], queue["byPriority"]) == (3, {"5": 1, "0": 2})
    assert queue["oldestAge"] >= 0
    assert queue["oldestAt"] <= fleet["at"]


async def test_a_supervisor_is_shown_while_it_lives_and_watch_follows_it(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """``supervise --capacity 2`` (no workers): on the roll with its capacity and no
    endpoint; ``fleet --watch 0.2 --json`` prints one object per look until SIGTERM,
    then exits 0; once the supervisor stops, the roll is empty again."""
    (tmp_path / "one.yaml").write_text(FLOW)
    store = str(tmp_path / "runs.db")
    supervisor = _spawn(
        tmp_path, tmp_path / "supervise.out", "supervise", "--store", store, "--capacity", "2"
    )
    processes.append(supervisor)

    async def on_roll() -> bool:
        async with opened_store(store) as opened:
            return [row.pid for row in await opened.live_supervisors()] == [supervisor.pid]

    await eventually("the supervisor on the roll", on_roll)
    table = cadenza("fleet", "--store", store, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    [row] = [line for line in table.stdout.splitlines() if f":{supervisor.pid}" in line]
    assert row.split()[2:7] == ["-", "2", "0", "0", "0"]  # no endpoint, capacity 2, idle

    watched = tmp_path / "watch.out"
    watch = _spawn(tmp_path, watched, "fleet", "--store", store, "--json", "--watch", "0.2")
    processes.append(watch)

    async def looked_thrice() -> bool:
        return len(watched.read_text().splitlines()) >= 3

    await eventually("three looks of --watch", looked_thrice)
    watch.send_signal(signal.SIGTERM)
    assert watch.wait(timeout=30) == 0
    looks = [json.loads(line) for line in watched.read_text().splitlines()]
    assert all([r["pid"] for r in look["supervisors"]] == [supervisor.pid] for look in looks)
    assert [look["at"] for look in looks] == sorted(look["at"] for look in looks)
    assert watched.with_suffix(".err").read_text() == ""

    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=30) == 0
    after = json.loads(cadenza("fleet", "--store", store, "--json", cwd=tmp_path).stdout)
    assert after["supervisors"] == []  # it took its row off the roll as it left


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ("--store", "missing.db"),
            "cadenza: error: no run store at 'missing.db' (give --store PATH or URL)\n",
        ),
        (
            ("--store", "postgresql://fleet:s3cret@127.0.0.1:1/db"),
            "cadenza: error: cannot open the run store 'postgresql://fleet:***@127.0.0.1:1/db'",
        ),
    ],
)
def test_a_bad_store_is_one_line_and_exit_2(
    tmp_path: Path, argv: tuple[str, ...], said: str
) -> None:
    """No store at a path, a server that does not answer: one line, no password, exit 2."""
    shown = cadenza("fleet", *argv, cwd=tmp_path)
    assert shown.returncode == 2
    assert shown.stdout == ""
    assert shown.stderr.startswith(said)
    assert len(shown.stderr.splitlines()) == 1
    assert "s3cret" not in shown.stderr
    assert "Traceback" not in shown.stderr


def test_watch_takes_seconds_above_0(tmp_path: Path) -> None:
    refused = cadenza("fleet", "--watch", "0", cwd=tmp_path)
    assert refused.returncode == 2
    assert "'0' is not a number of seconds above 0" in refused.stderr


def test_help_names_the_command(tmp_path: Path) -> None:
    listed = cadenza("fleet", "--help", cwd=tmp_path)
    assert listed.returncode == 0
    assert "--watch [SECONDS]" in listed.stdout
