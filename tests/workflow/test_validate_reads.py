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


REFUSED = {
    # A step read without dependsOn names the missing dependency.
    "read-without-dependency": (
        """name: x
steps:
  - id: one
    command: echo one
  - id: two
    command: cat
    stdin: "{{ steps.one.content }}"
""",
        (7, "steps[1].stdin"),
        ["'one' is not among this step's dependencies: add it to dependsOn"],
    ),
    # An unknown step id suggests the close one.
    "unknown-step": (
        """name: x
steps:
  - {id: build, command: echo built}
  - id: ship
    dependsOn: [build]
    condition: "steps.biuld.status == 'completed'"
    command: echo shipped
""",
        (6, "steps[1].condition"),
        ["no step has the id 'biuld'", "did you mean 'build'"],
    ),
    # An undeclared input is refused.
    "undeclared-input": (
        """name: x
inputs:
  topic: {type: string}
steps:
  - id: say
    command: cat
    stdin: "{{ inputs.topc }}"
""",
        (7, "steps[0].stdin"),
        ["declares no input 'topc'", "did you mean 'topic'"],
    ),
    # `step` for `steps` is an unknown variable.
    "step-for-steps": (
        """name: x
steps:
  - {id: one, command: echo one}
  - id: two
    dependsOn: [one]
    condition: "step.one.status == 'completed'"
    command: echo two
""",
        (6, "steps[1].condition"),
        ["did you mean steps.one?"],
    ),
    # Comparing a step's text with a number is refused.
    "text-compared-with-a-number": (
        """name: x
steps:
  - {id: a, command: echo 5}
  - id: b
    dependsOn: [a]
    condition: "steps.a.content > 3"
    command: echo big
""",
        (6, "steps[1].condition"),
        ["steps.a.content is text", "int(steps.a.content)"],
    ),
    # An output reading a field no step has is refused.
    "output-reads-no-such-field": (
        """name: x
steps:
  - {id: a, command: echo 5}
output: "steps.a.output"
""",
        (4, "output"),
        ["a step has only content, result and status"],
    ),
}


@pytest.mark.parametrize(("text", "where", "words"), REFUSED.values(), ids=REFUSED.keys())
def test_a_read_that_would_fail_at_run_time_is_one_located_problem(
    text: str, where: tuple[int, str], words: list[str], tmp_path: Path
) -> None:
    problem = only(text, tmp_path)
    assert (problem.line, problem.path) == where
    for word in words:
        assert word in problem.message


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
