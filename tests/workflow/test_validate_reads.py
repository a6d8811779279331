"""`cadenza validate` catches at load what it can know at load (issue 15 item 3).

Each of these used to pass validation and fail at run time, some only after
all the other work was done. Each is now a located problem.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cadenza.workflow import Problem, validate_file
from tests._helpers import assert_refused, cadenza


def problems(text: str, tmp_path: Path) -> list[Problem]:
    path = tmp_path / "flow.yaml"
    path.write_text(text)
    return validate_file(path)


def only(text: str, tmp_path: Path) -> Problem:
    (problem,) = problems(text, tmp_path)
    return problem


def test_a_step_read_without_depends_on_names_the_missing_dependency(tmp_path: Path) -> None:
    problem = only(
        """name: x
steps:
  - id: one
    command: echo one
  - id: two
    command: cat
    stdin: "{{ steps.one.content }}"
""",
        tmp_path,
    )
    assert (problem.line, problem.path) == (7, "steps[1].stdin")
    assert "'one' is not among this step's dependencies: add it to dependsOn" in problem.message


def test_a_transitive_dependency_may_be_read(tmp_path: Path) -> None:
    text = """name: x
steps:
  - {id: one, command: echo one}
  - {id: two, command: echo two, dependsOn: [one]}
  - id: three
    dependsOn: [two]
    command: cat
    stdin: "{{ steps.one.content }} {{ steps.two.content }}"
"""
    assert problems(text, tmp_path) == []


def test_an_unknown_step_id_suggests_the_close_one(tmp_path: Path) -> None:
    problem = only(
        """name: x
steps:
  - {id: build, command: echo built}
  - id: ship
    dependsOn: [build]
    condition: "steps.biuld.status == 'completed'"
    command: echo shipped
""",
        tmp_path,
    )
    assert (problem.line, problem.path) == (6, "steps[1].condition")
    assert "no step has the id 'biuld'" in problem.message
    assert "did you mean 'build'" in problem.message


def test_an_undeclared_input_is_refused(tmp_path: Path) -> None:
    problem = only(
        """name: x
inputs:
  topic: {type: string}
steps:
  - id: say
    command: cat
    stdin: "{{ inputs.topc }}"
""",
        tmp_path,
    )
    assert (problem.line, problem.path) == (7, "steps[0].stdin")
    assert "declares no input 'topc'" in problem.message
    assert "did you mean 'topic'" in problem.message


def test_step_for_steps_is_an_unknown_variable(tmp_path: Path) -> None:
    problem = only(
        """name: x
steps:
  - {id: one, command: echo one}
  - id: two
    dependsOn: [one]
    condition: "step.one.status == 'completed'"
    command: echo two
""",
        tmp_path,
    )
    assert (problem.line, problem.path) == (6, "steps[1].condition")
    assert "did you mean steps.one?" in problem.message


def test_comparing_a_step_text_with_a_number_is_refused(tmp_path: Path) -> None:
    problem = only(
        """name: x
steps:
  - {id: a, command: echo 5}
  - id: b
    dependsOn: [a]
    condition: "steps.a.content > 3"
    command: echo big
""",
        tmp_path,
    )
    assert (problem.line, problem.path) == (6, "steps[1].condition")
    assert "steps.a.content is text" in problem.message
    assert "int(steps.a.content)" in problem.message


def test_output_reading_a_field_no_step_has_is_refused(tmp_path: Path) -> None:
    problem = only(
        """name: x
steps:
  - {id: a, command: echo 5}
output: "steps.a.output"
""",
        tmp_path,
    )
    assert (problem.line, problem.path) == (4, "output")
    assert "a step has only content, result and status" in problem.message


def test_a_handler_module_that_exists_nowhere_is_refused_without_importing(
    tmp_path: Path,
) -> None:
    (tmp_path / "present.py").write_text("raise SystemExit('imported at load!')\n")
    problem = only(
        """name: x
steps:
  - {id: a, handler: "nomodule:fn"}
  - {id: b, handler: "present:fn"}
""",
        tmp_path,
    )
    assert (problem.line, problem.path) == (3, "steps[0].handler")
    assert "no module 'nomodule'" in problem.message


def test_the_cli_prints_the_location_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "flow.yaml"
    path.write_text("name: x\nsteps:\n  - {id: a, command: cat, stdin: '{{ steps.b.content }}'}\n")
    assert_refused(cadenza("validate", str(path), cwd=tmp_path), f"{path}:3:")


@pytest.mark.parametrize(
    "expression",
    ["steps[name].content", "steps.a.result.score > 3", "size(steps.a.content) > 3"],
)
def test_what_cannot_be_known_at_load_is_left_to_run_time(expression: str, tmp_path: Path) -> None:
    text = f"""name: x
inputs:
  name: {{type: string, default: a}}
steps:
  - {{id: a, command: echo 5}}
  - id: b
    dependsOn: [a]
    condition: "{expression.replace("name", "inputs.name")}"
    command: echo ok
"""
    assert problems(text, tmp_path) == []
