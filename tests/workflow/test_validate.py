"""Every validation rule, one fixture each: the message words, the path and the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from cadenza.workflow import (
    Graph,
    Loop,
    State,
    Step,
    Workflow,
    validate_file,
    validate_workflow,
)

FIXTURES = Path(__file__).parent / "fixtures"
INVALID = FIXTURES / "invalid"

# (fixture, line, path, words the message must hold). Each fixture breaks one rule
# and must yield exactly one problem: follow-up noise is a bug too.
RULES: list[tuple[str, int, str, list[str]]] = [
    # zenflow section 11, schema-enforced
    ("missing-name.yaml", 1, "", ["needs 'name'"]),
    ("empty-name.yaml", 1, "name", ["must not be empty"]),
    ("missing-steps.yaml", 1, "", ["needs 'steps'"]),
    ("empty-steps.yaml", 2, "steps", ["must not be empty"]),
    ("too-many-steps.yaml", 2, "steps", ["101", "limit is 100"]),
    ("description-too-long.yaml", 2, "description", ["2001", "limit is 2000"]),
    ("instructions-too-long.yaml", 4, "steps[0].instructions", ["2001", "limit is 2000"]),
    ("bad-step-id.yaml", 3, "steps[0].id", ["'Build'", "^[a-z][a-z0-9_-]{0,63}$"]),
    ("bad-agent-name.yaml", 3, "agents.Coder", ["'Coder'", "must match"]),
    ("unsupported-version.yaml", 2, "version", ["unsupported version 2"]),
    ("negative-max-turns.yaml", 3, "agents.coder.maxTurns", ["at least 0", "-5"]),
    ("temperature-out-of-range.yaml", 5, "agents.coder.temperature", ["at most 2", "2.5"]),
    ("top-p-out-of-range.yaml", 4, "agents.coder.topP", ["at most 1", "1.5"]),
    ("negative-retries.yaml", 5, "steps[0].retries", ["at least 0", "-1"]),
    ("zero-max-iterations.yaml", 6, "steps[0].loop.maxIterations", ["at least 1", "got 0"]),
    ("bad-output-mode.yaml", 7, "steps[0].loop.outputMode", ["'everything'", "cumulative"]),
    ("bad-enum.yaml", 3, "options.onStepFailure", ["'cascad'", "did you mean 'cascade'"]),
    ("bad-duration.yaml", 5, "steps[0].timeout", ["'1.5h'", "duration"]),
    ("negative-max-concurrency.yaml", 3, "options.maxConcurrency", ["at least 0"]),
    ("negative-loop-max-concurrency.yaml", 7, "steps[0].loop.maxConcurrency", ["at least 0"]),
    ("summary-on-repeat-loop.yaml", 7, "steps[0].loop.outputMode", ["belongs to forEach"]),
    ("loop-empty-steps.yaml", 6, "steps[0].loop.steps", ["must not be empty"]),
    ("wrong-type.yaml", 5, "steps[0].retries", ["expected an integer", "'three'"]),
    ("unknown-root-key.yaml", 2, "descripton", ["'descripton'", "did you mean 'description'"]),
    ("typo-key.yaml", 6, "steps[0].loop.maxIteration", ["'maxIteration'", "'maxIterations'"]),
    ("snake-case-key.yaml", 7, "steps[1].depends_on", ["did you mean 'dependsOn'"]),
    ("misplaced-key.yaml", 5, "steps[0].maxIterations", ["belongs under 'loop'"]),
    # Cadenza extensions, schema-level
    ("bad-input-type.yaml", 3, "inputs.topic.type", ["'str'", "did you mean 'string'"]),
    ("input-default-type.yaml", 3, "inputs.rounds.default", ["default", "integer"]),
    ("bad-state-name.yaml", 8, "steps[0].graph.states['2nd']", ["'2nd'", "must match"]),
    ("max-steps-zero.yaml", 6, "steps[0].graph.maxSteps", ["at least 1"]),
    ("graph-missing-start.yaml", 4, "steps[0].graph", ["needs 'start'"]),
    ("control-missing-actor.yaml", 4, "steps[0].control", ["needs 'actor'"]),
    ("control-bad-limits.yaml", 8, "steps[0].control.limits.maxIterations", ["at least 1"]),
    ("bad-handler.yaml", 4, "steps[0].handler", ["'tools.run'", "package.module:function"]),
    # SPEC 1: step kinds
    ("two-kinds.yaml", 6, "steps[0].agent", ["does one thing", "'command'", "'agent'"]),
    ("tool-with-agent.yaml", 7, "steps[0].agent", ["does one thing", "'tool'", "'agent'"]),
    ("nothing-to-do.yaml", 3, "steps[0]", ["nothing to do"]),
    ("loop-steps-with-kind.yaml", 7, "steps[0].loop.steps", ["loop.steps", "'command'"]),
    ("loop-nothing-to-repeat.yaml", 4, "steps[0].loop", ["nothing to repeat"]),
    ("loop-repeats-graph.yaml", 4, "steps[0].loop", ["cannot repeat a graph"]),
    ("tool-input-without-tool.yaml", 5, "steps[0].toolInput", ["toolInput needs tool"]),
    ("include-with-condition.yaml", 6, "steps[0].condition", ["include step", "condition"]),
    ("include-with-context-files.yaml", 6, "steps[0].contextFiles", ["include step"]),
    ("include-with-model.yaml", 6, "steps[0].model", ["include step", "model"]),
    ("inputs-not-include.yaml", 5, "steps[0].inputs", ["include steps only"]),
    ("env-not-command.yaml", 5, "steps[0].env", ["command steps only"]),
    ("template-in-command.yaml", 6, "steps[0].command", ["{{ }}", "env"]),
    ("template-in-command-list.yaml", 8, "steps[0].command[1]", ["{{ }}", "env"]),
    ("empty-command.yaml", 4, "steps[0].command", ["command is empty"]),
    ("bad-template-instructions.yaml", 4, "steps[0].instructions", ["template", "instructions"]),
    ("bad-template-env.yaml", 6, "steps[0].env.X", ["template", "env.X"]),
    ("bad-template-include-inputs.yaml", 6, "steps[0].inputs.objective", ["template"]),
    # SPEC 2: loops
    ("both-modes.yaml", 8, "steps[1].loop.maxIterations", ["forEach", "maxIterations"]),
    ("foreach-with-delay.yaml", 7, "steps[0].loop.delay", ["forEach", "delay"]),
    ("repeat-until-no-max-iterations.yaml", 5, "steps[0].loop", ["needs maxIterations"]),
    ("foreach-empty.yaml", 6, "steps[0].loop.forEach", ["empty list"]),
    ("foreach-constant.yaml", 6, "steps[0].loop.forEach", ["must yield a list", "a string"]),
    ("judge-unknown.yaml", 9, "steps[0].loop.untilAgent", ["'jugde'", "did you mean 'judge'"]),
    ("judge-no-schema.yaml", 9, "steps[0].loop.untilAgent", ["judge", "no resultSchema"]),
    ("judge-done-not-boolean.yaml", 14, "steps[0].loop.untilAgent", ["boolean property 'done'"]),
    ("judge-done-not-required.yaml", 13, "steps[0].loop.untilAgent", ["'done' in required"]),
    ("nesting-too-deep.yaml", 36, "steps[0]" + ".loop.steps[0]" * 8 + ".loop", ["at most 8"]),
    ("root-loop-steps.yaml", 4, "loop.steps", ["workflow-level loop"]),
    ("root-loop-foreach.yaml", 3, "loop.forEach", ["workflow-level loop", "repeat-until"]),
    # SPEC 3: graphs
    ("graph-no-states.yaml", 6, "steps[0].graph.states", ["at least one state"]),
    ("graph-unknown-start.yaml", 5, "steps[0].graph.start", ["'anlyze'", "'analyze'"]),
    ("graph-edge-unknown-state.yaml", 9, "steps[0].graph.edges[0].to", ["unknown state 'b'"]),
    ("graph-edge-from-end.yaml", 10, "steps[0].graph.edges[1].from", ["leave END"]),
    ("graph-state-named-end.yaml", 8, "steps[0].graph.states.END", ["named END"]),
    ("dead-end.yaml", 8, "steps[0].graph.states.limbo", ["'limbo'", "no outgoing edge"]),
    # Scopes and references
    ("unknown-dep.yaml", 6, "steps[1].dependsOn[0]", ["'biuld'", "did you mean 'build'"]),
    ("cross-scope-dep.yaml", 12, "steps[2].dependsOn[0]", ["'inner'", "another scope"]),
    ("duplicate-id.yaml", 5, "steps[1].id", ["duplicate step id 'a'"]),
    ("dep-cycle.yaml", 4, "steps[0].dependsOn", ["cycle", "a -> c -> b -> a"]),
    ("unknown-agent.yaml", 6, "steps[0].agent", ["'codr'", "did you mean 'coder'"]),
    ("coordinator-unknown-agent.yaml", 4, "coordinator.agent", ["'narator'", "'narrator'"]),
    (
        "bad-result-schema.yaml",
        7,
        "agents.coder.resultSchema.properties.summary.type",
        ["not a valid JSON Schema"],
    ),
    ("bad-human-schema.yaml", 6, "steps[0].human.schema.required", ["not a valid JSON Schema"]),
    ("missing-instructions-file.yaml", 4, "steps[0].instructions", ["'prompts/missing.md'"]),
    ("missing-prompt-file.yaml", 4, "agents.coder.prompt", ["'nowhere/coder.md'", "not found"]),
    # SPEC 4: expressions
    ("cel-syntax.yaml", 7, "steps[0].loop.until", ["invalid CEL", "until"]),
    ("cel-syntax-condition.yaml", 7, "steps[1].condition", ["invalid CEL", "condition"]),
    ("condition-constant.yaml", 5, "steps[0].condition", ["true or false", "a string"]),
    ("until-constant.yaml", 7, "steps[0].loop.until", ["true or false", "a number"]),
    (
        "edge-condition-syntax.yaml",
        9,
        "steps[0].graph.edges[0].condition",
        ["invalid CEL", "edge condition"],
    ),
    ("check-expr-syntax.yaml", 9, "steps[0].control.checks[0].expr", ["invalid CEL", "check"]),
    ("output-syntax.yaml", 5, "output", ["invalid CEL", "output"]),
    ("tool-input-cel-syntax.yaml", 6, "steps[0].toolInput.path", ["invalid CEL", "toolInput"]),
    ("tool-input-not-string.yaml", 6, "steps[0].toolInput.b", ["always a number", "string("]),
    # Includes (the including file's side)
    ("include-missing.yaml", 6, "steps[0].include", ["'workflows/deploy.yaml'", "not found"]),
    ("control-missing-workflow.yaml", 6, "steps[0].control.actor", ["'actors/none.yaml'"]),
    ("include-unknown-input.yaml", 7, "steps[0].inputs.wrokdir", ["did you mean 'workdir'"]),
    ("include-missing-input.yaml", 4, "steps[0].include", ["requires input 'workdir'"]),
    ("include-agent-collision.yaml", 6, "steps[0].include", ["agent 'coder'", "differently"]),
]


@pytest.mark.parametrize(("fixture", "line", "path", "words"), RULES, ids=[r[0] for r in RULES])
def test_rule(fixture: str, line: int, path: str, words: list[str]) -> None:
    """Each broken rule is reported once, at its line and path, in words."""
    problems = validate_file(INVALID / fixture)
    assert len(problems) == 1, "\n".join(map(str, problems))
    problem = problems[0]
    assert (problem.line, problem.path) == (line, path), str(problem)
    assert problem.file == str(INVALID / fixture)
    for word in words:
        assert word in problem.message, str(problem)


def test_rules_each_have_their_own_fixture() -> None:
    """The table names every rule fixture once."""
    names = [row[0] for row in RULES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("fixture", "line", "column"),
    [
        ("cel-syntax.yaml", 7, 49),  # double-quoted: the quote shifts the column by one
        ("cel-syntax-condition.yaml", 7, 45),  # plain scalar: no shift
        ("bad-template-env.yaml", 6, 11),  # the unclosed {{ of a template
    ],
)
def test_expression_errors_point_at_the_character(fixture: str, line: int, column: int) -> None:
    """A CEL error is located at its character inside the document, not just its line."""
    (problem,) = validate_file(INVALID / fixture)
    assert (problem.line, problem.column) == (line, column), str(problem)


def test_child_problems_carry_the_child_file() -> None:
    """An included workflow's problems are reported in its own file."""
    (problem,) = validate_file(INVALID / "include-bad-child.yaml")
    assert problem.file.endswith("include-bad-child-child.yaml")
    assert (problem.line, problem.path) == (5, "steps[0].retries")


def test_include_cycle_names_the_chain() -> None:
    """Includes that form a cycle are rejected with the files in order."""
    (problem,) = validate_file(INVALID / "include-cycle-a.yaml")
    assert problem.file.endswith("include-cycle-b.yaml")
    assert "include cycle" in problem.message
    chain = problem.message.split(": ", 1)[1].split(" -> ")
    assert [Path(name).name for name in chain] == [
        "include-cycle-a.yaml",
        "include-cycle-b.yaml",
        "include-cycle-a.yaml",
    ]


def test_includes_nest_at_most_five_deep() -> None:
    """A sixth level of include is rejected at the include that reaches it."""
    (problem,) = validate_file(INVALID / "include-deep-0.yaml")
    assert problem.file.endswith("include-deep-5.yaml")
    assert "deeper than 5" in problem.message
    assert validate_file(INVALID / "include-deep-1.yaml") == []


def test_every_problem_is_reported(tmp_path: Path) -> None:
    """Independent problems are all reported, in line order, not just the first."""
    path = tmp_path / "many.yaml"
    path.write_text(
        "name: many\n"
        "steps:\n"
        "  - id: a\n"
        "    command: 'echo {{ inputs.x }}'\n"
        "  - id: b\n"
        "    dependsOn: [zz]\n"
        "    agent: nobody\n"
        "  - id: c\n"
        "    retries: -1\n"
        "    command: echo\n"
    )
    problems = validate_file(path)
    assert [(p.line, p.path) for p in problems] == [
        (4, "steps[0].command"),
        (6, "steps[1].dependsOn[0]"),
        (7, "steps[1].agent"),
        (9, "steps[2].retries"),
    ]


def test_python_built_workflow_is_checked_by_the_same_rules() -> None:
    """validate_workflow reports paths (at 0:0) for a workflow built in Python."""
    workflow = Workflow(
        name="built",
        steps=[
            Step(id="a", command="echo {{ inputs.x }}"),
            Step(
                id="b", command="echo", depends_on=["a", "zz"], loop=Loop(for_each=[], until="true")
            ),
            Step(
                id="g",
                graph=Graph(start="s", states={"s": State(handler="tools:run")}),
            ),
        ],
    )
    problems = validate_workflow(workflow)
    assert all((p.line, p.column) == (0, 0) for p in problems)
    assert all(p.file == "<python>" for p in problems)
    assert {p.path for p in problems} == {
        "steps[0].command",
        "steps[1].dependsOn[1]",
        "steps[1].loop.until",
        "steps[1].loop.forEach",
        "steps[2].graph.states.s",
        "steps[2].graph.states.s.handler",  # no module 'tools' anywhere
    }


def test_python_built_workflow_with_bad_types() -> None:
    """Wrong types in a Python-built workflow are problems, not exceptions."""
    workflow = Workflow(name="typed", steps=[Step(id="a", command="echo", retries="2")])  # type: ignore[arg-type]
    (problem,) = validate_workflow(workflow)
    assert (problem.path, problem.message) == (
        "steps[0].retries",
        "expected an integer, got a string ('2')",
    )


def test_valid_python_built_workflow() -> None:
    """A sound Python-built workflow has no problems."""
    workflow = Workflow(
        name="ok",
        steps=[
            Step(id="a", command=["echo", "a"]),
            Step(id="b", depends_on=["a"], instructions="Summarise {{ steps.a.content }}."),
        ],
    )
    assert validate_workflow(workflow) == []
