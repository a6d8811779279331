"""A fleet of ``cadenza supervise`` processes outlives its database connections.

Twelve durable loop workflows are driven by three supervisors sharing one
PostgreSQL database. Every Cadenza session (``application_name`` ``cadenza``)
is ended with ``pg_terminate_backend`` twice while the runs go on, as a
failover, an idle-connection killer or a network blip would: every run must
complete, and every step's side effect (a line its command appends to a file)
must be the one recorded, once; a step repeats only where a run was handed
back in the middle of it (at most once per takeover).

A supervisor whose writes the database refuses (its role loses INSERT on the
events table) says so at warning level, hands the run back, and takes it
again after waits that grow; once the database accepts its writes again, it
finishes the run.

Nothing here sleeps to synchronise: every wait is for something observable
(lines in a file, rows in the database, lines in a log) with a deadline.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import asyncpg
import pytest

from cadenza.api._backoff import Backoff
from tests.conftest import WriteFlow

from ._fleet import WORK, assert_each_effect_once, at_least, start_orphans, stop, supervisor

RUNS = 12
ITERATIONS = 24
DEADLINE = 60.0
"""Seconds any one wait may take: a bound on a hang, not a measure of speed."""

pytestmark = pytest.mark.timeout(300)


async def wait_for(what: str, check: Callable[[], Awaitable[bool]], url: str) -> None:
    """Polls ``check`` until it is true; fails after `DEADLINE` naming ``what`` and
    every run's status and lease."""
    give_up = time.monotonic() + DEADLINE
    while not await check():
        if time.monotonic() > give_up:
            rows = await query(
                url,
                "SELECT r.run_id, r.status, l.fence, l.holder FROM cadenza_runs r "
                "LEFT JOIN cadenza_leases l USING (run_id) ORDER BY r.run_id",
            )
            pytest.fail(f"gave up waiting for {what}:\n" + "\n".join(map(str, rows)))
        await anyio.sleep(0.05)


async def query(url: str, sql: str) -> list[asyncpg.Record]:
    """``sql``'s rows, on a connection of the test's own (not named ``cadenza``)."""
    connection = await asyncpg.connect(url, server_settings={"application_name": "the-test"})
    try:
        rows: list[asyncpg.Record] = await connection.fetch(sql)
        return rows
    finally:
        await connection.close()


async def execute(url: str, sql: str) -> None:
    """Runs ``sql`` (statements, no results) on a connection of the test's own."""
    connection = await asyncpg.connect(url, server_settings={"application_name": "the-test"})
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


async def kill_cadenza_sessions(url: str) -> int:
    """Ends every session of the database named ``cadenza``; how many there were."""
    rows = await query(
        url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = 'cadenza' AND datname = current_database()",
    )
    return len(rows)


async def _sessions_open(url: str) -> bool:
    rows = await query(
        url,
        "SELECT pid FROM pg_stat_activity "
        "WHERE application_name = 'cadenza' AND datname = current_database()",
    )
    return len(rows) > 0


async def statuses(url: str) -> Counter[str]:
    return Counter(row["status"] for row in await query(url, "SELECT status FROM cadenza_runs"))


async def test_three_supervisors_finish_every_run_through_two_connection_kills(
    tmp_path: Path, write_flow: WriteFlow, postgres_url: str
) -> None:
    effects = tmp_path / "effects.txt"
    flow = write_flow(WORK.format(iterations=ITERATIONS, pause=0.05, effects=effects))
    run_ids = [f"r{n:02}" for n in range(RUNS)]
    chance = random.Random()
    processes = [supervisor(postgres_url, tmp_path, n) for n in range(3)]
    try:
        for _, log in processes:  # each has its sessions open: each has some to lose
            await wait_for("a supervisor to start", partial(_says, log, "SIGTERM"), postgres_url)
        await start_orphans(postgres_url, flow, run_ids)
        total = RUNS * ITERATIONS
        first, second = sorted(chance.sample(range(RUNS, total // 2), 2))
        killed = []
        for after in (first, second):
            await wait_for(f"{after} side effects", partial(at_least, effects, after), postgres_url)
            # After the first kill the supervisors connect again as they need to: the
            # second kill waits for them to be back (else it could end nothing).
            await wait_for("sessions", partial(_sessions_open, postgres_url), postgres_url)
            assert (await statuses(postgres_url))["running"] > 0  # the kill lands mid-run
            killed.append(await kill_cadenza_sessions(postgres_url))
        second_kill = time.monotonic()
        await wait_for("every run to complete", lambda: _all_completed(postgres_url), postgres_url)
        took = time.monotonic() - second_kill
    finally:
        stop(processes)

    # Each supervisor had its writer's session and its pool's: all were ended.
    assert killed[0] >= 6, killed
    assert killed[1] > 0, killed
    logs = [log.read_text() for _, log in processes]
    for text in logs:
        assert "Traceback" not in text, text
    takeovers = await assert_each_effect_once(postgres_url, effects, run_ids, ITERATIONS)
    fences = sorted(
        row["fence"] for row in await query(postgres_url, "SELECT fence FROM cadenza_leases")
    )
    handed_back = sum(text.count("cannot record the run") for text in logs)
    print(  # the figures, with pytest -s
        f"\nkilled {killed} sessions; all {RUNS} runs completed {took:.1f} s after the second "
        f"kill; {takeovers} takeovers, {handed_back} runs handed back; fences {fences}"
    )


async def _says(log: Path, words: str) -> bool:
    return words in await anyio.Path(log).read_text()


async def _all_completed(url: str) -> bool:
    return await statuses(url) == Counter({"completed": RUNS})


# -- a supervisor whose writes are refused --------------------------------------------

ROLE = "fleet_writer"


@pytest.fixture
def writer_role(postgres_url: str) -> str:
    """A URL for ``postgres_url``'s database as a role that is not a superuser (so that
    a REVOKE binds it), with the password of the cluster's superuser."""
    password = urlsplit(postgres_url).password
    anyio.run(
        execute,
        postgres_url,
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') THEN "
        f"CREATE ROLE {ROLE} LOGIN PASSWORD '{password}'; END IF; END $$",
    )
    return postgres_url.replace("postgresql://postgres:", f"postgresql://{ROLE}:", 1)


async def test_a_supervisor_that_cannot_write_says_so_backs_off_and_finishes_later(
    tmp_path: Path, write_flow: WriteFlow, postgres_url: str, writer_role: str
) -> None:
    effects = tmp_path / "effects.txt"
    flow = write_flow(WORK.format(iterations=3, pause=0.05, effects=effects))
    await start_orphans(postgres_url, flow, ["refused"])  # the schema is made as superuser
    await execute(
        postgres_url,
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {ROLE}; "
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {ROLE}; "
        f"REVOKE INSERT ON cadenza_events FROM {ROLE}",
    )
    processes = [supervisor(writer_role, tmp_path, 0)]
    log = processes[0][1]
    try:

        async def refused_four_times() -> bool:
            return (await anyio.Path(log).read_text()).count("cannot record the run") >= 4

        await wait_for("four refused takeovers", refused_four_times, postgres_url)
        await execute(postgres_url, f"GRANT INSERT ON cadenza_events TO {ROLE}")
        await wait_for(
            "the run to complete", lambda: _completed(postgres_url, "refused"), postgres_url
        )
    finally:
        stop(processes)
    text = log.read_text()
    assert "Traceback" not in text, text
    refusals = [line for line in text.splitlines() if "cannot record the run" in line]
    assert all("[warning ]" in line for line in refusals), refusals
    assert all("permission denied for table cadenza_events" in line for line in refusals)
    # Each wait is at least half of a doubling one: the fourth is longer than the first.
    waits = [float(re.findall(r"retry_in=([\d.]+)", line)[0]) for line in refusals]
    assert waits[3] > waits[0], waits
    await assert_each_effect_once(postgres_url, effects, ["refused"], 3)
    fence = (await query(postgres_url, "SELECT fence FROM cadenza_leases"))[0]["fence"]
    holder = json.loads((await query(postgres_url, "SELECT holder FROM cadenza_leases"))[0][0])
    assert holder["pid"] == processes[0][0].pid  # taken up again by the same process
    assert fence >= 1 + len(refusals) + 1  # the starter's, each refused one's, the last
    print(f"\n{len(refusals)} refused takeovers, waits {waits} s; fence {fence}")  # pytest -s


async def _completed(url: str, run_id: str) -> bool:
    rows = await query(url, f"SELECT status FROM cadenza_runs WHERE run_id = '{run_id}'")
    status: str = rows[0]["status"]
    return status == "completed"


def test_takeover_waits_double_up_to_the_cap_jittered_and_reset() -> None:
    backoff = Backoff(1.0, 8.0, chance=random.Random(5))
    waits = [backoff.failed("r", now=0.0) for _ in range(6)]
    for n, wait in enumerate(waits):
        longest = min(8.0, 2.0**n)
        assert longest / 2 <= wait <= longest, (n, waits)
    assert not backoff.ready("r", now=waits[-1] - 0.01)
    assert backoff.ready("r", now=waits[-1])
    backoff.succeeded("r")
    assert backoff.failed("r", now=0.0) <= 1.0
    backoff.forget_stale(now=100.0)  # quiet for longer than the cap: forgotten
    assert backoff.failed("r", now=100.0) <= 1.0
