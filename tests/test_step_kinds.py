"""A kind of step is one module and one registry line (issue 28, item 1).

``echo`` (tests/echo_kind.py) exists only in the tests, and nothing in Cadenza
names it: registered with ``register_step_kind`` here and through
``CADENZA_STEP_KINDS`` in the ``cadenza`` processes these tests start, it is
checked by ``cadenza validate``, run in this process and on a real worker over
ZeroMQ, drawn by ``cadenza graph`` and traced in OpenTelemetry, like the kinds
Cadenza ships.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cadenza import Event, Runtime
from cadenza.remote import Dispatcher
from cadenza.telemetry import OpenTelemetry
from cadenza.workflow import (
    Step,
    WorkflowError,
    load_workflow,
    load_workflow_text,
    register_step_kind,
    step_kinds,
    unregister_step_kind,
)
from cadenza.workflow.kinds import StepKind

from .echo_kind import ECHO, Echo, EchoBlock

ROOT = Path(__file__).resolve().parent.parent

FLOW = """
name: echoes
inputs:
  who: {type: string, default: world}
steps:
  - id: greet
    echo: {text: "hi {{ inputs.who }}", times: 2}
  - id: each
    dependsOn: [greet]
    echo: {text: "{{ item }}!"}
    loop: {forEach: "['a', 'b']"}
"""

BROKEN = """
name: broken
steps:
  - id: a
    echo: {txet: hi}
  - id: b
    echo: {text: "{{ steps.nope.content }}", times: 11}
  - id: c
    command: "true"
    echo: {text: hi}
"""


@pytest.fixture
def echo() -> Iterator[StepKind]:
    """The one registry line, in this process."""
    register_step_kind(ECHO)
    yield ECHO
    unregister_step_kind(ECHO.name)


def environment(*, registered: bool = True) -> dict[str, str]:
    """A ``cadenza`` process's environment: the kind named in ``CADENZA_STEP_KINDS``."""
    path = os.pathsep.join(filter(None, (os.environ.get("PYTHONPATH"), str(ROOT))))
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("CADENZA_STEP_KINDS", None)
    if registered:
        env["CADENZA_STEP_KINDS"] = "tests.echo_kind:ECHO"
    return env


def cadenza(
    *args: str, cwd: Path, registered: bool = True, kinds: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = environment(registered=registered)
    if kinds is not None:
        env["CADENZA_STEP_KINDS"] = kinds
    return subprocess.run(
        [sys.executable, "-m", "cadenza", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Any]:
    """Starts a real ``cadenza worker`` process; it is gone when the test ends."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(endpoint: str, name: str, *, registered: bool = True) -> None:
        with (tmp_path / f"worker-{name}.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "cadenza", "worker", "--connect", endpoint, "--name", name],
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd=tmp_path,
                env=environment(registered=registered),
            )
        processes.append(process)

    yield start
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "flow.yaml"
    path.write_text(text)
    return path


# Validated --------------------------------------------------------------------------


def test_cadenza_validate_checks_its_keys(tmp_path: Path) -> None:
    """Its block's keys, types and bounds, its template, and one kind per step: each a
    located problem; without the kind registered, ``echo`` is an unknown key."""
    write(tmp_path, BROKEN)
    proc = cadenza("validate", "flow.yaml", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()

    def line(location: str) -> str:
        found = [text for text in lines if text.startswith(location)]
        assert found, (location, proc.stderr)
        return "\n".join(found)

    assert "unknown key 'txet' in the echo block; did you mean 'text'?" in line(
        "flow.yaml:5:12: steps[0].echo.txet:"
    )
    assert "the echo block needs 'text'" in line("flow.yaml:5:5: steps[0].echo:")
    assert "Expected `int` <= 10 - at `$.times`" in line("flow.yaml:7:5: steps[1].echo:")
    assert "no step has the id 'nope'" in line("flow.yaml:7:19: steps[1].echo.text:")
    assert "a step does one thing, but this one has both 'command' and 'echo'" in line(
        "flow.yaml:10:5: steps[2].echo:"
    )

    write(tmp_path, FLOW)
    assert cadenza("validate", "flow.yaml", cwd=tmp_path).stdout == "flow.yaml: ok\n"
    unknown = cadenza("validate", "flow.yaml", cwd=tmp_path, registered=False)
    assert unknown.returncode == 2
    assert "steps[0].echo: unknown key 'echo' in a step" in unknown.stderr


@pytest.mark.parametrize(
    ("kinds", "says"),
    [
        ("tests.no_such_module:ECHO", "cannot be loaded: No module named 'tests.no_such_module'"),
        ("json:dumps", "is not a StepKind (it is function)"),
        ("tests.echo_kind", "is not 'module:attribute'"),
    ],
)
def test_a_kind_that_does_not_load_is_one_line_and_exit_2(
    tmp_path: Path, kinds: str, says: str
) -> None:
    """For every command, a worker included: before it connects, not at its first step."""
    write(tmp_path, FLOW)
    connect = ("worker", "--connect", "tcp://127.0.0.1:9", "--name", "w")
    for args in (("validate", "flow.yaml"), ("graph", "flow.yaml"), connect):
        proc = cadenza(*args, cwd=tmp_path, kinds=kinds)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr == f"cadenza: error: CADENZA_STEP_KINDS: {kinds!r} {says}\n"


def test_loading_reports_the_same_problems_in_process(echo: StepKind) -> None:
    with pytest.raises(WorkflowError) as caught:
        load_workflow_text(BROKEN, filename="broken.yaml")
    paths = {problem.path for problem in caught.value.problems}
    assert paths == {
        "steps[0].echo.txet",
        "steps[0].echo",
        "steps[1].echo",
        "steps[1].echo.text",
        "steps[2].echo",
    }
    loaded = load_workflow_text(FLOW)
    greet = loaded.workflow.steps[0]
    assert greet.kind == "echo"
    assert greet.kind_block == {"echo": {"text": "hi {{ inputs.who }}", "times": 2}}
    assert ECHO.options(greet) == EchoBlock(text="hi {{ inputs.who }}", times=2)


# Run in process, and on a worker ------------------------------------------------------


async def test_it_runs_in_process(tmp_path: Path, echo: StepKind) -> None:
    events: list[Event] = []
    async with Runtime() as runtime:
        handle = await runtime.start(write(tmp_path, FLOW), on_event=events.append)
        result = await handle.result()
    assert result.status == "completed", result.error
    greet = result.steps["greet"]
    assert greet.content == "hi world hi world"
    assert greet.result == {
        "said": "hi world hi world",
        "pid": os.getpid(),
        "on_worker": False,
        "key": f"{result.run_id}:greet:1",
    }
    assert greet.worker is None
    starts = [e for e in events if e.type == "step_start" and e.data and e.data["kind"] == "echo"]
    assert [e.step_id for e in starts] == ["greet", "each[0]", "each[1]"]
    assert [result.steps[f"each[{i}]"].content for i in (0, 1)] == ["a!", "b!"]


async def test_it_runs_on_a_worker(tmp_path: Path, echo: StepKind, worker: Any) -> None:
    """The supervisor decides (renders the text), the worker executes: same answer."""
    async with Runtime(workers=Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)) as runtime:
        assert runtime.workers is not None
        worker(runtime.workers.endpoint, "echoer")
        events: list[Event] = []
        handle = await runtime.start(write(tmp_path, FLOW), on_event=events.append)
        result = await handle.result()
    assert result.status == "completed", result.error
    greet = result.steps["greet"]
    assert greet.content == "hi world hi world"
    assert greet.worker == "echoer"
    assert greet.result["on_worker"] is True
    assert greet.result["pid"] != os.getpid()
    assert greet.result["key"] == f"{result.run_id}:greet:1"
    assert [result.steps[f"each[{i}]"].content for i in (0, 1)] == ["a!", "b!"]
    dispatched = {e.step_id for e in events if e.type == "step_dispatched"}
    assert dispatched == {"greet", "each[0]", "each[1]"}


async def test_a_worker_without_the_kind_fails_the_step_saying_so(
    tmp_path: Path, echo: StepKind, worker: Any
) -> None:
    flow = write(tmp_path, "name: one\nsteps:\n  - id: greet\n    echo: {text: hi}\n")
    async with Runtime(workers=Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)) as runtime:
        assert runtime.workers is not None
        worker(runtime.workers.endpoint, "plain", registered=False)
        result = await (await runtime.start(flow)).result()
    assert result.status == "failed"
    error = result.steps["greet"].error
    assert error is not None
    assert error.type == "Unsupported"
    assert "'echo' steps cannot run on this worker" in error.message


async def test_a_run_without_the_kind_fails_the_step_saying_so(
    tmp_path: Path, echo: StepKind
) -> None:
    """A document that uses a kind this process no longer has (a resumed run, say)."""
    flow = write(tmp_path, "name: one\nsteps:\n  - id: greet\n    echo: {text: hi}\n")
    loaded = load_workflow(flow)
    unregister_step_kind(ECHO.name)
    async with Runtime() as runtime:
        result = await runtime.run(loaded)
    assert result.status == "failed"
    error = result.steps["greet"].error
    assert error is not None
    assert error.type == "Unsupported"
    assert "'echo' steps cannot run in this process" in error.message


# Drawn, and traced -------------------------------------------------------------------


def test_cadenza_graph_draws_it(tmp_path: Path) -> None:
    write(tmp_path, FLOW)
    chart = cadenza("graph", "flow.yaml", cwd=tmp_path)
    assert chart.returncode == 0, chart.stderr
    assert 'n_greet["greet: echo x2"]' in chart.stdout
    assert '["each: echo x1"]' in chart.stdout
    data = json.loads(cadenza("graph", "flow.yaml", "--format", "json", cwd=tmp_path).stdout)
    assert data["steps"][0] == {
        "id": "greet",
        "kind": "echo",
        "echo": {"text": "hi {{ inputs.who }}", "times": 2},
        "dependsOn": [],
    }


async def test_it_is_traced(tmp_path: Path, echo: StepKind) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        async with Runtime(telemetry=OpenTelemetry(tracer_provider=provider)) as runtime:
            result = await runtime.run(write(tmp_path, FLOW))
    finally:
        provider.shutdown()
    assert result.status == "completed", result.error
    spans = {span.name: span for span in exporter.get_finished_spans()}
    run = spans["run echoes"]
    greet = spans["step greet"]
    assert greet.attributes is not None
    assert greet.attributes["cadenza.step.kind"] == "echo"
    assert greet.attributes["cadenza.status"] == "completed"
    assert greet.parent is not None
    assert run.context is not None
    assert greet.parent.span_id == run.context.span_id
    items = [s for s in exporter.get_finished_spans() if s.name == "step each"]
    kinds = sorted(str((s.attributes or {}).get("cadenza.step.kind")) for s in items)
    assert kinds == ["echo", "echo", "forEach"]


# The registry ------------------------------------------------------------------------


# One block that makes a step each of Cadenza's own kinds, by the key that names it.
_NAMING: dict[str, dict[str, Any]] = {
    "include": {"include": "other.yaml"},
    "command": {"command": "true"},
    "handler": {"handler": "m:f"},
    "graph": {"graph": {"start": "s", "states": {}}},
    "control": {"control": {"objective": "o", "actor": "a", "evaluator": "e"}},
    "human": {"human": {"prompt": "?"}},
    "tool": {"tool": "read"},
    "agent": {"agent": "writer"},
    "instructions": {"instructions": "do it"},
}


@pytest.mark.parametrize("key", sorted(_NAMING))
def test_step_kind_agrees_with_the_registry(key: str) -> None:
    """`Step.kind` names Cadenza's own kinds by their fields, written out for speed:
    it must say what the registry's kinds say names the step."""
    step = msgspec.convert({"id": "s", **_NAMING[key]}, Step)
    named = [(kind.name, kind.named_by(step)) for kind in step_kinds()]
    assert [pair for pair in named if pair[1] is not None] == [(step.kind, key)]


def test_every_kind_of_cadenza_has_a_naming_block() -> None:
    names = {key for kind in step_kinds() for key in kind.names}
    assert names == set(_NAMING)


def test_registering_refuses_a_name_that_is_taken(echo: StepKind) -> None:
    with pytest.raises(ValueError, match="registered already"):
        register_step_kind(ECHO)

    class Timeout(Echo):
        name = "timeout"

    with pytest.raises(ValueError, match="a key every step has"):
        register_step_kind(Timeout())

    class Bare(StepKind):
        name = "bare"

    with pytest.raises(ValueError, match="no spec"):
        register_step_kind(Bare())
