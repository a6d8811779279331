"""What only the PostgreSQL store has: a schema table, a server to reach, a URL with a password.

Everything the stores share is in the conformance suite (tests/test_store_conformance.py,
tests/durability/test_store_durable.py, the crash tests), which runs on PostgreSQL too.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import anyio
import asyncpg
import pytest

from cadenza import Runtime
from cadenza.errors import CorruptRecord, StoreError
from cadenza.store import (
    POSTGRES_SCHEMA_VERSION,
    MemoryRunStore,
    PostgresRunStore,
    SqliteRunStore,
    describe_store,
    make_store,
)
from cadenza.testing import CrashHarness, KillPoint
from tests._helpers import cadenza
from tests._postgres import Cluster
from tests.conftest import WriteFlow, assert_no_password

from .conftest import TWO


async def sql(url: str, statement: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


def test_the_store_is_chosen_by_what_names_it(tmp_path: Path) -> None:
    """A postgresql:// or postgres:// URL is PostgreSQL, a path SQLite, None memory."""
    assert isinstance(make_store("postgresql://u@h/db"), PostgresRunStore)
    assert isinstance(make_store("postgres://u@h/db"), PostgresRunStore)
    assert isinstance(make_store(str(tmp_path / "runs.db")), SqliteRunStore)
    assert isinstance(make_store(tmp_path / "runs.db"), SqliteRunStore)
    assert isinstance(make_store(None), MemoryRunStore)
    mine = MemoryRunStore()
    assert make_store(mine) is mine
    assert describe_store("postgresql://u:hunter2secret@h:5/db") == "postgresql://u:***@h:5/db"
    assert describe_store("postgresql://u@h/db") == "postgresql://u@h/db"


def test_a_url_without_the_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without asyncpg installed, a URL is a StoreError that says which extra to install."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "asyncpg" else real(name, *a)
    )
    with pytest.raises(StoreError, match=r"pip install 'cadenza\[postgres\]'") as raised:
        Runtime(store="postgresql://u:hunter2secret@127.0.0.1/db")
    assert "hunter2secret" not in str(raised.value)


async def test_the_schema_is_versioned(postgres_url: str) -> None:
    """Opening creates the schema at the current version once, however many open it at once."""
    stores = [PostgresRunStore(postgres_url) for _ in range(3)]
    async with anyio.create_task_group() as group:
        for store in stores:
            group.start_soon(store.open)
    for store in stores:
        await store.close()
    connection = await asyncpg.connect(postgres_url)
    try:
        versions = await connection.fetch("SELECT version FROM cadenza_schema_version")
    finally:
        await connection.close()
    assert [row[0] for row in versions] == list(range(1, POSTGRES_SCHEMA_VERSION + 1))


async def test_every_session_keeps_its_limit_on_idling_in_a_transaction(
    postgres_url: str,
) -> None:
    """A session a paused process leaves inside a transaction is ended by the server,
    also after the pool handed it out and took it back many times."""
    store = PostgresRunStore(postgres_url)
    await store.open()
    try:
        for _ in range(10):
            await store.get_run("nothing")
        pool = store._pool
        async with pool.acquire() as connection:
            setting = await connection.fetchval("SHOW idle_in_transaction_session_timeout")
    finally:
        await store.close()
    assert setting == "5s"


async def test_a_newer_database_is_refused(postgres_url: str) -> None:
    """A database written by a newer Cadenza is a clear StoreError; the password stays out."""
    store = PostgresRunStore(postgres_url)
    await store.open()
    await store.close()
    await sql(postgres_url, "INSERT INTO cadenza_schema_version (version) VALUES (99)")
    with pytest.raises(StoreError, match="schema version 99, newer than") as raised:
        await PostgresRunStore(postgres_url).open()
    assert_no_password(postgres_url, str(raised.value))


async def test_a_server_that_cannot_be_reached_is_a_store_error(
    postgres_cluster: Cluster,
) -> None:
    """No server at the port, or a wrong password: StoreError naming the URL, not the password."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    nobody = f"postgresql://postgres:not-the-password-1@127.0.0.1:{closed}/postgres"
    wrong = postgres_cluster.url().replace(postgres_cluster.password, "not-the-password-2")
    for url in (nobody, wrong):
        with pytest.raises(StoreError, match="cannot open the run store") as raised:
            await PostgresRunStore(url).open()
        assert "postgresql://postgres:***@127.0.0.1" in str(raised.value)
        assert_no_password(url, str(raised.value))


def test_the_command_line_never_prints_the_password(
    tmp_path: Path, write_flow: WriteFlow, postgres_url: str
) -> None:
    """run, runs list/show/check and a failing command: the URL appears masked, if at all."""
    flow = write_flow(TWO)
    store = ("--store", postgres_url)
    said = [cadenza("run", str(flow), "--run-id", "r1", *store, cwd=tmp_path)]
    assert said[0].returncode == 0, said[0].stderr
    said.append(cadenza("runs", "list", *store, cwd=tmp_path))
    assert said[-1].stdout.split()[0] == "r1"
    said.append(cadenza("runs", "show", "r1", *store, cwd=tmp_path))
    assert '"status":"completed"' in said[-1].stdout.replace(" ", "")
    said.append(cadenza("runs", "check", *store, cwd=tmp_path))
    assert said[-1].returncode == 0
    assert said[-1].stdout.strip() == f"{describe_store(postgres_url)}: ok"
    missing = postgres_url.rsplit("/", 1)[0] + "/no_such_database"
    said.append(cadenza("runs", "list", "--store", missing, cwd=tmp_path))
    assert said[-1].returncode == 2
    assert "no_such_database" in said[-1].stderr
    assert "Traceback" not in said[-1].stderr
    for done in said:
        assert_no_password(postgres_url, done.stdout, done.stderr)


async def test_resume_refuses_a_damaged_run(
    tmp_path: Path, write_flow: WriteFlow, postgres_url: str
) -> None:
    """A record altered in the database: resume refuses it, runs check reports it."""
    flow = write_flow(TWO)
    with CrashHarness(flow, directory=tmp_path, store=postgres_url) as harness:
        assert harness.run("crash-1", kill=KillPoint.at("step.after_record", 1)).killed
    await sql(
        postgres_url,
        "UPDATE cadenza_steps SET record = replace(record, 'a\\n', 'z\\n') WHERE address = 'a'",
    )
    said = "run 'crash-1', steps 'a': the record does not match its checksum"
    async with Runtime(store=postgres_url) as runtime:
        with pytest.raises(CorruptRecord, match=re.escape(said)):
            await runtime.resume("crash-1")
        assert (await runtime.get_run("crash-1")).status == "running"
    checked = cadenza("runs", "check", "--store", postgres_url, cwd=tmp_path)
    assert checked.returncode == 1
    assert said in checked.stdout
