"""Runs recorded by an earlier Cadenza still load, show and resume.

Each fixture directory was written by an earlier Cadenza from its ``old.yaml``:
``old.db`` holds ``old-done`` (completed after a person's answer and a resume)
and ``old-waiting`` (waiting at ``approve``); ``old-done.ndjson`` is ``runs show
old-done --events`` as that version printed it. ``store-v0.1`` (schema version
2) was written at a7769d8, before the packages were reorganised (issue 17);
``store-v4`` (schema version 4, the last before calls were recorded) at aa9cbc7.
A PostgreSQL database of before calls is made by that version's migrations.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

import asyncpg
import msgspec
import pytest

from cadenza import Event
from cadenza.actors.steps import resolve_handler
from cadenza.loops._functions import HANDLERS
from cadenza.protocols import CALL_BODY_LIMIT, CallRecord
from cadenza.store import (
    POSTGRES_SCHEMA_VERSION,
    SCHEMA_VERSION,
    PostgresRunStore,
    SqliteRunStore,
    SupervisorRow,
    WorkerLoad,
)
from cadenza.store.postgres._schema import MIGRATIONS

FIXTURES = Path(__file__).with_name("fixtures")
VERSIONS = {"store-v0.1": 2, "store-v4": 4}


def cadenza(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cadenza", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.fixture(params=sorted(VERSIONS))
def fixture(request: pytest.FixtureRequest) -> Path:
    """Each earlier version's fixture directory in turn."""
    name: str = request.param
    return FIXTURES / name


@pytest.fixture
def store(tmp_path: Path, fixture: Path) -> Path:
    shutil.copy(fixture / "old.db", tmp_path / "old.db")
    return tmp_path / "old.db"


def test_a_finished_run_shows_as_it_was_recorded(store: Path, fixture: Path) -> None:
    shown = cadenza("runs", "show", "old-done", "--json", "--store", str(store), cwd=store.parent)
    assert shown.returncode == 0, shown.stderr
    result = json.loads(shown.stdout)
    assert (result["status"], result["output"]) == ("completed", "shipped\n")
    events = cadenza(
        "runs", "show", "old-done", "--events", "--store", str(store), cwd=store.parent
    )
    assert events.stdout == (fixture / "old-done.ndjson").read_text()


async def test_an_old_store_is_upgraded_in_place_and_records_calls(
    store: Path, fixture: Path
) -> None:
    """Opening upgrades the file to this version; its runs read back and check out, and
    the calls of a step, small or large, are recorded in it from then on."""
    with sqlite3.connect(store) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == VERSIONS[fixture.name]
    connection.close()
    opened = SqliteRunStore(store)
    await opened.open()
    try:
        events = await opened.events("old-done")
        assert events[-1].type == "workflow_end"
        assert (await opened.steps("old-done"))["ship"].content == "shipped\n"
        assert await opened.calls("old-done") == []
        calls = [
            CallRecord(address="ship", attempt=1, seq=1, kind="model", digest="0" * 64, body="1"),
            CallRecord(
                address="ship",
                attempt=1,
                seq=2,
                kind="tool",
                digest="1" * 64,
                body='"' + "x" * CALL_BODY_LIMIT + '"',
            ),
        ]
        for each in calls:
            opened.put_call("old-waiting", each)
        await opened.flush()
        assert await opened.calls("old-waiting") == calls
        assert await opened.check() == []
    finally:
        await opened.close()
    with sqlite3.connect(store) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 9
    connection.close()


def test_an_old_event_stream_decodes(fixture: Path) -> None:
    lines = (fixture / "old-done.ndjson").read_text().splitlines()
    events = [msgspec.json.decode(line, type=Event) for line in lines]
    assert [e.seq for e in events] == list(range(1, len(lines) + 1))
    assert events[-1].type == "workflow_end"


def test_a_waiting_run_resumes_without_redoing_its_steps(store: Path) -> None:
    where = ("--store", str(store))
    answer = cadenza(
        "signal", "old-waiting", "approve", "--data", '{"ok": true}', *where, cwd=store.parent
    )
    assert answer.returncode == 0, answer.stderr
    resumed = cadenza("resume", "old-waiting", "--json", *where, cwd=store.parent)
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert (result["status"], result["output"]) == ("completed", "shipped\n")
    events = cadenza("runs", "show", "old-waiting", "--events", *where, cwd=store.parent)
    stream = [json.loads(line) for line in events.stdout.splitlines()]
    after = stream[[e["type"] for e in stream].index("run_resumed") + 1 :]
    replayed = [e["stepId"] for e in after if e["type"] == "step_replayed"]
    assert replayed == [
        "intro",
        "rounds.0.draft",
        "rounds.1.draft",
        "route.0.a",
        "route.1.b",
        "approve",
    ]
    assert [e["stepId"] for e in after if e["type"] == "step_start"] == ["ship"]


def test_loop_sdk_handler_names_of_earlier_versions_resolve(tmp_path: Path) -> None:
    name = HANDLERS.add(lambda context: "planned")
    assert name.startswith("cadenza.loops._functions:HANDLERS.")
    recorded = name.replace("cadenza.loops._functions", "cadenza._loop_functions")
    assert resolve_handler(recorded, tmp_path) is resolve_handler(name, tmp_path)


POSTGRES_BEFORE_CALLS = 3
"""The schema version of PostgreSQL databases written before calls were recorded."""


async def test_a_postgres_database_of_before_calls_is_upgraded_and_records_calls(
    postgres_url: str,
) -> None:
    """A database at version 3, with a run in it, as that version's migrations made it:
    opening migrates it to this version, the run reads back and checks out, and calls
    are recorded in it."""
    event = b'{"type":"workflow_start","timestamp":"t","runId":"old","seq":1}'
    record = b'{"status":"completed","content":"x"}'
    connection = await asyncpg.connect(postgres_url)
    try:
        await connection.execute(
            "CREATE TABLE cadenza_schema_version ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for number, migration in enumerate(MIGRATIONS[:POSTGRES_BEFORE_CALLS], start=1):
            await connection.execute(migration)
            await connection.execute("INSERT INTO cadenza_schema_version VALUES ($1)", number)
        await connection.execute(
            "INSERT INTO cadenza_runs VALUES ('old', 'w', NULL, 'completed', '{}', 1, 1, NULL)"
        )
        await connection.execute(
            "INSERT INTO cadenza_events VALUES ('old', 1, 'workflow_start', NULL, $1, $2)",
            event.decode(),
            zlib.crc32(event),
        )
        await connection.execute(
            "INSERT INTO cadenza_steps VALUES ('old', 'a', 'completed', $1, $2)",
            record.decode(),
            zlib.crc32(record),
        )
    finally:
        await connection.close()
    store = PostgresRunStore(postgres_url)
    await store.open()
    try:
        assert [event.type for event in await store.events("old")] == ["workflow_start"]
        assert (await store.steps("old"))["a"].content == "x"
        large = '"' + "x" * CALL_BODY_LIMIT + '"'
        recorded = [
            CallRecord(address="a", attempt=1, seq=n, kind="tool", digest="0" * 64, body=large)
            for n in (1, 2)
        ]
        for each in recorded:
            store.put_call("old", each)
        await store.flush()
        assert await store.calls("old") == recorded
        assert await store.check() == []
    finally:
        await store.close()
    connection = await asyncpg.connect(postgres_url)
    try:
        versions = await connection.fetch("SELECT version FROM cadenza_schema_version")
    finally:
        await connection.close()
    assert [row[0] for row in versions] == list(range(1, POSTGRES_SCHEMA_VERSION + 1))


# The runs table as schema version 4 made it (before lineage), and one run in it.
STORE_V4 = """
CREATE TABLE runs (run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, path TEXT,
    status TEXT NOT NULL, inputs TEXT NOT NULL, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, result TEXT);
CREATE INDEX runs_by_time ON runs (created_at);
CREATE INDEX runs_by_status ON runs (status);
INSERT INTO runs VALUES ('v4-run', 'w', NULL, 'completed', '{"topic":"x"}', 1.0, 2.0, NULL);
PRAGMA user_version = 4;
"""


async def test_a_version_4_store_opens_and_its_runs_have_no_parent(tmp_path: Path) -> None:
    """Upgraded in place to lineage: the old run reads back unforked, a fork records its parent."""
    path = tmp_path / "v4.db"
    connection = sqlite3.connect(path)
    connection.executescript(STORE_V4)
    connection.close()
    store = SqliteRunStore(path)
    await store.open()
    try:
        old = await store.get_run("v4-run")
        assert old is not None
        assert (old.status, old.inputs) == ("completed", {"topic": "x"})
        assert (old.parent_run_id, old.parent_address) == (None, None)
        assert await store.forks("v4-run") == []
        child = msgspec.structs.replace(
            old, run_id="child", created_at=3.0, parent_run_id="v4-run", parent_address="a"
        )
        store.begin_run(child)
        await store.flush()
        assert [row.run_id for row in await store.forks("v4-run")] == ["child"]
        assert await store.check() == []
    finally:
        await store.close()
    listed = cadenza("runs", "list", "--store", str(path), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "v4-run" in listed.stdout


# The roll of supervisors as schema version 7 made it (before their workers), one row in it.
ROLL_V7 = """
CREATE TABLE supervisors (supervisor_id TEXT PRIMARY KEY, host TEXT NOT NULL,
    pid INTEGER NOT NULL, workers TEXT, capacity INTEGER, runs INTEGER NOT NULL,
    waiting INTEGER NOT NULL, running INTEGER NOT NULL, seen_at REAL NOT NULL,
    expires_at REAL NOT NULL);
INSERT INTO supervisors VALUES ('old', 'h', 1, 'tcp://h:5555', 5, 2, 1, 1, 1.0, 1e12);
PRAGMA user_version = 7;
"""

POSTGRES_BEFORE_POOLS = 7
"""The schema version of PostgreSQL databases written before supervisors' workers."""


async def test_a_version_7_roll_is_upgraded_and_records_workers(tmp_path: Path) -> None:
    """A store of before the roll kept workers: its supervisor reads back with none, and a
    beat records the workers a supervisor has."""
    path = tmp_path / "v7.db"
    connection = sqlite3.connect(path)
    connection.executescript(ROLL_V7)
    connection.close()
    store = SqliteRunStore(path)
    await store.open()
    try:
        [old] = await store.live_supervisors()
        assert (old.supervisor_id, old.workers, old.runs) == ("old", "tcp://h:5555", 2)
        assert old.pool == ()
        pool = (WorkerLoad("w1", 4, 2),)
        await store.beat_supervisor(SupervisorRow("young", "h", 2, pool=pool), ttl=60)
        assert [row.pool for row in await store.live_supervisors()] == [(), pool]
    finally:
        await store.close()
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    connection.close()


async def test_a_postgres_roll_of_version_7_is_upgraded_and_records_workers(
    postgres_url: str,
) -> None:
    """The same on PostgreSQL: migrated by the next migration, the old row kept."""
    connection = await asyncpg.connect(postgres_url)
    try:
        await connection.execute(
            "CREATE TABLE cadenza_schema_version ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for number, migration in enumerate(MIGRATIONS[:POSTGRES_BEFORE_POOLS], start=1):
            await connection.execute(migration)
            await connection.execute("INSERT INTO cadenza_schema_version VALUES ($1)", number)
        await connection.execute(
            "INSERT INTO cadenza_supervisors VALUES ('old', 'h', 1, NULL, NULL, 0, 0, 0, 1, 1e12)"
        )
    finally:
        await connection.close()
    store = PostgresRunStore(postgres_url)
    await store.open()
    try:
        [old] = await store.live_supervisors()
        assert (old.supervisor_id, old.pool) == ("old", ())
        pool = (WorkerLoad("w1", 4, 2), WorkerLoad("w2", 1, 0))
        await store.beat_supervisor(SupervisorRow("young", "h", 2, pool=pool), ttl=60)
        assert [row.pool for row in await store.live_supervisors()] == [(), pool]
    finally:
        await store.close()
