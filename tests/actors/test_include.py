"""Includes and workflow-level loops: fresh scopes, inputs, outputs, parent.N.step addresses."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests._helpers import run_flow
from tests.conftest import RunYaml, WriteFlow

CHILD = """
name: greeter
inputs:
  who: {type: string}
  count: {type: integer}
  tags: {type: array}
  punct: {type: string, default: "!"}
steps:
  - id: look
    handler: "HANDLERS:look"
  - id: greet
    dependsOn: [look]
    command: 'printf "hello %s x%s %s%s" "$WHO" "$COUNT" "$TAGS" "$PUNCT"'
    env:
      WHO: "{{ inputs.who }}"
      COUNT: "{{ inputs.count + 1 }}"
      TAGS: "{{ inputs.tags[1].name }}"
      PUNCT: "{{ inputs.punct }}"
output: "{'greeting': steps.greet.content, 'sawParent': steps.look.content}"
"""


def write_child(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(textwrap.dedent(text))


async def test_an_include_runs_the_child_in_a_fresh_scope_with_rendered_inputs(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """Inputs are rendered in the parent (keeping types), defaults fill in, output is the result."""
    path = write_flow(
        """
        name: parent
        includes:
          greeter: child.yaml
        steps:
          - id: build
            handler: "HANDLERS:build"
          - id: hello
            dependsOn: [build]
            include: greeter
            inputs:
              who: "{{ steps.build.result.name }}"
              count: "{{ steps.build.result.count }}"
              tags: [{name: "a"}, {name: "{{ steps.build.result.name }}-tag"}]
        output: "steps.hello.result.greeting"
        """,
        handlers="""
        def build(ctx):
            return {"name": "ada", "count": 2}
        def look(ctx):
            return "saw build" if "build" in ctx.steps else "no parent steps"
        """,
    )
    module = path.read_text().split('handler: "')[1].split(":")[0]
    write_child(tmp_path, "child.yaml", CHILD.replace("HANDLERS", module))
    result = await run_flow(path)
    assert result.status == "completed", result.error
    assert result.output == "hello ada x3 ada-tag!"
    assert result.steps["hello.look"].content == "no parent steps"
    assert result.steps["hello.greet"].status == "completed"
    assert result.steps["hello"].result == {
        "greeting": "hello ada x3 ada-tag!",
        "sawParent": "no parent steps",
    }


async def test_without_output_the_content_is_the_last_declared_step_that_ran(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """A child with no output gives the content of its last declared step that ran."""
    write_child(
        tmp_path,
        "plain.yaml",
        """
        name: plain
        steps:
          - id: first
            command: "echo first"
          - id: skipped
            dependsOn: [first]
            condition: "false"
            command: "echo never"
        """,
    )
    path = write_flow("name: p\nsteps:\n  - id: sub\n    include: plain.yaml\n")
    result = await run_flow(path)
    assert result.status == "completed", result.error
    assert result.steps["sub"].content == "first\n"
    assert result.steps["sub.skipped"].status == "skipped"
    assert result.steps["sub"].result is None


async def test_bad_include_inputs_fail_the_include_step(run_yaml: RunYaml, tmp_path: Path) -> None:
    """An input of the wrong type fails the include step, naming the input."""
    write_child(
        tmp_path,
        "typed.yaml",
        """
        name: typed
        inputs:
          n: {type: integer}
        steps:
          - id: use
            command: "echo $N"
            env: {N: "{{ inputs.n }}"}
        """,
    )
    result = await run_yaml(
        """
        name: p
        steps:
          - id: sub
            include: typed.yaml
            inputs: {n: "not a number {{ 1 }}"}
        """
    )
    assert result.status == "failed"
    error = result.steps["sub"].error
    assert error is not None
    assert "'n'" in error.message
    assert "sub.use" not in result.steps


async def test_an_included_root_loop_iterates_as_parent_n_step(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """A child's root loop runs at parent.N.step with a fresh steps scope per iteration."""
    path = write_flow(
        """
        name: p
        steps:
          - id: tries
            include: retry.yaml
            inputs: {goal: 2}
          - id: after
            dependsOn: [tries]
            handler: "HANDLERS:after"
        """,
        handlers="""
        def attempt(ctx):
            return {"n": ctx.iteration, "fresh": "check" not in ctx.steps}
        def after(ctx):
            return ctx.steps["tries"].content
        """,
    )
    module = path.read_text().split('handler: "')[1].split(":")[0]
    write_child(
        tmp_path,
        "retry.yaml",
        f"""
        name: retry
        inputs:
          goal: {{type: integer}}
        loop:
          maxIterations: 5
          until: "steps.check.result.n == inputs.goal"
        steps:
          - id: check
            handler: "{module}:attempt"
        output: "'reached ' + string(steps.check.result.n)"
        """,
    )
    result = await run_flow(path)
    assert result.status == "completed", result.error
    assert [result.steps[f"tries.{n}.check"].result for n in range(3)] == [
        {"n": 0, "fresh": True},
        {"n": 1, "fresh": True},
        {"n": 2, "fresh": True},
    ]
    assert "tries.3.check" not in result.steps
    assert result.loops["tries"].termination_reason == "until"
    assert result.steps["tries"].content == "reached 2"
    assert result.steps["after"].content == "reached 2"


async def test_a_looped_include_runs_the_child_once_per_iteration(
    run_yaml: RunYaml, tmp_path: Path
) -> None:
    """loop on an include step repeats the whole child: parent.N.<child step>."""
    write_child(
        tmp_path,
        "once.yaml",
        """
        name: once
        steps:
          - id: say
            command: "echo said"
        """,
    )
    result = await run_yaml(
        "name: p\nsteps:\n  - id: twice\n    include: once.yaml\n    loop: {maxIterations: 2}\n"
    )
    assert result.status == "completed", result.error
    assert result.steps["twice.1.say"].content == "said\n"
    assert result.steps["twice.1"].content == "said\n"


async def test_a_workflow_level_loop_reruns_the_whole_dag(run_yaml: RunYaml) -> None:
    """A root loop: steps at loop.N.<id>, until over the iteration, output over the last one."""
    result = await run_yaml(
        """
        name: again
        loop:
          maxIterations: 4
          until: "steps.score.result.value >= 20"
        steps:
          - id: work
            handler: "HANDLERS:work"
          - id: score
            dependsOn: [work]
            handler: "HANDLERS:score"
        output: "steps.score.result.value"
        """,
        handlers="""
        def work(ctx):
            return str(ctx.iteration)
        def score(ctx):
            return {"value": 10 * int(ctx.steps["work"].content)}
        """,
    )
    assert result.status == "completed", result.error
    assert result.output == 20
    assert result.steps["loop.2.score"].result == {"value": 20}
    assert "loop.3.work" not in result.steps
    assert result.loops["loop"].iterations == 3
    assert result.loops["loop"].termination_reason == "until"
    assert result.steps["loop"].status == "completed"
