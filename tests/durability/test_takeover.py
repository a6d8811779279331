"""Takeover chaos: three ``cadenza supervise`` processes share one PostgreSQL database.

Thirty durable loop workflows are left orphaned (their starting runtime shut
down); the supervisors take them over. One supervisor is killed with SIGKILL
once some side effects have happened; another is stopped with SIGSTOP while it
drives runs, kept stopped until every run it drove was taken over by another
(its lease expired: a fence change), then continued. Every run must complete;
every step's side effect (a line appended to a file by its command) must be
recorded exactly once in the outcome the store keeps, and no step ran again
after its completion was recorded; the continued supervisor must find its
lease lost (its late writes refused) and stop driving.

Nothing here sleeps to synchronise: every wait is for something observable
(lines in the file, rows in the database) with a deadline.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import anyio
import asyncpg
import pytest

from tests.conftest import WriteFlow

from ._fleet import WORK, assert_each_effect_once, at_least, start_orphans, stop, supervisor

RUNS = 30
RUN_IDS = [f"r{n:02}" for n in range(RUNS)]
ITERATIONS = 8
DEADLINE = 120.0

pytestmark = pytest.mark.timeout(240)


async def wait_for(what: str, check: Callable[[], Awaitable[bool]], url: str | None = None) -> None:
    """Polls ``check`` until it is true; fails after `DEADLINE` seconds naming ``what``
    (and, given the store's ``url``, every run's status and lease)."""
    give_up = time.monotonic() + DEADLINE
    while not await check():
        if time.monotonic() > give_up:
            pytest.fail(f"gave up waiting for {what}; " + (await _state(url) if url else ""))
        await anyio.sleep(0.05)


async def _state(url: str) -> str:
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch(
            "SELECT r.run_id, r.status, l.holder, l.fence, "
            "l.expires_at - extract(epoch FROM clock_timestamp()) AS left "
            "FROM cadenza_runs r LEFT JOIN cadenza_leases l USING (run_id) ORDER BY r.run_id"
        )
    finally:
        await connection.close()
    return "\n".join(str(dict(row)) for row in rows)


async def owners(url: str) -> Counter[int]:
    """How many running runs each supervisor process holds an unexpired lease of, by pid."""
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch(
            "SELECT l.holder FROM cadenza_leases l JOIN cadenza_runs r USING (run_id) "
            "WHERE r.status = 'running' "
            "AND l.expires_at > extract(epoch FROM clock_timestamp())"
        )
    finally:
        await connection.close()
    return Counter(json.loads(row["holder"])["pid"] for row in rows)


async def held_by(url: str, pid: int) -> int:
    """Running runs whose lease row still names ``pid`` (expired or not)."""
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch(
            "SELECT l.holder FROM cadenza_leases l JOIN cadenza_runs r USING (run_id) "
            "WHERE r.status = 'running'"
        )
    finally:
        await connection.close()
    return sum(1 for row in rows if json.loads(row["holder"])["pid"] == pid)


async def statuses(url: str) -> Counter[str]:
    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch("SELECT status FROM cadenza_runs")
    finally:
        await connection.close()
    return Counter(row["status"] for row in rows)


async def test_three_supervisors_finish_every_run_once_through_a_kill_and_a_stop(
    tmp_path: Path, write_flow: WriteFlow, postgres_url: str
) -> None:
    effects = tmp_path / "effects.txt"
    flow = write_flow(WORK.format(iterations=ITERATIONS, pause=0.2, effects=effects))
    chance = random.Random()
    processes = [supervisor(postgres_url, tmp_path, n) for n in range(3)]
    try:
        await start_orphans(postgres_url, flow, RUN_IDS)

        # SIGKILL, at a random point: once some side effects have happened.
        kill_after = chance.randrange(RUNS, RUNS * ITERATIONS // 3)
        await wait_for("side effects", lambda: at_least(effects, kill_after))
        by_pid = {p.pid: (p, log) for p, log in processes}
        await wait_for("an owner to kill", lambda: _owner_among(postgres_url, by_pid))
        victim = (await owners(postgres_url)).most_common(1)[0][0]
        by_pid[victim][0].kill()
        by_pid[victim][0].wait()
        del by_pid[victim]

        # SIGSTOP an owner of runs past its lease, until others took each of its runs.
        await wait_for("an owner to stop", lambda: _owner_among(postgres_url, by_pid))
        counts = await owners(postgres_url)
        stopped_pid = max(by_pid, key=lambda pid: counts.get(pid, 0))
        stopped, stopped_log = by_pid[stopped_pid]
        stopped.send_signal(signal.SIGSTOP)
        try:
            assert await held_by(postgres_url, stopped_pid) > 0
            await wait_for(
                "the stopped owner's runs to be taken over",
                lambda: _none_held_by(postgres_url, stopped_pid),
                postgres_url,
            )
        finally:
            stopped.send_signal(signal.SIGCONT)

        await wait_for("every run to complete", lambda: _all_completed(postgres_url), postgres_url)
        await wait_for("the continued owner to find its lease lost", lambda: _said(stopped_log))
    finally:
        stop(processes)

    await assert_each_effect_once(postgres_url, effects, RUN_IDS, ITERATIONS)


HELD = """
name: held
steps:
  - id: work
    command: "while [ ! -e {go} ]; do sleep 0.02; done; echo done"
"""


async def test_an_owner_paused_inside_a_write_finds_its_lease_lost_not_its_store_failed(
    tmp_path: Path, write_flow: WriteFlow, postgres_url: str
) -> None:
    """Paused (SIGSTOP) inside a write transaction, the run taken over meanwhile: continued,
    its batch fails (the server ended the paused session) and it says its lease was lost,
    rather than that the store failed and it gave the run back (it was no longer its own).

    The supervisor pauses itself at a failpoint, so the pause lands inside the
    transaction every time, as it does now and then under load in the test above.
    """
    go = tmp_path / "go"
    flow = write_flow(HELD.format(go=go))
    await start_orphans(postgres_url, flow, ["r"])  # waits for `go`: orphaned, unfinished
    go.touch()
    paused, paused_log = supervisor(postgres_url, tmp_path, 0, "store.in_transaction:1:stop")
    processes = [(paused, paused_log)]
    try:
        await wait_for("the owner to pause inside a write", lambda: _stopped(paused.pid))
        processes.append(supervisor(postgres_url, tmp_path, 1))  # takes the run over
        await wait_for("the run to complete", lambda: _completed(postgres_url), postgres_url)
        paused.send_signal(signal.SIGCONT)
        await wait_for("the continued owner to stop driving the run", lambda: _ended(paused_log))
    finally:
        stop(processes)
    said = paused_log.read_text()
    assert "lease lost" in said, said
    assert "gave it back" not in said, said


async def _stopped(pid: int) -> bool:
    """Whether the process is stopped (state ``T`` in /proc/PID/stat)."""
    stat = await anyio.Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


async def _completed(url: str) -> bool:
    return await statuses(url) == Counter({"completed": 1})


async def _ended(log: Path) -> bool:
    said = await anyio.Path(log).read_text()
    return "lease lost" in said or "gave it back" in said


async def _owner_among(url: str, pids: Mapping[int, object]) -> bool:
    return any(pid in pids for pid in await owners(url))


async def _none_held_by(url: str, pid: int) -> bool:
    return await held_by(url, pid) == 0


async def _all_completed(url: str) -> bool:
    return await statuses(url) == Counter({"completed": RUNS})


async def _said(log: Path) -> bool:
    return "lease lost" in await anyio.Path(log).read_text()
