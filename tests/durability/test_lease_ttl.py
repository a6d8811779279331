"""How soon a dead owner's run is taken over is the lease that owner took.

A supervisor honours the expiry a run's lease records (it cannot shorten a
live owner's lease: that owner renews at its own pace), so ``cadenza supervise
--lease-ttl 3`` alone still waited out the 15 s lease of a run started by
``cadenza run``. ``CADENZA_LEASE_TTL`` gives every process of a fleet the same
lease, the owners' as well as the supervisors'.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cadenza import Runtime
from cadenza.errors import CadenzaError
from tests.conftest import WriteFlow

LEASE_LEFT = """
import sqlite3, sys, time

def lease_left(ctx):
    store = sqlite3.connect(sys.argv[sys.argv.index("--store") + 1])
    row = store.execute("SELECT expires_at FROM leases WHERE run_id = ?", (ctx.run_id,))
    return {"left": row.fetchone()[0] - time.time()}
"""


def _run(flow: Path, *options: str, **environ: str) -> subprocess.CompletedProcess[str]:
    store = flow.parent / "runs.db"
    command = [sys.executable, "-m", "cadenza", *options, "--store", str(store)]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=flow.parent,
        env={**os.environ, **environ},
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_a_run_from_the_command_line_takes_the_fleet_lease(write_flow: WriteFlow) -> None:
    """With CADENZA_LEASE_TTL=2 the run's lease, as the store records it, ends within 2 s
    (it was 15 s whatever the supervisors were told)."""
    flow = write_flow(
        "name: leased\nsteps:\n  - {id: look, handler: 'HANDLERS:lease_left'}\n",
        handlers=LEASE_LEFT,
    )
    done = _run(flow, "run", str(flow), "--json", CADENZA_LEASE_TTL="2")
    assert done.returncode == 0, done.stderr
    left = json.loads(done.stdout)["steps"]["look"]["result"]["left"]
    assert left <= 2.0


@pytest.mark.parametrize("command", ["run", "serve"])
def test_a_lease_ttl_that_is_not_seconds_is_one_line_and_exit_2(
    write_flow: WriteFlow, command: str
) -> None:
    """``serve`` too, whose runtime starts inside the web server (a traceback there)."""
    flow = write_flow("name: never\nsteps:\n  - {id: a, command: echo hi}\n")
    options = ["run", str(flow)] if command == "run" else ["serve", "--port", "1"]
    done = _run(flow, *options, CADENZA_LEASE_TTL="soon")
    assert (done.returncode, done.stderr) == (
        2,
        "cadenza: error: CADENZA_LEASE_TTL='soon' is not a number of seconds above 0 (e.g. 15)\n",
    )


def test_an_explicit_lease_ttl_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CADENZA_LEASE_TTL", "4.5")
    assert Runtime().lease_ttl == 4.5
    assert Runtime(lease_ttl=30).lease_ttl == 30
    monkeypatch.setenv("CADENZA_LEASE_TTL", "0")
    with pytest.raises(CadenzaError, match="CADENZA_LEASE_TTL='0'"):
        Runtime()
    monkeypatch.delenv("CADENZA_LEASE_TTL")
    assert Runtime().lease_ttl == 15
