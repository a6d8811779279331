"""Integrity: a damaged store is reported by `runs check` and refused by resume."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from cadenza import Runtime
from cadenza.errors import CorruptRecord
from cadenza.store import SCHEMA_VERSION, SqliteRunStore
from cadenza.testing import CrashHarness, KillPoint
from tests._helpers import cadenza
from tests.conftest import WriteFlow

from .conftest import TWO


def interrupted(tmp_path: Path, write_flow: WriteFlow) -> Path:
    """A store holding run ``crash-1``, killed after step a was recorded."""
    flow = write_flow(TWO)
    with CrashHarness(flow, directory=tmp_path) as harness:
        assert harness.run("crash-1", kill=KillPoint.at("step.after_record", 1)).killed
    assert isinstance(harness.store, Path)
    return harness.store


def tamper(store: Path, sql: str) -> None:
    with sqlite3.connect(store) as connection:
        connection.execute(sql)
    connection.close()


def test_a_sound_store_checks_out(tmp_path: Path, write_flow: WriteFlow) -> None:
    """`runs check` on an undamaged store prints ok and exits 0."""
    store = interrupted(tmp_path, write_flow)
    checked = cadenza("runs", "check", "--store", str(store), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout
    assert checked.stdout.strip().endswith(": ok")


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (
            "UPDATE steps SET record = replace(record, 'a\\n', 'z\\n') WHERE address = 'a'",
            "run 'crash-1', steps 'a': the record does not match its checksum",
        ),
        (
            "UPDATE steps SET record = '{\"status\": 7}', crc = NULL WHERE address = 'a'",
            "run 'crash-1', steps 'a': the record cannot be read",
        ),
        (
            "UPDATE steps SET status = 'failed' WHERE address = 'a'",
            "run 'crash-1', steps 'a': the record contradicts the columns",
        ),
        ("DELETE FROM events WHERE seq = 1", "run 'crash-1': events 1..1 are missing"),
    ],
)
async def test_resume_refuses_a_damaged_run(
    tmp_path: Path, write_flow: WriteFlow, damage: str, said: str
) -> None:
    """A tampered, unreadable, inconsistent or incomplete log: CorruptRecord, and nothing runs."""
    store = interrupted(tmp_path, write_flow)
    tamper(store, damage)
    async with Runtime(store=store) as runtime:
        with pytest.raises(CorruptRecord, match=re.escape(said)):
            await runtime.resume("crash-1")
        assert (await runtime.get_run("crash-1")).status == "running"
    checked = cadenza("runs", "check", "--store", str(store), cwd=tmp_path)
    assert checked.returncode == 1
    assert said.split(": ", 1)[1].split(" (")[0] in checked.stdout
    resumed = cadenza("resume", "crash-1", "--store", str(store), cwd=tmp_path)
    assert resumed.returncode == 2
    assert "Traceback" not in resumed.stderr
    assert said in resumed.stderr


async def test_a_version_1_store_is_upgraded_in_place(tmp_path: Path) -> None:
    """A store written before checksums opens at this version and its runs stay readable."""
    path = tmp_path / "old.db"
    event = '{"type":"workflow_start","timestamp":"t","runId":"old","seq":1}'
    record = '{"status":"completed","content":"x"}'
    with sqlite3.connect(path) as connection:
        connection.executescript(
            """
            CREATE TABLE runs (run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, path TEXT,
                status TEXT NOT NULL, inputs TEXT NOT NULL, created_at REAL NOT NULL,
                updated_at REAL NOT NULL, result TEXT);
            CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,
                step_id TEXT, body TEXT NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
            CREATE TABLE steps (run_id TEXT NOT NULL, address TEXT NOT NULL,
                status TEXT NOT NULL, record TEXT NOT NULL,
                PRIMARY KEY (run_id, address)) WITHOUT ROWID;
            INSERT INTO runs VALUES ('old', 'w', NULL, 'completed', '{}', 1.0, 1.0, NULL);
            PRAGMA user_version = 1;
            """
        )
        connection.execute(
            "INSERT INTO events VALUES ('old', 1, 'workflow_start', NULL, ?)", (event,)
        )
        connection.execute("INSERT INTO steps VALUES ('old', 'a', 'completed', ?)", (record,))
    connection.close()
    store = SqliteRunStore(path)
    await store.open()
    try:
        assert [event.type for event in await store.events("old")] == ["workflow_start"]
        assert (await store.steps("old"))["a"].content == "x"
        assert await store.check() == []
    finally:
        await store.close()
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 9
    connection.close()
