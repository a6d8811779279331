"""Several replicas on one store: a signal, a cancel or a message reaches a run
whichever replica it is sent through.

Each replica is a `Runtime` of its own on the same SQLite file or PostgreSQL
database (two runtimes of one process hold leases as two processes would: each
drive has its own holder token). Nothing sleeps to synchronise: every wait is
for something observable with a deadline.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from cadenza import Runtime
from cadenza._logging import EVENT
from cadenza.errors import CadenzaError
from cadenza.testing import ServerRule
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._workflows import LISTENER
from tests.conftest import StoreFactory, WriteFlow

DEADLINE = 30.0
QUICK = 0.05  # seconds between a replica's looks for commands and for runs to take over

REVIEW = """
name: review
steps:
  - {id: draft, command: "echo drafted >> $EFFECTS; echo drafted"}
  - id: approve
    dependsOn: [draft]
    human:
      prompt: "Publish it?"
      schema: {type: object, properties: {publish: {type: boolean}}, required: [publish]}
  - {id: publish, dependsOn: [approve], command: "echo published >> $EFFECTS; echo published"}
output: "steps.publish.content"
"""


PARK = "name: park\nsteps:\n  - {id: park, handler: 'HANDLERS:park'}\n"
PARKED = """
import anyio

async def park(context):
    await anyio.sleep_forever()
"""


@pytest.fixture
def effects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file REVIEW's commands append their side effects to ($EFFECTS)."""
    path = tmp_path / "effects.txt"
    monkeypatch.setenv("EFFECTS", str(path))
    return path


async def eventually(what: str, check: Callable[[], Awaitable[bool]]) -> None:
    """Waits until ``check`` is true; fails after `DEADLINE` seconds, naming ``what``."""
    give_up = time.monotonic() + DEADLINE
    while not await check():
        if time.monotonic() > give_up:
            pytest.fail(f"not within {DEADLINE} s: {what}")
        await anyio.sleep(QUICK)


def replica(factory: StoreFactory, *, recover: bool = False) -> Runtime:
    runtime = Runtime(store=factory.spec, recover=recover, lease_ttl=3.0)
    runtime.command_interval = QUICK
    runtime.recovery_interval = QUICK
    return runtime


async def test_a_signal_through_one_replica_wakes_the_run_waiting_on_another(
    durable_store_factory: StoreFactory,
    write_flow: WriteFlow,
    effects: Path,
) -> None:
    """A answers nothing; B records the answer; A (taking over) resumes and finishes the run."""
    path = write_flow(REVIEW)
    async with replica(durable_store_factory, recover=True) as a:
        waiting = await a.run(path, run_id="review")
        assert waiting.status == "waiting"
        async with replica(durable_store_factory) as b:
            await b.signal("review", "approve", {"publish": True})

            async def finished() -> bool:
                row = await b.get_run("review")
                return row.status == "completed"

            await eventually("the run finished on the replica that takes runs over", finished)
            result = await b.result("review")
    assert result.output == "published\n"
    assert result.steps["approve"].result == {"publish": True}
    # The step finished before the wait was replayed, not run again.
    assert (await anyio.Path(effects).read_text()).split() == ["drafted", "published"]


async def test_a_cancel_through_one_replica_stops_the_run_driven_by_another(
    durable_store_factory: StoreFactory, write_flow: WriteFlow
) -> None:
    """B's cancel goes through the store; A, which drives the run, cancels it."""
    path = write_flow(PARK, handlers=PARKED)
    async with replica(durable_store_factory) as a, replica(durable_store_factory) as b:
        started = anyio.Event()
        handle = await a.start(
            path,
            run_id="parked",
            on_event=lambda e: started.set() if e.type == "step_start" else None,
        )
        await started.wait()
        assert await b.cancel("parked", "not needed any more") is None  # A was asked
        result = await handle.result()
        assert result.status == "cancelled"
        assert result.steps["park"].error is not None
        assert "not needed any more" in result.steps["park"].error.message
        with pytest.raises(CadenzaError, match="has finished"):
            await b.cancel("parked")


async def test_a_cancel_of_a_run_nobody_drives_ends_it_cancelled_at_once(
    durable_store_factory: StoreFactory,
    write_flow: WriteFlow,
    effects: Path,
) -> None:
    """A waiting run is taken up by the cancelling replica and ends cancelled; nothing runs."""
    path = write_flow(REVIEW)
    async with replica(durable_store_factory) as a:
        assert (await a.run(path, run_id="review")).status == "waiting"
    async with replica(durable_store_factory) as b:
        handle = await b.cancel("review", "dropped")
        assert handle is not None
        result = await handle.result()
    assert result.status == "cancelled"
    assert (await anyio.Path(effects).read_text()).split() == ["drafted"]


async def test_a_message_through_one_replica_reaches_the_agent_on_another(
    durable_store_factory: StoreFactory,
    write_flow: WriteFlow,
    model_server: StartLLMServer,
) -> None:
    """B posts to a step that A drives; the message is in A's run, once."""
    hold = threading.Event()
    path = write_flow(LISTENER)
    server = model_server([ServerRule([{"content": "heard", "hold": hold}])])
    async with replica(durable_store_factory) as a, replica(durable_store_factory) as b:
        handle = await a.start(path, run_id="inbox")
        await anyio.to_thread.run_sync(server.wait_for_requests, 1)
        await b.post_message("inbox", "listen", "from the other replica", kind="request")

        async def delivered() -> bool:
            return bool(handle.messages)

        await eventually("the message reached the run", delivered)
        hold.set()
        result = await handle.result()
        with pytest.raises(CadenzaError, match="completed; it takes no messages"):
            await b.post_message("inbox", "listen", "too late")
    assert result.status == "completed"
    assert [(m.to, m.text, m.kind) for m in result.messages] == [
        ("listen", "from the other replica", "request")
    ]


def test_cadenza_cancel_stops_a_run_that_another_process_drives(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """`cadenza run` in one process, `cadenza cancel` in another: the run ends cancelled."""
    path = write_flow(PARK, handlers=PARKED)
    store = str(tmp_path / "runs.db")
    command = [sys.executable, "-m", "cadenza", "run", str(path), "--store", store]
    runner = subprocess.Popen(
        [*command, "--run-id", "parked", "--json", "--events"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert runner.stderr is not None
        for line in runner.stderr:  # its event stream: wait until the step runs
            if json.loads(line)["type"] == "step_start":
                break
        cancel = [sys.executable, "-m", "cadenza", "cancel", "parked", "--store", store]
        asked = subprocess.run(
            [*cancel, "--reason", "stop it"], capture_output=True, text=True, timeout=60
        )
        assert asked.returncode == 0, asked.stderr
        assert "asked the process that drives run parked" in asked.stdout
        output, _ = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 1
    result = json.loads(output)
    assert result["status"] == "cancelled"
    assert "stop it" in result["steps"]["park"]["error"]["message"]
    again = subprocess.run(cancel, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2
    assert "has finished (cancelled)" in again.stderr


class Logged(logging.Handler):
    """Sets ``seen`` once a record of the event ``message`` is logged (from any thread)."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, EVENT, None) == self.message:
            self.seen.set()


async def test_a_takeover_that_finds_the_store_locked_tries_again(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """Another process holds SQLite's write lock at the first look: the run is taken later."""
    path = write_flow(
        "name: park-once\nsteps:\n  - {id: work, handler: 'HANDLERS:work'}\n",
        handlers=f"""
            import pathlib
            import anyio

            async def work(context):
                marker = pathlib.Path({str(tmp_path / "parked")!r})
                if not marker.exists():  # the first drive stops here, to be interrupted
                    marker.touch()
                    await anyio.sleep_forever()
                return "done"
            """,
    )
    store = str(tmp_path / "runs.db")
    async with Runtime(store=store, shutdown_deadline=0) as first:
        started = anyio.Event()
        await first.start(
            path,
            run_id="orphan",
            on_event=lambda e: started.set() if e.type == "step_start" else None,
        )
        await started.wait()
    # Its runtime shut down: the run is orphaned (running, lease released).
    locker = sqlite3.connect(store, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    logged = Logged("cannot take the run over yet")
    logging.getLogger("cadenza").addHandler(logged)
    try:
        async with replica(StoreFactory("sqlite", store), recover=True) as second:
            assert await anyio.to_thread.run_sync(logged.seen.wait, DEADLINE)
            locker.execute("ROLLBACK")

            async def finished() -> bool:
                return (await second.get_run("orphan")).status == "completed"

            await eventually("the run was taken over once the lock went", finished)
            result = await second.result("orphan")
    finally:
        logging.getLogger("cadenza").removeHandler(logged)
        locker.close()
    assert result.output == "done"
