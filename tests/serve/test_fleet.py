"""``cadenza serve --recover --workers``: the server drives queued runs with their steps
on the fleet's workers, and shows the fleet at ``GET /api/fleet``.

Real processes: ``cadenza serve`` and ``cadenza worker --store`` on a SQLite
file (the fleet of one machine), runs queued by `Runtime.submit`; every handler
step appends (run, address, pid) to a file of side effects.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import anyio
import httpx
import pytest

from cadenza import Runtime
from tests._helpers import CLI, eventually, opened_store
from tests.conftest import WriteFlow

pytestmark = pytest.mark.timeout(300)

GATED = """
name: gated
steps:
  - id: a
    handler: "HANDLERS:hold"
  - id: b
    dependsOn: [a]
    handler: "HANDLERS:note"
"""

STEPS = """
import os, time

def _note(ctx):
    with open({effects!r}, "a") as effects:
        effects.write(f"{{ctx.run_id}} {{ctx.address}} {{os.getpid()}}\\n")
    return os.getpid()

def hold(ctx):
    deadline = time.monotonic() + 60  # a failed test leaves no worker waiting forever
    while not os.path.exists({gate!r}) and time.monotonic() < deadline:
        time.sleep(0.02)
    return _note(ctx)

def note(ctx):
    return _note(ctx)
"""
"""``a`` waits for the test's gate file; both log (run, address, worker pid)."""

_LISTENING = re.compile(r"listening on (http://\S+)")


def _spawn(cwd: Path, log: str, *argv: str) -> subprocess.Popen[bytes]:
    """``cadenza ARGV`` in ``cwd``, logging at info into ``cwd/LOG``."""
    environ = {**os.environ, "CADENZA_LOG_LEVEL": "info"}
    with (cwd / log).open("wb") as stderr:
        return subprocess.Popen(
            [*CLI, *argv], cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr, env=environ
        )


async def test_serve_recover_runs_queued_steps_on_fleet_workers_and_shows_the_fleet(
    tmp_path: Path, write_flow: WriteFlow, processes: list[subprocess.Popen[bytes]]
) -> None:
    """Capacity 1, two runs queued: the server takes one, its first step goes to the
    worker that found the server on the roll, and ``GET /api/fleet`` and ``cadenza
    fleet`` show the server as a supervisor driving 1 run, the worker with 1 step in
    flight, 1 run queued; once the gate opens, both runs complete with every step run
    once, on the worker, never in the server."""
    effects, gate = tmp_path / "effects.txt", tmp_path / "gate"
    flow = write_flow(GATED, handlers=STEPS.format(effects=str(effects), gate=str(gate)))
    store = tmp_path / "runs.db"
    serve = _spawn(
        tmp_path,
        "serve.log",
        *("serve", "--store", str(store), "--root", str(tmp_path), "--port", "0", "--no-token"),
        *("--recover", "--capacity", "1", "--workers", "tcp://127.0.0.1:*"),
    )
    processes.append(serve)

    async def listening() -> bool:
        assert serve.poll() is None, (tmp_path / "serve.log").read_text()
        return _LISTENING.search((tmp_path / "serve.log").read_text()) is not None

    await eventually("the server to listen", listening)
    found = _LISTENING.search((tmp_path / "serve.log").read_text())
    assert found is not None
    url = found.group(1).rstrip("/")
    worker = _spawn(tmp_path, "worker.log", "worker", "--store", str(store), "--name", "w1")
    processes.append(worker)
    async with Runtime(store=store) as submitter:
        for run_id in ("one", "two"):
            await submitter.submit(flow, run_id=run_id)

    async with httpx.AsyncClient(base_url=url) as client:

        async def busy() -> bool:
            fleet = (await client.get("/api/fleet")).json()
            mine = [row for row in fleet["supervisors"] if row["pid"] == serve.pid]
            return (
                len(mine) == 1
                and mine[0]["runs"] == 1
                and [(w["name"], w["inFlight"]) for w in mine[0]["pool"]] == [("w1", 1)]
                and fleet["queue"]["runs"] == 1
            )

        await eventually("the fleet to show the server busy on w1", busy)
        answer = await client.get("/api/fleet")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    [row] = answer.json()["supervisors"]
    assert (row["capacity"], row["running"], row["waiting"]) == (1, 1, 0)
    assert row["workers"].startswith("tcp://127.0.0.1:")
    assert answer.json()["queue"]["byPriority"] == {"0": 1}

    shown = await anyio.run_process([*CLI, "fleet", "--store", str(store), "--json"], check=False)
    assert shown.returncode == 0, shown.stderr
    fleet = json.loads(shown.stdout)
    assert [(r["pid"], r["runs"]) for r in fleet["supervisors"]] == [(serve.pid, 1)]
    table = await anyio.run_process([*CLI, "fleet", "--store", str(store)], check=False)
    text = table.stdout.decode()
    assert f":{serve.pid}" in text
    assert re.search(r"^  w1 +\S+ +\d+ +1$", text, re.MULTILINE), text
    assert "queue: 1 run waiting" in text

    gate.touch()

    async def completed() -> bool:
        async with opened_store(store) as opened:
            rows = [await opened.get_run(run_id) for run_id in ("one", "two")]
        return all(r is not None and r.status == "completed" for r in rows)

    await eventually("both runs to complete", completed)
    lines = [line.split() for line in effects.read_text().splitlines()]
    assert sorted((run, address) for run, address, _ in lines) == [
        ("one", "a"),
        ("one", "b"),
        ("two", "a"),
        ("two", "b"),
    ]
    assert {int(pid) for _, _, pid in lines} == {worker.pid}
    async with opened_store(store) as opened:
        for run_id in ("one", "two"):
            records = await opened.steps(run_id)
            assert {records[step].worker for step in "ab"} == {"w1"}


def test_worker_options_need_workers(tmp_path: Path) -> None:
    """``serve --advertise`` (or ``--curve-keys``) without ``--workers``: one line, exit 2."""
    refused = subprocess.run(
        [*CLI, "serve", "--store", str(tmp_path / "r.db"), "--advertise", "tcp://h:1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2
    assert refused.stderr == (
        "cadenza: error: --advertise is for --workers: give --workers EP too\n"
    )
