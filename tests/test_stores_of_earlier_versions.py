"""Runs recorded by an earlier Cadenza still load, show and resume.

``fixtures/store-v0.1`` was written by Cadenza at a7769d8, before the packages
were reorganised (issue 17): ``old.db`` holds ``old-done`` (completed after a
person's answer and a resume) and ``old-waiting`` (waiting at ``approve``);
``old-done.ndjson`` is ``runs show old-done --events`` as that version printed it.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from cadenza import Event
from cadenza.actors.steps import resolve_handler
from cadenza.loops._functions import HANDLERS
from cadenza.store import SqliteRunStore

FIXTURE = Path(__file__).with_name("fixtures") / "store-v0.1"


def cadenza(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cadenza", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    shutil.copy(FIXTURE / "old.db", tmp_path / "old.db")
    return tmp_path / "old.db"


def test_a_finished_run_shows_as_it_was_recorded(store: Path) -> None:
    shown = cadenza("runs", "show", "old-done", "--json", "--store", str(store), cwd=store.parent)
    assert shown.returncode == 0, shown.stderr
    result = json.loads(shown.stdout)
    assert (result["status"], result["output"]) == ("completed", "shipped\n")
    events = cadenza(
        "runs", "show", "old-done", "--events", "--store", str(store), cwd=store.parent
    )
    assert events.stdout == (FIXTURE / "old-done.ndjson").read_text()


def test_an_old_event_stream_decodes() -> None:
    lines = (FIXTURE / "old-done.ndjson").read_text().splitlines()
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
