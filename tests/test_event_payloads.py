"""Typed event payloads write what the dicts wrote, and read what was stored before.

``fixtures/payloads`` holds what Cadenza wrote at 58c20e5, before payloads were
Structs (``record.py`` there says how): the ``--events`` streams of six runs, a
store with a run waiting for a person, and that store after the answer and the
resume. A resumed run matches the decision events it states again against the
stored ones byte for byte, so their key order is part of the format.
"""

from __future__ import annotations

import ast
import importlib
import json
import runpy
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cadenza.errors import CorruptRecord
from cadenza.protocols import (
    NO_PAYLOAD,
    PAYLOADS,
    Event,
    EventType,
    IterationStart,
    StepStart,
    payload,
    to_data,
)

FIXTURES = Path(__file__).with_name("fixtures")
HERE = FIXTURES / "payloads"
SOURCE = Path(__file__).resolve().parents[1] / "src" / "cadenza"

RUNS: dict[str, Path] = runpy.run_path(str(HERE / "record.py"))["RUNS"]

REORDERED = {
    # The coordinator wrote msg_type before text; agents wrote text first.
    "message_sent": ("coordinator",),
    # A tool step wrote error before output; an agent's tool call, output first.
    "tool_call": ("end",),
}
"""The two payloads whose key order one emitter changed: one Struct has one order.

Neither is a decision event, so no resume compares them with what it states again.
"""

ADDED = {
    "step_start": ("index", "total", "items"),
    "tool_call": ("duration",),
    "max_wake_cycles_warning": ("unread_remaining",),
}
"""zenflow's keys added since the fixtures were written (issue 27): last in their Structs.

A resumed run leaves ``step_start``'s out when it compares (`Replay`); the others
are not decision events.
"""


def read(path: Path) -> list[Event]:
    return [msgspec.json.decode(line, type=Event) for line in path.read_text().splitlines()]


def fixture_events() -> Iterator[tuple[str, Event]]:
    for path in sorted([*HERE.glob("*.ndjson"), *FIXTURES.glob("store-v0.1/*.ndjson")]):
        for event in read(path):
            yield path.name, event


def reordered(event: Event) -> bool:
    data = event.data or {}
    which = REORDERED.get(event.type)
    return which is not None and which[0] in (data.get("from"), data.get("phase"))


def test_every_stored_payload_reads_as_its_struct_and_writes_back_the_same() -> None:
    kinds = set()
    for name, event in fixture_events():
        kinds.add(event.type)
        if event.type in NO_PAYLOAD:
            assert event.data is None, (name, event)
            continue
        assert event.type in PAYLOADS, (name, event.type)
        if event.data is None:  # a step_end without a worker, a waiting container
            continue
        read_back = to_data(payload(event, PAYLOADS[event.type]))
        assert read_back == event.data, (name, event)
        if not reordered(event):
            assert list(read_back) == list(event.data), (name, event)
    assert len(kinds) >= 29  # the fixtures reach most types


def test_a_payload_that_does_not_fit_is_named() -> None:
    event = Event("iteration_start", "t", "r1", 7, data={"iteration": "zero"})
    with pytest.raises(CorruptRecord, match=r"event 7 \('iteration_start'\) of run 'r1'"):
        payload(event, IterationStart)


def test_readers_get_attributes_and_defaults() -> None:
    event = Event("step_start", "t", "r", 1, data={"kind": "loop", "attempt": 2, "x": 1})
    start = payload(event, StepStart)
    assert (start.kind, start.attempt, start.max_iterations) == ("loop", 2, None)
    assert to_data(start) == {"kind": "loop", "attempt": 2}


def _normal(value: Any) -> Any:
    """``value`` without what differs from run to run (durations)."""
    if isinstance(value, dict):
        return {k: 0 if k == "durationMs" else _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _key(event: Event, data: dict[str, Any] | None) -> str:
    # Encoded, so that key order counts; durations and times left out.
    fields = (event.type, event.step_id, event.agent, event.message, event.error, _normal(data))
    return json.dumps(fields)


def _without_added(event: Event) -> Event:
    """``event`` as the fixtures' version wrote it: zenflow's later keys, which come
    last, left out, and the envelope's copy of a tool call's error with them."""
    added = ADDED.get(event.type, ())
    data = event.data
    if data is None or not added:
        return event
    keys = list(data)
    kept = [key for key in keys if key not in added]
    assert keys[: len(kept)] == kept, f"added keys are not last: {keys}"
    error = None if event.type == "tool_call" else event.error
    if event.type == "tool_call":
        assert event.error == data.get("error"), event
    return msgspec.structs.replace(event, error=error, data={key: data[key] for key in kept})


def _expected(events: list[Event]) -> Counter[str]:
    """The fixture's events as this version writes them (the two reorderings applied)."""
    keys: Counter[str] = Counter()
    for event in events:
        data = event.data
        if data is not None and event.type in PAYLOADS:
            data = to_data(payload(event, PAYLOADS[event.type]))
        keys[_key(event, data)] += 1
    return keys


def _written(events: list[Event]) -> Counter[str]:
    """What this version wrote, less what the fixtures predate (`_script_positions`, `_wakes`)."""
    keys: Counter[str] = Counter()
    for event in events:
        if event.type == "coordinator_wake":
            continue
        data = event.data
        if data is not None and "script_position" in data:
            data = {k: v for k, v in data.items() if k != "script_position"}
        keys[_key(event, data)] += 1
    return keys


def _script_positions(events: list[Event]) -> dict[str, list[int]]:
    """Per scripted agent, the reply each of its model calls had, in call order.

    A ``scripted`` response has said which reply it was since issue 26 (a resumed
    run goes on from there); the fixtures were written before.
    """
    positions: dict[str, list[int]] = {}
    for event in events:
        data = event.data or {}
        if event.type == "agent_turn" and "script_position" in data:
            positions.setdefault(event.agent or "", []).append(data["script_position"])
    return positions


def _wakes(events: list[Event]) -> list[tuple[str, str]]:
    """The coordinator agent's wakes, ``(phase, from)`` in order (marked since issue 26)."""
    return [
        (data["phase"], data["from"])
        for event in events
        if event.type == "coordinator_wake" and (data := event.data or {})
    ]


def cadenza(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cadenza", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_same_run_writes_the_same_payloads(name: str, tmp_path: Path) -> None:
    done = cadenza("run", str(RUNS[name]), "--events", "--run-id", name, cwd=tmp_path)
    lines = [line for line in done.stderr.splitlines() if line.startswith("{")]
    now = [msgspec.json.decode(line, type=Event) for line in lines]
    # Streamed text (output, shown live and never recorded) came after the fixtures.
    now = [_without_added(event) for event in now if event.type != "output"]
    before = read(HERE / f"{name}.ndjson")
    # Steps that run at once interleave differently: the same events, as a multiset.
    assert _written(now) == _expected(before)
    # A scripted agent's calls take its replies in order, each once.
    for positions in _script_positions(now).values():
        assert positions == list(range(len(positions)))
    # Each of the coordinator agent's wakes starts and ends, one after the other.
    wakes = _wakes(now)
    assert wakes[0::2] == [("start", sender) for _, sender in wakes[1::2]]
    assert [phase for phase, _ in wakes[1::2]] == ["end"] * (len(wakes) // 2)


@pytest.fixture
def waiting_store(tmp_path: Path) -> Path:
    shutil.copy(HERE / "waiting.db", tmp_path / "waiting.db")
    return tmp_path / "waiting.db"


def test_a_stored_run_shows_as_it_was_written(tmp_path: Path) -> None:
    shutil.copy(HERE / "resumed.db", tmp_path / "resumed.db")
    shown = cadenza("runs", "show", "waiting", "--events", "--store", "resumed.db", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == (HERE / "resumed.ndjson").read_text()


def test_a_run_stored_before_resumes_as_it_did_then(waiting_store: Path) -> None:
    where = ("--store", str(waiting_store))
    cwd = waiting_store.parent
    answer = cadenza("signal", "waiting", "approve", "--data", '{"ok": true}', *where, cwd=cwd)
    assert answer.returncode == 0, answer.stderr
    resumed = cadenza("resume", "waiting", "--json", *where, cwd=cwd)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "completed"
    shown = cadenza("runs", "show", "waiting", "--events", *where, cwd=cwd)
    now = [msgspec.json.decode(line, type=Event) for line in shown.stdout.splitlines()]
    # What ran after the resume (``ship``) has zenflow's later keys: apart from them,
    # re-stated decisions were recognised (none twice): the same log as then.
    now = [_without_added(event) for event in now]
    assert _written(now) == _expected(read(HERE / "resumed.ndjson"))
    assert [e.seq for e in now] == list(range(1, len(now) + 1))


# -- every event type the code emits has its entry ------------------------------------


def _emitted() -> Iterator[tuple[Path, str, ast.expr | None]]:
    """(file, event type, the ``data=`` expression) of every emit in the package."""
    for path, kind, data in _emitted_nodes(SOURCE):
        module = ".".join(path.relative_to(SOURCE.parent).with_suffix("").parts)
        yield path, _resolve(kind, module), data


def _emitted_nodes(source: Path) -> Iterator[tuple[Path, ast.expr, ast.expr | None]]:
    """(file, the type's expression, the ``data=`` expression) of every emit under ``source``."""
    for path in sorted(source.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            kind: ast.expr | None = None
            data = next((k.value for k in node.keywords if k.arg == "data"), None)
            journal = path.name == "_journal.py" or (
                isinstance(func, ast.Attribute) and ast.unparse(func.value).endswith("journal")
            )
            if (
                journal
                and isinstance(func, ast.Attribute)
                and func.attr in ("emit", "_record", "broadcast")
            ):
                kind = node.args[0]
            elif isinstance(func, ast.Name) and func.id == "Event":
                kind = next((k.value for k in node.keywords if k.arg == "type"), None)
                if kind is None and node.args:
                    kind = node.args[0]
            if kind is not None:
                yield path, kind, data


def _resolve(node: ast.expr, module: str) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "EventType":
        return str(getattr(EventType, node.attr))
    if isinstance(node, ast.Name):
        value = vars(importlib.import_module(module)).get(node.id)
        if isinstance(value, str):
            return value
    return f"<unresolved {ast.unparse(node)}>"


def test_every_emitted_event_type_has_a_payload_entry() -> None:
    emitted = {kind for _, kind, _ in _emitted()}
    unresolved = {k for k in emitted if k.startswith("<unresolved")}
    # Only the journal passes on a type it was given: `emit`'s own Event, `relay`.
    assert unresolved == {"<unresolved type>", "<unresolved event.type>"}
    emitted -= unresolved
    assert emitted - (set(PAYLOADS) | NO_PAYLOAD) == set()
    assert (set(PAYLOADS) | NO_PAYLOAD) - emitted == set()
    assert not set(PAYLOADS) & NO_PAYLOAD


def test_an_emit_names_the_struct_of_its_type() -> None:
    """Where ``data=`` builds its Struct in the call, the Struct is its type's."""
    names = {kind.__name__: kind.event_type for kind in PAYLOADS.values()}
    checked = 0
    for path, kind, data in _emitted():
        assert not isinstance(data, ast.Dict), f"{path}: {kind} with a dict, not its Struct"
        if isinstance(data, ast.Call) and isinstance(data.func, ast.Name):
            built = data.func.id
            if built in names:
                assert names[built] == kind, f"{path}: {kind} with {built}"
                checked += 1
    assert checked >= 10


# -- one place spells the event types: `EventType` ------------------------------------


def test_event_type_lists_every_type_once_and_the_registry_agrees() -> None:
    """`EventType` names each type the code can emit; `PAYLOADS` and `NO_PAYLOAD` split it."""
    members = {key: value for key, value in vars(EventType).items() if key.isupper()}
    assert len(set(members.values())) == len(members)  # no type under two names
    assert all(key == value.upper() for key, value in members.items())
    assert EventType.names() == set(PAYLOADS) | NO_PAYLOAD
    for kind, struct in PAYLOADS.items():
        assert struct.event_type == kind


def _spellings(source: Path = SOURCE) -> Iterator[str]:
    """Where src spells an event type other than as ``EventType.NAME``, one line each.

    Emits and ``Event(...)`` that take their type as a literal or a name of their own;
    a comparison of a ``.type`` (or a ``kind`` read from one) with a literal; a
    module constant holding a type's name; a payload's ``event_type`` not taken
    from `EventType`. zenflow's table (`ZENFLOW`) is zenflow's vocabulary, written
    as its spec writes it, and is not looked at.
    """
    names = EventType.names()
    for path, kind, _ in _emitted_nodes(source):
        passed_on = isinstance(kind, ast.Name) and kind.id == "type"
        passed_on |= ast.unparse(kind) == "event.type"
        if not passed_on and not _is_event_type(kind):
            yield f"{path.relative_to(source.parent)}:{kind.lineno}: emits {ast.unparse(kind)}"
    for path in sorted(source.rglob("*.py")):
        tree = ast.parse(path.read_text())
        where = path.relative_to(source.parent)
        for statement in tree.body:
            if not isinstance(statement, (ast.Assign, ast.AnnAssign)):
                continue
            value = statement.value
            if isinstance(value, ast.Constant) and value.value in names:
                yield f"{where}:{statement.lineno}: a constant {value.value!r}"
        if path.parent.name in ("protocols", "llm"):  # llm: a provider's own stream events
            continue
        for compared in ast.walk(tree):
            if isinstance(compared, ast.Compare) and _reads_a_type(compared):
                for operand in (compared.left, *compared.comparators):
                    for literal in _literals(operand):
                        if literal in names:
                            yield f"{where}:{compared.lineno}: compares with {literal!r}"
    payloads = ast.parse((source / "protocols" / "_payloads.py").read_text())
    for declared in ast.walk(payloads):
        if (
            isinstance(declared, ast.AnnAssign)
            and ast.unparse(declared.target) == "event_type"
            and declared.value is not None
            and not _is_event_type(declared.value)
        ):
            spelt = ast.unparse(declared.value)
            yield f"protocols/_payloads.py:{declared.lineno}: event_type = {spelt}"


def _is_event_type(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and ast.unparse(node.value) == "EventType"
        and hasattr(EventType, node.attr)
    )


def _reads_a_type(node: ast.Compare) -> bool:
    operands = (node.left, *node.comparators)
    return any(
        (isinstance(o, ast.Attribute) and o.attr == "type") or ast.unparse(o) == "kind"
        for o in operands
    )


def _literals(node: ast.expr) -> Iterator[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for element in node.elts:
            yield from _literals(element)


def test_src_spells_every_event_type_through_event_type() -> None:
    """No literal, no constant of a module's own: a renamed type cannot be half renamed."""
    assert list(_spellings()) == []


def test_the_spelling_check_sees_each_way_of_spelling_a_type(tmp_path: Path) -> None:
    """The three spellings the code used before, planted in a copy of a module, are found."""
    planted = tmp_path / "cadenza"
    shutil.copytree(SOURCE, planted, ignore=shutil.ignore_patterns("__pycache__", "static"))
    module = planted / "actors" / "_coordinator.py"
    module.write_text(
        module.read_text()
        + "\n\nNARRATED = 'coordinator_narration'\n"
        + "\n\ndef _planted(journal: Any, event: Any) -> None:\n"
        + "    journal.emit('message_sent', step_id='a')\n"
        + "    if event.type in ('agent_turn', 'x'):\n"
        + "        pass\n"
    )
    found = list(_spellings(planted))
    assert [line.split(": ", 1)[1] for line in found] == [
        "emits 'message_sent'",
        "a constant 'coordinator_narration'",
        "compares with 'agent_turn'",
    ]


def test_the_plain_hot_path_payloads_equal_their_structs() -> None:
    """A loop's iteration events, and a leaf's start, are built as dicts for speed: the
    same, key for key and in order, as their Structs give."""
    from cadenza.actors.run import RunJournal
    from cadenza.protocols import IterationEnd, IterationStart, iteration_end, iteration_start
    from cadenza.store import MemoryRunStore, RunRow

    def same(plain: dict[str, Any], struct: dict[str, Any]) -> bool:
        return list(plain.items()) == list(struct.items())

    assert same(
        iteration_start(3, 10).data, to_data(IterationStart(iteration=3, max_iterations=10))
    )
    assert same(
        iteration_end(3, "failed").data, to_data(IterationEnd(iteration=3, status="failed"))
    )
    store = MemoryRunStore()
    store.begin_run(RunRow("r", "w", None, "running", {}, created_at=0.0, updated_at=0.0))
    journal = RunJournal("r", "w", store)
    seen: list[Event] = []
    journal.subscribe(seen.append)
    journal.leaf_started("a", "command", 2, None, (1, 4))
    journal.leaf_started("b", "command", 2, None, (1, 4))  # the same data, made once
    journal.leaf_started("c", "agent", 1, None, (1, 4))
    expected = to_data(StepStart(kind="command", attempt=2, index=1, total=4))
    assert seen[0].data is not None
    assert same(seen[0].data, expected)
    assert seen[1].data is seen[0].data
    assert seen[2].data == to_data(StepStart(kind="agent", attempt=1, index=1, total=4))
