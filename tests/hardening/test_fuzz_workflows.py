"""Fuzzed and hostile workflow documents: every one a located problem, never a crash.

Three sources of bad documents: a grammar of workflow-shaped data (real keys, wrong
types, random extras) written as YAML or JSON; byte-level mutations of the valid
fixtures; and a fixed set of known attacks (alias bombs, 10,000-deep nesting, 10 MB
files, ``!!python/object`` tags, duplicate keys, documents built to make a validator
quadratic). Bounds are the issue's: each under 1 s of CPU and 100 MB. A sample goes
through the real ``cadenza validate`` and ``cadenza run`` processes for exit code 2.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from cadenza.workflow import Problem, WorkflowError, load_workflow, validate_file

from .conftest import CPU_LIMIT, FUZZ, MEMORY_LIMIT, WALL_LIMIT, run_child

ROOT = Path(__file__).parents[2]
VALID = sorted((ROOT / "tests" / "workflow" / "fixtures" / "valid").glob("*.yaml"))
CANARY = "cadenza-canary-created"


def located(problem: Problem, name: str) -> bool:
    """A problem names the file, and a line and column (0:0 only for a whole-file problem)."""
    if problem.file != name or not problem.message:
        return False
    if (problem.line, problem.column) == (0, 0):
        return problem.path == ""
    return problem.line >= 1 and problem.column >= 1


def check_document(path: Path) -> list[Problem]:
    """Validates ``path`` within the bounds; a clean result must also load."""
    started_cpu, started = time.process_time(), time.monotonic()
    problems = validate_file(path)
    cpu, wall = time.process_time() - started_cpu, time.monotonic() - started
    assert cpu < CPU_LIMIT, f"{path.name}: {cpu:.2f}s of CPU"
    assert wall < WALL_LIMIT, f"{path.name}: {wall:.2f}s"
    for problem in problems:
        assert located(problem, str(path)), problem
    if not problems:  # the two entry points agree
        load_workflow(path)
    elif path.stat().st_size < 100_000:  # (a second pass over the big ones adds nothing)
        with pytest.raises(WorkflowError):
            load_workflow(path)
    return problems


# -- grammar-based documents ---------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.sampled_from(["1s", "5m", "ls", "{{ inputs.x }}", "steps.a.content", "END", "@x.md"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
STEP_IDS = st.sampled_from(["a", "b", "build", "dev-cycle", "c_1", "Bad", ""])
CEL = st.one_of(
    st.sampled_from(
        [
            "true",
            "steps.a.status == 'completed'",
            "size(inputs.list) > 2",
            "[1,2,3].map(x, [1,2].map(y, x + y))",
            "inptus.topic",
            "((((",
            "content.contains('OK')",
            "iteration >= 3",
        ]
    ),
    st.text(max_size=40),
)


def maybe(key: str, strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(st.just({}), strategy.map(lambda value: {key: value}))


def merged(*parts: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    def merge(dicts: tuple[dict[str, Any], ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for part in dicts:
            out.update(part)
        return out

    return st.tuples(*parts).map(merge)


LOOPS = merged(
    maybe("maxIterations", st.one_of(st.integers(-2, 5), VALUES)),
    maybe("until", CEL),
    maybe("forEach", st.one_of(CEL, st.lists(SCALARS, max_size=3))),
    maybe("steps", st.deferred(lambda: st.lists(STEPS, max_size=2))),
    maybe("onMaxIterations", st.sampled_from(["fail", "returnLast", "explode"])),
)
GRAPHS = merged(
    maybe("start", st.sampled_from(["a", "b", "END", "missing"])),
    maybe(
        "states",
        st.dictionaries(
            st.sampled_from(["a", "b", "END", "1x"]),
            st.deferred(lambda: STEPS).map(lambda s: {k: v for k, v in s.items() if k != "id"}),
            max_size=3,
        ),
    ),
    maybe(
        "edges",
        st.lists(
            merged(
                maybe("from", st.sampled_from(["a", "b", "END"])),
                maybe("to", st.sampled_from(["a", "b", "END", "zz"])),
                maybe("condition", CEL),
            ),
            max_size=3,
        ),
    ),
    maybe("maxSteps", st.integers(-1, 3)),
)
STEPS: st.SearchStrategy[dict[str, Any]] = merged(
    maybe("id", STEP_IDS),
    maybe("command", st.one_of(st.text(max_size=20), st.lists(st.text(max_size=5), max_size=3))),
    maybe("handler", st.sampled_from(["mod:fn", "nope", "a.b:c"])),
    maybe("agent", st.sampled_from(["coder", "ghost"])),
    maybe("instructions", st.text(max_size=30)),
    maybe("dependsOn", st.lists(STEP_IDS, max_size=3)),
    maybe("condition", CEL),
    maybe("timeout", st.sampled_from(["1s", "5m", "10", "-1s", "forever"])),
    maybe("retries", st.one_of(st.integers(-1, 3), SCALARS)),
    maybe("env", st.dictionaries(st.text(max_size=5), st.one_of(st.text(max_size=10), VALUES))),
    maybe("loop", st.one_of(LOOPS, VALUES)),
    maybe("graph", st.one_of(GRAPHS, VALUES)),
    maybe("onError", st.sampled_from(["continue", "stop"])),
    st.dictionaries(st.text(max_size=8), VALUES, max_size=2),
)
WORKFLOWS = merged(
    maybe("name", st.one_of(st.text(max_size=10), VALUES)),
    maybe("version", st.one_of(st.just(1), SCALARS)),
    maybe(
        "agents",
        st.dictionaries(
            st.sampled_from(["coder", "judge", "Bad"]),
            merged(
                maybe("model", st.sampled_from(["scripted:x", "openai:gpt", "nope"])),
                maybe("resultSchema", VALUES),
                maybe("maxTurns", st.integers(-1, 3)),
            ),
            max_size=2,
        ),
    ),
    maybe("inputs", st.dictionaries(st.text(max_size=5), VALUES, max_size=2)),
    maybe("options", st.dictionaries(st.sampled_from(["maxConcurrency", "timeout"]), VALUES)),
    maybe("steps", st.one_of(st.lists(STEPS, max_size=4), VALUES)),
    maybe("output", CEL),
    maybe("loop", LOOPS),
)


@FUZZ
@given(document=WORKFLOWS, as_json=st.booleans())
def test_grammar_documents_give_located_problems(
    document: dict[str, Any], as_json: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Workflow-shaped documents with wrong types, bad names and bad CEL never crash."""
    directory = tmp_path_factory.mktemp("grammar")
    if as_json:
        path = directory / "flow.json"
        path.write_text(json.dumps(document, default=str))
    else:
        path = directory / "flow.yaml"
        path.write_text(yaml.safe_dump(document, allow_unicode=True))
    check_document(path)


# -- mutated valid documents ---------------------------------------------------------

TOKENS = [
    b"&a ",
    b"*a",
    b"!!python/object/apply:os.system ['touch " + CANARY.encode() + b"'] ",
    b"<<: ",
    b"{",
    b"]",
    b"\t",
    b"\x00",
    b"\xff\xfe",
    b"\xef\xbb\xbf",
    b": ",
    b"- ",
    b"\n---\n",
    b"'",
    b'"',
    b"{{",
    b"}}",
    b"%YAML 1.1\n",
    b"? ",
    b"|\n",
]


@st.composite
def mutations(draw: st.DrawFn) -> bytes:
    source = draw(st.sampled_from(VALID)).read_bytes()
    data = bytearray(source)
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["flip", "insert", "delete", "token", "dup-line"]))
        if action == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif action == "delete":
            del data[at : at + draw(st.integers(1, 20))]
        elif action == "token":
            data[at:at] = draw(st.sampled_from(TOKENS))
        else:
            lines = bytes(data).split(b"\n")
            index = draw(st.integers(0, len(lines) - 1))
            lines.insert(index, lines[index])
            data = bytearray(b"\n".join(lines))
    return bytes(data)


@FUZZ
@given(data=mutations(), suffix=st.sampled_from([".yaml", ".json"]))
def test_mutated_documents_give_located_problems(
    data: bytes, suffix: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Valid fixtures with flipped bits, stray tokens and duplicated lines never crash."""
    directory = tmp_path_factory.mktemp("mutated")
    path = directory / f"flow{suffix}"
    path.write_bytes(data)
    check_document(path)
    assert not (directory / CANARY).exists()


# -- known attacks -------------------------------------------------------------------


def alias_bomb() -> str:
    """Billion laughs: nine levels of nine aliases each."""
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, 9):
        prev, name = chr(ord("a") + level - 1), chr(ord("a") + level)
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
    return "\n".join([*lines, "name: bomb", "steps: [{id: s, command: ls}]"]) + "\n"


def typo_steps(count: int) -> str:
    rows = (f"  - {{id: s{i}, command: ls, dependsOn: [t{i}], agent: g{i}}}" for i in range(count))
    return "name: x\nagents: {a: {model: 'scripted:x'}}\nsteps:\n" + "\n".join(rows) + "\n"


def nested_loops() -> str:
    """100 loops of 100 steps, each with a typo'd dependency (10,000 'did you mean's)."""
    lines = ["name: x", "steps:"]
    for i in range(100):
        lines += [f"  - id: l{i}", "    loop:", "      maxIterations: 2", "      steps:"]
        lines += [f"        - {{id: s{j}, command: ls, dependsOn: [t{j}]}}" for j in range(100)]
    return "\n".join(lines) + "\n"


def many_expressions(count: int) -> str:
    rows = (
        f'  - {{id: s{i}, command: ls, condition: "inputs.a == {i} || inputs.a > {i}"}}'
        for i in range(count)
    )
    return "name: x\ninputs: {a: {type: integer, default: 1}}\nsteps:\n" + "\n".join(rows) + "\n"


HOSTILE: dict[str, Callable[[], str | bytes]] = {
    "alias-bomb.yaml": alias_bomb,
    "self-alias.yaml": lambda: "name: &n x\nsteps: &s [{id: a, command: *s}]\n",
    "deep-flow.yaml": lambda: "name: x\nsteps: " + "[" * 10_000 + "]" * 10_000 + "\n",
    "deep-map.yaml": lambda: "name: x\nsteps: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n",
    "deep-json.json": lambda: (
        '{"name": "x", "steps": ' + '{"a":' * 10_000 + "1" + "}" * 10_000 + "}"
    ),
    "deep-dashes.yaml": lambda: "name: x\nsteps:\n  " + "- " * 10_000 + "x\n",
    "deep-indent.yaml": lambda: (
        "name: x\nsteps:\n" + "".join(" " * i + "- \n" for i in range(1400))
    ),
    "ten-megabytes.yaml": lambda: "name: x\nsteps: [{id: a, command: ls}]\n#" + "x" * 10_485_760,
    "ten-megabytes.json": lambda: '{"name": "' + "x" * 10_485_760 + '", "steps": []}',
    "python-object.yaml": lambda: (
        f"name: !!python/object/apply:os.system ['touch {CANARY}']\n"
        "steps: [{id: a, command: ls}]\n"
    ),
    "python-name.yaml": lambda: "!!python/name:os.system\n",
    "python-tags.yaml": lambda: (
        "name: x\nsteps: [" + ", ".join(["!!python/object:os.Foo {}"] * 5_000) + "]\n"
    ),
    "duplicate-keys.yaml": lambda: (
        "name: a\nname: b\nsteps:\n  - id: s\n    command: ls\n    command: rm -rf /\n"
    ),
    "many-duplicates.yaml": lambda: "name: x\nsteps: []\nbig:\n" + "  k: 1\n" * 40_000,
    "merge-key.yaml": lambda: "base: &b {command: ls}\nname: x\nsteps: [{<<: *b, id: a}]\n",
    "two-documents.yaml": lambda: "name: x\nsteps: [{id: a, command: ls}]\n---\nname: y\n",
    "flat-megabyte.yaml": lambda: "name: x\nsteps: [" + ",".join(["1"] * 524_000) + "]\n",
    "wide-map.yaml": lambda: (
        "name: x\nsteps: []\nbig: {" + ",".join(f"k{i}: 1" for i in range(90_000)) + "}\n"
    ),
    "typo-steps.yaml": lambda: typo_steps(19_000),
    "nested-typos.yaml": nested_loops,
    "many-expressions.yaml": lambda: many_expressions(8_000),
    "nul-byte.yaml": lambda: b"name: x\x00\nsteps: []\n",
    "not-utf8.yaml": lambda: b"name: \xff\xfe\xfd\nsteps: []\n",
    "tabs.yaml": lambda: "name: x\nsteps:\n\t- id: a\n",
    "empty.yaml": lambda: "",
    "scalar.yaml": lambda: "just a string\n",
    "list.json": lambda: "[1, 2, 3]",
    "huge-int.yaml": lambda: (
        "name: x\nversion: " + "9" * 5000 + "\nsteps: [{id: a, command: ls}]\n"
    ),
    "template-command.yaml": lambda: "name: x\nsteps: [{id: a, command: 'echo {{ inputs.x }}'}]\n",
}


def write_hostile(directory: Path, name: str) -> Path:
    content = HOSTILE[name]()
    path = directory / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_documents_are_located_problems(name: str, tmp_path: Path) -> None:
    """Each attack is rejected with located problems, in under 1 s of CPU."""
    problems = check_document(write_hostile(tmp_path, name))
    assert problems, f"{name} was accepted"
    assert not (tmp_path / CANARY).exists()


MEMORY_SAMPLE = [
    "alias-bomb.yaml",
    "deep-flow.yaml",
    "deep-json.json",
    "ten-megabytes.yaml",
    "flat-megabyte.yaml",
    "wide-map.yaml",
    "python-tags.yaml",
    "nested-typos.yaml",
]


def test_hostile_documents_stay_under_100_mb(tmp_path: Path) -> None:
    """Validating the largest attacks in one process raises its peak RSS by under 100 MB."""
    (tmp_path / "ok.yaml").write_text("name: ok\nsteps: [{id: a, command: 'true'}]\n")
    names = [write_hostile(tmp_path, name).name for name in MEMORY_SAMPLE]
    script = (
        "import sys\nfrom cadenza.workflow import validate_file\n"
        "for path in sys.argv[1:]:\n    validate_file(path)\n"
    )
    baseline = run_child(["-c", script, "ok.yaml"], cwd=tmp_path)
    child = run_child(["-c", script, *names], cwd=tmp_path)
    assert baseline.returncode == 0, baseline.stderr[-2000:]
    assert child.returncode == 0, child.stderr[-2000:]
    growth = child.max_rss - baseline.max_rss
    assert growth < MEMORY_LIMIT, f"peak RSS grew by {growth / 2**20:.0f} MiB"


CLI_SAMPLE = [
    "alias-bomb.yaml",
    "deep-flow.yaml",
    "deep-json.json",
    "ten-megabytes.yaml",
    "python-object.yaml",
    "duplicate-keys.yaml",
    "flat-megabyte.yaml",
    "nested-typos.yaml",
    "huge-int.yaml",
]


def test_cli_exits_2_on_hostile_documents(tmp_path: Path) -> None:
    """``cadenza validate`` and ``cadenza run`` exit 2 with located lines, no traceback."""
    names = [write_hostile(tmp_path, name).name for name in CLI_SAMPLE]
    child = run_child(["-m", "cadenza", "validate", *names], cwd=tmp_path)
    assert child.returncode == 2, child.stderr[-2000:]
    assert "Traceback" not in child.stderr, child.stderr[-2000:]
    lines = child.stderr.strip().splitlines()
    assert all(line.split(":", 1)[0] in names for line in lines), lines
    assert {line.split(":", 1)[0] for line in lines} == set(names)
    assert child.stdout == ""
    for name in ("alias-bomb.yaml", "python-object.yaml"):
        run = run_child(["-m", "cadenza", "run", name, "--store", "runs.db"], cwd=tmp_path)
        assert run.returncode == 2, run.stderr[-2000:]
        assert "Traceback" not in run.stderr
        assert all(line.startswith(f"{name}:") for line in run.stderr.strip().splitlines())
    assert not (tmp_path / CANARY).exists()
