"""Loading workflow files: safe YAML, positions, caps, includes and the public API."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

import cadenza.workflow
from cadenza.workflow import (
    LoadedWorkflow,
    Problem,
    WorkflowError,
    load_workflow,
    load_workflow_text,
    validate_file,
)

FIXTURES = Path(__file__).parent / "fixtures"
VALID = FIXTURES / "valid"
INVALID = FIXTURES / "invalid"


def only_problem(text: str, tmp_path: Path, name: str = "flow.yaml") -> Problem:
    path = tmp_path / name
    path.write_text(text)
    problems = validate_file(path)
    assert len(problems) == 1, "\n".join(map(str, problems))
    return problems[0]


@pytest.mark.parametrize(
    "name",
    ["full.yaml", "child.yaml", "zenflow.yaml", "equivalent.yaml", "equivalent.json"],
)
def test_valid_fixtures_load(name: str) -> None:
    """Valid documents load without problems."""
    loaded = load_workflow(VALID / name)
    assert isinstance(loaded, LoadedWorkflow)
    assert validate_file(VALID / name) == []


def test_full_workflow_is_loaded_with_its_references() -> None:
    """@file texts are read in; includes are loaded and keyed as written."""
    loaded = load_workflow(VALID / "full.yaml")
    workflow = loaded.workflow
    assert workflow.agents["coder"].prompt == "You write small, tested Python.\n"
    assert workflow.steps[0].instructions == "Design a module about {{ inputs.topic }}.\n"
    assert loaded.path == (VALID / "full.yaml").absolute()
    assert loaded.base_dir == VALID.absolute()
    assert set(loaded.includes) == {
        "child",
        "child.yaml",
        "planner.yaml",
        "actor.yaml",
        "evaluator.yaml",
    }
    child = loaded.includes["child"]
    assert child is loaded.includes["child.yaml"]  # one file, loaded once
    assert child.workflow.name == "test-fix"
    assert child.workflow.loop is not None
    assert child.workflow.loop.max_iterations == 5


def test_yaml_and_json_documents_are_the_same_workflow() -> None:
    """A YAML document and its JSON twin (tab-indented) load to equal workflows."""
    from_yaml = load_workflow(VALID / "equivalent.yaml").workflow
    from_json = load_workflow(VALID / "equivalent.json").workflow
    assert from_yaml == from_json
    assert msgspec.to_builtins(from_yaml) == msgspec.to_builtins(from_json)


def test_plain_scalars_follow_yaml_1_2() -> None:
    """`on` and `yes` stay strings, `1e3` is a number, as in JSON and zenflow's parser."""
    loaded = load_workflow_text(
        "name: scalars\n"
        "inputs:\n"
        "  n: {type: number, default: 1e3}\n"
        "  s: {type: string, default: yes}\n"
        "steps:\n"
        "  - id: a\n"
        "    command: echo\n"
        "    env: {FLAG: on, OFF: off, HEX: '0x1F'}\n"
    )
    workflow = loaded.workflow
    assert workflow.inputs["n"].default == 1000.0
    assert workflow.inputs["s"].default == "yes"
    assert workflow.steps[0].env == {"FLAG": "on", "OFF": "off", "HEX": "0x1F"}


def test_zenflow_tool_input_spelling_is_accepted() -> None:
    """zenflow's fixtures write `tool_input`; it means `toolInput`."""
    step = load_workflow(VALID / "zenflow.yaml").workflow.steps[1]
    assert step.tool == "read"
    assert step.tool_input == {"path": '$steps["debate"].content'}


def test_load_workflow_text_resolves_in_base_dir() -> None:
    """Text documents resolve includes and @file references in base_dir."""
    loaded = load_workflow_text(
        "name: t\nsteps:\n  - id: c\n    include: child.yaml\n    inputs: {workdir: x}\n",
        base_dir=VALID,
    )
    assert loaded.path is None
    assert loaded.includes["child.yaml"].workflow.name == "test-fix"


def test_broken_yaml_is_one_located_problem(tmp_path: Path) -> None:
    """A YAML syntax error is one problem at the scanner's line and column, in words."""
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\nsteps:\n  - id: a\n    command: [echo\n")
    (problem,) = validate_file(path)
    assert (problem.line, problem.path) == (5, "")
    assert problem.message.startswith("invalid YAML: ")


def test_a_tab_is_named_as_a_tab() -> None:
    """A tab where YAML wants indentation is called a tab, at its place."""
    (problem,) = validate_file(INVALID / "broken-yaml.yaml")
    assert (problem.line, problem.column, problem.path) == (4, 1, "")
    assert problem.message.startswith("a tab character: YAML indents with spaces only")


def test_duplicate_keys_name_both_locations() -> None:
    """A repeated key is reported where it repeats, naming where it first was."""
    (problem,) = validate_file(INVALID / "duplicate-key.yaml")
    assert (problem.line, problem.column, problem.path) == (5, 5, "steps[0].command")
    assert "duplicate key 'command'" in problem.message
    assert "line 4, column 5" in problem.message


@pytest.mark.parametrize(
    ("fixture", "line", "words"),
    [
        ("python-tag.yaml", 4, ["'!!python/object/apply:os.system'", "not allowed"]),
        ("custom-tag.yaml", 4, ["'!shell'", "not allowed"]),
        ("merge-key.yaml", 5, ["merge keys"]),
        ("two-documents.yaml", 3, ["one YAML document"]),
        ("undefined-alias.yaml", 4, ["*cmd", "no anchor"]),
        ("not-a-mapping.yaml", 1, ["must be a mapping"]),
        ("empty.yaml", 1, ["empty"]),
        ("alias-bomb.yaml", 7, ["too many aliases"]),
    ],
)
def test_unsafe_or_odd_yaml_is_rejected(fixture: str, line: int, words: list[str]) -> None:
    """Tags, merge keys, extra documents, bad aliases and bombs are located problems."""
    (problem,) = validate_file(INVALID / fixture)
    assert problem.line == line, str(problem)
    for word in words:
        assert word in problem.message, str(problem)


def test_recursive_alias_is_rejected(tmp_path: Path) -> None:
    """An alias inside the node it names cannot expand forever."""
    problem = only_problem("name: x\nsteps: &s [*s]\n", tmp_path)
    assert (problem.line, problem.path) == (2, "steps[0]")
    assert "contains it" in problem.message


@pytest.mark.parametrize("opening", ["[", "{a: "])
def test_deep_nesting_fails_fast(opening: str, tmp_path: Path) -> None:
    """10,000 levels of nesting give a located problem, not a RecursionError."""
    closing = "]" if opening == "[" else "}"
    problem = only_problem(f"name: x\nsteps: {opening * 10_000}{closing * 10_000}\n", tmp_path)
    assert problem.line == 2
    # Said in the project's words, whether its cap or PyYAML's own answered first.
    assert problem.message == "the document nests deeper than 128 levels"


def test_huge_file_is_refused(tmp_path: Path) -> None:
    """Files over 1 MiB are refused before they are parsed."""
    text = "name: big\nsteps: [{id: a, command: echo}]\n# " + "x" * (1 << 20) + "\n"
    problem = only_problem(text, tmp_path)
    assert (problem.line, problem.column) == (0, 0)
    assert "1 MiB" in problem.message
    with pytest.raises(WorkflowError, match="1 MiB"):
        load_workflow_text(text)


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 are a problem at their line."""
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"name: x\nsteps:\n  - id: caf\xe9\n")
    (problem,) = validate_file(path)
    assert (problem.line, problem.message) == (3, "the file is not UTF-8 text")


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    """A missing file is a WorkflowError whose problem names the path."""
    missing = tmp_path / "no-such-file.yaml"
    with pytest.raises(WorkflowError) as caught:
        load_workflow(missing)
    (problem,) = caught.value.problems
    assert problem.file == str(missing)
    assert "no-such-file.yaml" in str(caught.value)
    assert (problem.line, problem.column) == (0, 0)


def test_workflow_error_lists_every_problem() -> None:
    """WorkflowError carries the problems and prints them one per line."""
    with pytest.raises(WorkflowError) as caught:
        load_workflow(INVALID / "dep-cycle.yaml")
    error = caught.value
    assert isinstance(error, cadenza.errors.CadenzaError)
    assert str(error) == "\n".join(str(p) for p in error.problems)
    assert "cycle" in str(error)


def test_problem_text_form() -> None:
    """A problem reads FILE:LINE:COL: path: message, without the path when empty."""
    assert str(Problem("f.yaml", 3, 7, "steps[0].id", "bad")) == "f.yaml:3:7: steps[0].id: bad"
    assert str(Problem("f.yaml", 0, 0, "", "missing")) == "f.yaml:0:0: missing"


def test_block_scalar_errors_are_located_inside_the_block(tmp_path: Path) -> None:
    """A template error in a literal block points at its line inside the block."""
    problem = only_problem(
        "name: x\nsteps:\n  - id: a\n    instructions: |\n      Fine line.\n      Bad {{ (x }}\n",
        tmp_path,
    )
    assert (problem.line, problem.path) == (6, "steps[0].instructions")
    assert problem.column > 7


def test_exports_are_sorted_and_importable() -> None:
    """__all__ is sorted (isort style: constants, classes, functions) and complete."""
    names = cadenza.workflow.__all__
    assert names == sorted(names, key=lambda n: (not n.isupper(), not n[:1].isupper(), n))
    assert all(hasattr(cadenza.workflow, name) for name in names)
