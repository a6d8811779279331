"""A run built in Python is left alone by a process that cannot rebuild it.

Its workflow holds a Python predicate (a lambda, ``cadenza.build``) that only
the application that built it has. ``cadenza resume``, ``resume --all`` and
``cadenza supervise`` run in other processes: each must leave the run exactly as
it was (no event, lease released, still ``running``) and say why, so that the
application can still resume it to the end.

The application here is this test's own process: it builds the workflow, starts
the run on a SQLite file and leaves its runtime while a step is parked, which
interrupts the run (as a crash would). The step's handler lives in a module
beside the workflow, importable by every process; the predicate does not.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType

import anyio
import pytest

from cadenza import Runtime
from cadenza import build as b
from cadenza.errors import RunNeedsCode
from cadenza.protocols import Event
from cadenza.store import make_store
from cadenza.workflow import Loop, Step, Workflow
from tests._helpers import cadenza, import_source

STEPS = """
import asyncio

hold = False  # set by the application only: another process's step never parks
parked = asyncio.Event()


async def work(context):
    if hold:  # stays here until the application stops
        parked.set()
        await asyncio.Event().wait()
    return f"worked {context.iteration}"
"""

DEADLINE = 60.0
"""Seconds to wait for a supervisor to say something: a hang detector, not a timing."""


def steps_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return import_source(tmp_path, STEPS, monkeypatch, prefix="app_steps")


def hold(steps: ModuleType, parks: bool) -> None:
    """Whether the next ``work`` in this process parks."""
    steps.__dict__["hold"] = parks


async def interrupted_run(tmp_path: Path, steps: ModuleType, run_id: str) -> b.LoadedWorkflow:
    """Starts a Python-built run on ``runs.db`` and leaves it interrupted; its workflow."""
    spin = b.loop(
        "spin",
        step=b.handler("work", steps.work),
        max_iterations=3,
        until=lambda context: context.iteration >= 1,
    )
    flow = b.workflow(
        "python-built", base_dir=str(tmp_path), steps=[spin], output="steps.spin.content"
    )
    hold(steps, True)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        await runtime.start(flow, run_id=run_id)
        await steps.parked.wait()
    hold(steps, False)
    return flow


def predicate_name(flow: b.LoadedWorkflow) -> str:
    """``module:qualname`` of the flow's one predicate, as its marker names it."""
    loop = flow.workflow.steps[0].loop
    assert loop is not None
    assert loop.until is not None
    return loop.until.removeprefix("@python:")


async def stored(tmp_path: Path, run_id: str) -> tuple[str, list[tuple[int, str]], bool]:
    """The run's status, its events (seq, type), and whether its lease is free."""
    store = make_store(tmp_path / "runs.db")
    await store.open()
    try:
        row = await store.get_run(run_id)
        assert row is not None
        events: list[Event] = await store.events(run_id)
        free = run_id in {r.run_id for r in await store.orphaned_runs()}
    finally:
        await store.close()
    return row.status, [(e.seq, e.type) for e in events], free


async def test_cadenza_resume_leaves_the_run_to_the_application_that_built_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = steps_module(tmp_path, monkeypatch)
    flow = await interrupted_run(tmp_path, steps, "r-12")
    status, events, free = await stored(tmp_path, "r-12")
    assert (status, events[-1][1], free) == ("running", "run_interrupted", True)

    proc = cadenza("resume", "r-12", "--store", "runs.db", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == (
        f"cadenza: error: run 'r-12' needs the Python predicate {predicate_name(flow)!r} that"
        " this process does not have; resume it from the application that built it"
        " (Runtime.resume)\n"
    )
    assert proc.stdout == ""
    assert await stored(tmp_path, "r-12") == (status, events, True)  # untouched, lease released

    every = cadenza("resume", "--all", "--store", "runs.db", cwd=tmp_path)
    assert every.returncode == 0, every.stdout + every.stderr
    assert every.stderr.count("r-12") == 1
    assert every.stderr.startswith("cadenza: skipped: run 'r-12' needs the Python predicate")
    assert "Traceback" not in every.stderr
    assert await stored(tmp_path, "r-12") == (status, events, True)

    async with Runtime(store=tmp_path / "runs.db") as runtime:
        result = await (await runtime.resume("r-12")).result()
    assert (result.status, result.output) == ("completed", "worked 1")
    assert result.loops["spin"].iterations == 2


async def test_a_supervisor_skips_the_run_warns_once_and_takes_over_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = steps_module(tmp_path, monkeypatch)
    flow = await interrupted_run(tmp_path, steps, "built")
    before = await stored(tmp_path, "built")
    supervisor, log = start_supervisor(tmp_path)
    try:
        await said(log, "built", supervisor)
        # A run of plain YAML, answered after the supervisor first skipped "built":
        # the supervisor looks at "built" again each time, and takes this one over.
        (tmp_path / "ask.yaml").write_text(
            textwrap.dedent(
                """
                name: ask
                steps:
                  - {id: approve, human: {prompt: "Go?"}}
                  - {id: done, command: "echo done", dependsOn: [approve]}
                """
            )
        )
        async with Runtime(store=tmp_path / "runs.db") as runtime:
            assert (await runtime.run(tmp_path / "ask.yaml", run_id="plain")).status == "waiting"
            await runtime.signal("plain", "approve", {"ok": True})
        await completed(tmp_path, "plain", supervisor)
    finally:
        supervisor.send_signal(signal.SIGTERM)
        supervisor.wait(timeout=DEADLINE)
    text = await anyio.Path(log).read_text()
    warnings = [line for line in text.splitlines() if "built" in line]
    assert len(warnings) == 1, text
    assert "cannot take the run over here" in warnings[0]
    assert predicate_name(flow) in warnings[0]
    assert "Traceback" not in text
    assert await stored(tmp_path, "built") == before


def start_supervisor(cwd: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """``cadenza supervise`` on ``runs.db``, looking every 0.1 s; its log file."""
    log = cwd / "supervisor.log"
    with log.open("wb") as stderr:  # the child has its own copy of the descriptor
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cadenza",
                "supervise",
                "--store",
                "runs.db",
                "--lease-ttl",
                "0.3",
            ],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    return process, log


async def said(log: Path, run_id: str, process: subprocess.Popen[bytes]) -> None:
    """Waits until the supervisor's log names ``run_id``."""

    async def named() -> bool:
        return run_id in await anyio.Path(log).read_text()

    await wait_until(named, f"a line about {run_id!r}", log, process)


async def completed(tmp_path: Path, run_id: str, process: subprocess.Popen[bytes]) -> None:
    """Waits until the store has ``run_id`` completed."""

    async def done() -> bool:
        status, _, _ = await stored(tmp_path, run_id)
        return status == "completed"

    await wait_until(done, f"{run_id!r} to complete", tmp_path / "supervisor.log", process)


async def wait_until(
    check: Callable[[], Awaitable[bool]], what: str, log: Path, process: subprocess.Popen[bytes]
) -> None:
    """Polls ``check`` while the supervisor lives; fails after `DEADLINE` seconds."""
    give_up = time.monotonic() + DEADLINE
    while not await check():
        if process.poll() is not None or time.monotonic() > give_up:
            text = await anyio.Path(log).read_text()
            pytest.fail(f"gave up waiting for {what} (supervisor exit {process.poll()}): {text}")
        await anyio.sleep(0.05)


async def test_the_refusal_names_every_piece_of_code_the_process_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Predicates, handlers registered by the building process, and modules nowhere here."""
    steps = steps_module(tmp_path, monkeypatch)
    after = ["park"]
    document = b.LoadedWorkflow(  # as the store holds it: never validated again
        Workflow(
            name="needs",
            steps=[
                Step(id="park", handler=f"{steps.__name__}:work"),
                Step(
                    id="check",
                    condition="@python:gone.module:check",
                    handler="cadenza.loops._functions:HANDLERS.f999999",
                    depends_on=after,
                ),
                Step(
                    id="fan",
                    handler="nowhere_handlers:go",
                    loop=Loop(for_each="@python:gone.module:items"),
                    depends_on=after,
                ),
                Step(id="look", tool="nowhere_tools:search", depends_on=after),
                Step(
                    id="again",
                    condition="@python:gone.module:check",
                    depends_on=after,
                    command="true",
                ),
            ],
        ),
        None,
        tmp_path,
    )
    hold(steps, True)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        await runtime.start(document, run_id="needs")
        await steps.parked.wait()
    hold(steps, False)
    before = await stored(tmp_path, "needs")

    async with Runtime(store=tmp_path / "runs.db") as runtime:
        with pytest.raises(RunNeedsCode) as refused:
            await runtime.resume("needs")
    assert str(refused.value) == (
        "run 'needs' needs Python code this process does not have:"
        " the predicate 'gone.module:check', the handler of step 'check',"
        " the handler 'nowhere_handlers:go' (no module 'nowhere_handlers' here),"
        " the predicate 'gone.module:items',"
        " the tool 'nowhere_tools:search' (no module 'nowhere_tools' here);"
        " resume it from the application that built it (Runtime.resume)"
    )
    assert await stored(tmp_path, "needs") == before
