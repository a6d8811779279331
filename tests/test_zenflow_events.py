"""Cadenza's event stream is zenflow's (its spec, section 14), and docs/events.md says how.

A consumer written for zenflow's NDJSON stream must read Cadenza's. zenflow's
own round-trip test (section 14.4) fails a stream on a ``type`` it does not
know, a line without ``type``, ``timestamp`` or ``runId``, a type without its
required ``data`` keys, or a key on a type that no one documented. These tests
run those checks, and the meaning of each zenflow key (section 14.2: a
``step_start``'s ``index`` and ``total``, an ``agent_turn``'s phases, a
``tool_call``'s end, streamed text as ``output`` with ``delta`` and ``done``),
over the stream of every workflow in ``examples/``: as ``cadenza run --events``
writes it and as ``RunHandle.events()`` yields it. What Cadenza adds must be
in docs/events.md, whose tables are checked against the one registry in code
(`cadenza.protocols.ZENFLOW`, ``PAYLOADS``, `extra_keys`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cadenza import Event, LoadedWorkflow, Runtime
from cadenza.protocols import ADDED_TYPES, NO_PAYLOAD, PAYLOADS, ZENFLOW, EventType, extra_keys
from cadenza.workflow import Step, load_workflow
from tests._helpers import load_example

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
EVENTS_DOC = ROOT / "docs" / "events.md"

YAML_EXAMPLES = sorted(path.name for path in EXAMPLES.glob("*.yaml"))
PYTHON_EXAMPLES = ("control_sdk", "graph_router", "reflection_python")
INPUTS: Mapping[str, Mapping[str, str]] = {"asgi_flow.yaml": {"ticket": "The export page is down"}}
PROGRAMS = {"mcp-time.yaml": "mcp-server-time"}  # what an example needs on PATH
OUTCOMES = {"control-impossible.yaml": "failed", "control-signoff.yaml": "waiting"}
"""Examples that do not complete, on purpose (docs/control.md); the others complete."""
EXIT_CODES = {"completed": 0, "failed": 1, "waiting": 3}

ZENFLOW_ENVELOPE = frozenset(
    {
        *("type", "timestamp", "runId", "stepId", "agent", "agentId", "message", "duration"),
        *("tokens", "error", "data", "delta", "done", "reasoning"),
    }
)
"""zenflow's envelope fields (section 14)."""
CADENZA_ENVELOPE = frozenset({"seq"})
GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")
UNDECLARED = frozenset(("untilAgent", "human", "planner", "actor", "evaluator", "delegate"))
"""Names of addresses no workflow declares: a judge, a control loop's question and calls."""

Line = dict[str, Any]


# -- zenflow's checks, and the meaning of its keys ------------------------------------------


def step_positions_oracle(steps: Sequence[Step]) -> dict[str, int]:
    """zenflow's TopoSort (internal/exec/scheduler.go), written again: queue, not recursion."""
    waiting = {step.id: len(step.depends_on) for step in steps}
    following: dict[str, list[str]] = {step.id: [] for step in steps}
    for step in steps:
        for dependency in step.depends_on:
            following[dependency].append(step.id)
    queue = deque(step.id for step in steps if waiting[step.id] == 0)
    order: list[str] = []
    while queue:
        node = queue.popleft()
        order.append(node)
        for neighbour in following[node]:
            waiting[neighbour] -= 1
            if waiting[neighbour] == 0:
                queue.append(neighbour)
    return {step_id: index for index, step_id in enumerate(order)}


def declared_positions(document: LoadedWorkflow) -> dict[str, set[tuple[int, int]]]:
    """Every step id declared in the document and what it includes, with its (index, total).

    A graph's states count by declaration; an id declared twice keeps both positions.
    """
    positions: dict[str, set[tuple[int, int]]] = {}
    scopes: list[Sequence[Step]] = []
    pending = [document]
    while pending:
        loaded = pending.pop()
        scopes.append(loaded.workflow.steps)
        pending.extend(loaded.includes.values())
    while scopes:
        steps = scopes.pop()
        order = step_positions_oracle(steps)
        for step in steps:
            positions.setdefault(step.id, set()).add((order[step.id], len(steps)))
        for body in steps:
            if body.loop is not None and body.loop.steps:
                scopes.append(body.loop.steps)
            if body.graph is not None:
                states = body.graph.states
                for place, name in enumerate(states):
                    positions.setdefault(name, set()).add((place, len(states)))
                    state = states[name]
                    if state.loop is not None and state.loop.steps:
                        scopes.append(state.loop.steps)
    return positions


def _parent(address: str) -> str | None:
    """The address ``address`` belongs to: ``loop`` for ``loop.2`` and for ``each[3]``."""
    if address.endswith("]"):
        return address[: address.rindex("[")]
    return address.rsplit(".", 1)[0] if "." in address else None


def _timestamp(text: Any) -> bool:
    if not isinstance(text, str) or not text.endswith("Z"):
        return False
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _tokens(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and all(isinstance(value.get(key), int) for key in ("prompt", "completion", "total"))
        and value["total"] == value["prompt"] + value["completion"]
    )


class Checker:
    """Reads one run's stream line by line and says what a zenflow consumer would trip on."""

    def __init__(self, document: LoadedWorkflow) -> None:
        self.document = document
        self.declared = declared_positions(document)
        self.problems: list[str] = []
        self.starts: dict[str, dict[str, Any]] = {}
        self.kinds: dict[str, str] = {}
        self.streaming: set[str] = set()  # step ids whose reply's text has not ended
        self.seq = 0
        self.types: set[str] = set()

    def check(self, lines: Iterable[Line]) -> list[str]:
        for number, line in enumerate(lines, 1):
            self.line(number, line)
        return self.problems

    def bad(self, number: int, line: Line, why: str) -> None:
        self.problems.append(f"line {number} ({line.get('type')} {line.get('stepId')}): {why}")

    def line(self, number: int, line: Line) -> None:
        def bad(why: str) -> None:
            self.bad(number, line, why)

        kind = line.get("type")
        if not isinstance(kind, str):
            bad("no string `type`")
            return
        self.types.add(kind)
        if kind not in ZENFLOW and kind not in ADDED_TYPES:
            bad("a type neither zenflow's nor documented")
        if not _timestamp(line.get("timestamp")):
            bad(f"`timestamp` is not RFC 3339 UTC: {line.get('timestamp')!r}")
        if not isinstance(line.get("runId"), str):
            bad("no `runId`")
        unknown = set(line) - ZENFLOW_ENVELOPE - CADENZA_ENVELOPE
        if unknown:
            bad(f"envelope fields no one documented: {sorted(unknown)}")
        data = line.get("data") or {}
        if not isinstance(data, dict):
            bad("`data` is not an object")
            return
        zenflow = ZENFLOW.get(kind)
        documented = set(extra_keys(kind)) | (zenflow.keys if zenflow is not None else set())
        if set(data) - documented:
            bad(f"data keys no one documented: {sorted(set(data) - documented)}")
        if zenflow is not None and zenflow.required - set(data):
            bad(f"zenflow's required data keys missing: {sorted(zenflow.required - set(data))}")
        if kind != "output":
            self.numbered(number, line)
        for why in MEANINGS.get(kind, _nothing)(self, line, data):
            bad(why)

    def numbered(self, number: int, line: Line) -> None:
        """Cadenza's own promise: recorded events are numbered 1, 2, 3... without gaps."""
        self.seq += 1
        if line.get("seq") != self.seq:
            self.bad(number, line, f"seq {line.get('seq')!r}, expected {self.seq}")

    # The meaning of each zenflow type's keys ---------------------------------------------

    def workflow_start(self, line: Line, data: dict[str, Any]) -> Iterable[str]:
        declared = len(self.document.workflow.steps)
        if data.get("total") != declared:
            yield f"total {data.get('total')!r}, but the workflow declares {declared} steps"

    def workflow_end(self, line: Line, data: dict[str, Any]) -> Iterable[str]:
        if not GO_DURATION.match(str(line.get("duration"))):
            yield f"no Go duration: {line.get('duration')!r}"
        if not _tokens(line.get("tokens")):
            yield f"no tokens: {line.get('tokens')!r}"

    def step_start(self, line: Line, data: dict[str, Any]) -> Iterable[str]:
        address = str(line.get("stepId"))
        index, total = data.get("index"), data.get("total")
        if not (isinstance(index, int) and isinstance(total, int) and 0 <= index < total):
            yield f"index {index!r} of total {total!r}"
            return
        self.starts[address] = data
        self.kinds[address] = str(data.get("kind"))
        self.streaming.discard(address)
        name = address.rsplit(".", 1)[-1]
        if name.endswith("]"):  # a forEach item: its forEach's place
            name = name[: name.rindex("[")]
        known = self.declared.get(name)
        owner = _parent(address)
        if name.isdigit() or name in UNDECLARED:
            # Not a declared step (an iteration, a judge, a control loop's call or
            # question): the place of the step it belongs to.
            if owner in self.starts:
                expected = (self.starts[owner]["index"], self.starts[owner]["total"])
                if (index, total) != expected:
                    yield f"(index, total) {(index, total)} is not its owner's {expected}"
        elif known is not None and (index, total) not in known:
            yield f"(index, total) is {(index, total)}; declared: {sorted(known)}"
        if data.get("kind") in ("loop", "forEach") and data.get("loop_type") not in (
            "repeat",
            "forEach",
        ):
            yield f"a loop without zenflow's loop_type: {data.get('loop_type')!r}"
        if data.get("kind") == "include" and not isinstance(data.get("include"), str):
            yield "an include without zenflow's include"

    def step_end(self, line: Line, data: dict[str, Any]) -> Iterable[str]:
        address = str(line.get("stepId"))
        if not GO_DURATION.match(str(line.get("duration"))):
            yield f"no Go duration: {line.get('duration')!r}"
        if self.kinds.get(address) == "agent" and not _tokens(line.get("tokens")):
            yield f"an agent step's end without tokens: {line.get('tokens')!r}"
        yield from self.reply_ended(address)

    def error(self, line: Line, data: dict[str, Any]) -> Iterable[str]:
        if data.get("status") == "failed" and not isinstance(line.get("error"), str):
            yield "a failure without `error`"
        yield from self.reply_ended(str(line.get("stepId")))

    def reply_ended(self, address: str) -> Iterable[str]:
        if address in self.streaming:
            yield "the step ended while its reply's text had no `done`"

    def agent_turn(self, line: Line, data: dict[str, Any]) -> Iterable[str]:
        phase = data.get("phase")
        if phase not in ("request", "response"):
            yield f"phase {phase!r}"
        if not isinstance(data.get("model"), str):
            yield "no model"
        if phase == "request" and not (isinstance(data.get("turn"), int) and data["turn"] >= 1):
            yield f"a request's turn is {data.get('turn')!r}"
        if phase == "response" and not _tokens(line.get("tokens")):
            yield f"a response without tokens: {line.get('tokens')!r}"

    def tool_call(self, line: Line, data: dict[str, Any]) -> Iterable[str]:
        phase = data.get("phase")
        if phase not in ("start", "end"):
            yield f"phase {phase!r}"
        for key in ("tool_name", "tool_call_id", "input"):
            if not isinstance(data.get(key), str):
                yield f"{key} is not a string: {data.get(key)!r}"
        if phase != "end":
            return
        for key in ("output", "duration", "error"):
            if key not in data:
                yield f"an end without {key}"
        if not GO_DURATION.match(str(data.get("duration"))):
            yield f"data.duration is not a Go duration: {data.get('duration')!r}"
        if line.get("duration") != data.get("duration"):
            yield "the envelope's duration is not the data's"
        if line.get("error") != data.get("error"):
            yield f"the envelope's error {line.get('error')!r} is not the data's"

    def messages(self, line: Line, data: dict[str, Any]) -> Iterable[str]:
        if data.get("msg_type") not in (0, 1, 2, 3):
            yield f"msg_type {data.get('msg_type')!r}"

    def output(self, line: Line, data: dict[str, Any]) -> Iterable[str]:
        if not isinstance(line.get("delta"), str):
            yield "no string delta"
        if not isinstance(line.get("done"), bool):
            yield "no boolean done"
        if "seq" in line:
            yield "streamed text is numbered, as if it were recorded"
        if line.get("agentId") != line.get("agent"):
            yield "agentId is not the agent"
        address = str(line.get("stepId"))
        if line.get("done"):
            self.streaming.discard(address)
        else:
            self.streaming.add(address)


def _nothing(checker: Checker, line: Line, data: dict[str, Any]) -> Iterable[str]:
    return ()


MEANINGS: dict[str, Callable[[Checker, Line, dict[str, Any]], Iterable[str]]] = {
    "workflow_start": Checker.workflow_start,
    "workflow_end": Checker.workflow_end,
    "step_start": Checker.step_start,
    "step_end": Checker.step_end,
    "error": Checker.error,
    "agent_turn": Checker.agent_turn,
    "tool_call": Checker.tool_call,
    "message_sent": Checker.messages,
    "message_dropped": Checker.messages,
    "agent_inbox_drain": Checker.messages,
    "output": Checker.output,
}


def assert_zenflow_stream(lines: list[Line], document: LoadedWorkflow) -> set[str]:
    """Fails with every problem found; returns the types the stream had."""
    checker = Checker(document)
    problems = checker.check(lines)
    assert lines, "no events"
    assert "actor_crashed" not in checker.types, [e for e in lines if e["type"] == "actor_crashed"]
    assert not problems, "\n".join(problems[:40])
    return checker.types


# -- the examples, from the command line and from Python ----------------------------------


def _needs(name: str) -> None:
    program = PROGRAMS.get(name)
    if program is not None and shutil.which(program) is None:
        pytest.skip(f"{name} needs {program} on PATH (pip install {program})")


def _lines(events: Iterable[Event]) -> list[Line]:
    """The NDJSON lines a consumer reads: each event as it goes out."""
    return [json.loads(msgspec.json.encode(event)) for event in events]


SEEN: set[str] = set()
"""Every type the examples' streams had, for the coverage test at the end."""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", YAML_EXAMPLES)
def test_the_command_lines_stream_is_zenflows(name: str, tmp_path: Path) -> None:
    """``cadenza run --events``: every line passes zenflow's checks, with zenflow's meaning."""
    _needs(name)
    inputs = [f"--input={key}={value}" for key, value in INPUTS.get(name, {}).items()]
    command = [sys.executable, "-m", "cadenza", "run", str(EXAMPLES / name), "--events"]
    done = subprocess.run(
        [*command, *inputs, "--store", "runs.db"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == EXIT_CODES[OUTCOMES.get(name, "completed")], done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    SEEN.update(assert_zenflow_stream(lines, load_workflow(EXAMPLES / name)))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", YAML_EXAMPLES)
async def test_the_python_apis_stream_is_zenflows(name: str, tmp_path: Path) -> None:
    """``RunHandle.events()``, encoded as a consumer would: the same checks."""
    _needs(name)
    document = load_workflow(EXAMPLES / name)
    async with Runtime(store=tmp_path / "runs.db") as runtime:
        handle = await runtime.start(document, inputs=INPUTS.get(name))
        events = [event async for event in handle.events()]
        result = await handle.result()
    assert result.status == OUTCOMES.get(name, "completed"), result.error
    SEEN.update(assert_zenflow_stream(_lines(events), document))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", PYTHON_EXAMPLES)
async def test_the_python_examples_streams_are_zenflows(name: str) -> None:
    """The workflows built in Python (a graph, a loop, the control-loop SDK) stream alike."""
    module = load_example(name, f"zenflow_{name}")
    async with Runtime() as runtime:
        if name == "control_sdk":
            run_id = (await module.loop.start(runtime)).run_id
            handle = runtime.handle(run_id)
            assert handle is not None
            document = module.loop.workflow()
        else:
            document = module.build()
            handle = await runtime.start(document)
        events = [event async for event in handle.events()]
        result = await handle.result()
    assert result.status == "completed", result.error
    SEEN.update(assert_zenflow_stream(_lines(events), document))


def test_the_examples_cover_zenflows_types() -> None:
    """The checks above saw the zenflow types whose meaning they test (run with them)."""
    if not SEEN:
        pytest.skip("run with the example tests above: it reads what they saw")
    wanted = {
        "workflow_start",
        "workflow_end",
        "step_start",
        "step_end",
        "step_skipped",
        "error",
        "agent_turn",
        "tool_call",
        "message",
        "message_sent",
        "output",
    }
    assert wanted <= SEEN, sorted(wanted - SEEN)


# -- the checks can fail: a stream as a consumer of zenflow's must refuse it --------------


SAMPLE = LoadedWorkflow(
    workflow=load_workflow(EXAMPLES / "negotiation.yaml").workflow,
    path=None,
    base_dir=EXAMPLES,
)


def _sample() -> list[Line]:
    run = {"timestamp": "2026-05-05T10:00:00.000Z", "runId": "r1"}
    return [
        {"type": "workflow_start", **run, "seq": 1, "message": "negotiation", "data": {"total": 1}},
        {
            "type": "step_start",
            **run,
            "seq": 2,
            "stepId": "negotiate",
            "data": {"kind": "graph", "attempt": 1, "index": 0, "total": 1},
        },
        {"type": "output", **run, "stepId": "negotiate", "delta": "Hello.", "done": True},
    ]


def _broken(change: Callable[[list[Line]], None]) -> list[str]:
    lines = _sample()
    change(lines)
    return Checker(SAMPLE).check(lines)


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (lambda lines: lines[1]["data"].pop("index"), "required data keys missing: ['index']"),
        (lambda lines: lines[1]["data"].update(total=3), "(index, total) is (0, 3)"),
        (lambda lines: lines[1]["data"].update(surprise=1), "no one documented: ['surprise']"),
        (lambda lines: lines[0].update(type="agent_delta"), "neither zenflow's nor documented"),
        (lambda lines: lines[2].pop("runId"), "no `runId`"),
        (lambda lines: lines[2].pop("timestamp"), "`timestamp` is not RFC 3339"),
        (lambda lines: lines[2].update(done="yes"), "no boolean done"),
        (lambda lines: lines[0]["data"].update(total=2), "declares 1 steps"),
    ],
)
def test_the_checks_refuse_what_a_zenflow_consumer_would(
    change: Callable[[list[Line]], None], complaint: str
) -> None:
    assert _broken(lambda lines: None) == []
    problems = _broken(change)
    assert any(complaint in problem for problem in problems), problems


def test_the_oracle_is_zenflows_order_not_the_declared_one() -> None:
    """``a``, ``b`` after ``a``, ``c``: zenflow places ``c`` (ready at once) before ``b``."""
    steps = [
        Step(id="a", command="true"),
        Step(id="b", command="true", depends_on=["a"]),
        Step(id="c", command="true"),
    ]
    assert step_positions_oracle(steps) == {"a": 0, "c": 1, "b": 2}


# -- docs/events.md: its tables are the registry -------------------------------------------


def _table(heading: str) -> dict[str, list[str]]:
    """The rows of the table under ``heading``: first cell's type -> each cell."""
    text = EVENTS_DOC.read_text()
    match = re.search(rf"^{re.escape(heading)}$", text, re.M)
    assert match is not None, f"docs/events.md has no {heading!r}"
    rest = text[match.end() :]
    end = re.search(r"^#{1,3} ", rest, re.M)
    rows: dict[str, list[str]] = {}
    for line in (rest[: end.start()] if end else rest).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        named = re.fullmatch(r"`([a-zA-Z_]+)`", cells[0]) if line.startswith("| `") else None
        if named is not None:
            rows[named.group(1)] = cells
    return rows


def _keys(cell: str) -> set[str]:
    """The keys a cell names: backquoted words outside parentheses (those are values)."""
    return set(re.findall(r"`([A-Za-z_]+)`", re.sub(r"\([^()]*\)", "", cell)))


def test_the_docs_list_what_cadenza_adds_to_zenflows_types() -> None:
    """Each zenflow type Cadenza emits: its row's last cell is exactly `extra_keys`."""
    rows = _table("## zenflow's types")
    emitted = {kind for kind in ZENFLOW if kind in PAYLOADS or kind in NO_PAYLOAD}
    assert set(rows) == emitted
    for kind, cells in rows.items():
        assert _keys(cells[-1]) == set(extra_keys(kind)), kind
        assert ZENFLOW[kind].required <= _keys(cells[2]), kind


def test_the_docs_list_every_type_cadenza_adds() -> None:
    """Each Cadenza type, with exactly the data keys its Struct has."""
    rows = _table("## Cadenza's types")
    assert set(rows) == ADDED_TYPES
    for kind, cells in rows.items():
        assert _keys(cells[-1]) == set(extra_keys(kind)), kind


def test_the_docs_tables_list_every_event_type_and_no_other() -> None:
    """The two tables together are `EventType`: each type once, none it lacks."""
    zenflows, cadenzas = _table("## zenflow's types"), _table("## Cadenza's types")
    assert not set(zenflows) & set(cadenzas)
    assert set(zenflows) | set(cadenzas) == EventType.names()


def test_the_docs_list_the_envelope_the_code_writes() -> None:
    """zenflow's envelope fields and Cadenza's ``seq``: every field `Event` can write."""
    rows = _table("## The envelope")
    written = {field.encode_name for field in msgspec.structs.fields(Event)}
    assert set(rows) == written == ZENFLOW_ENVELOPE | CADENZA_ENVELOPE
