"""Where a document names Python code: what a process needs before it resumes a run."""

from __future__ import annotations

from pathlib import Path

from cadenza.workflow import (
    Agent,
    Check,
    Control,
    Edge,
    Graph,
    LoadedWorkflow,
    Loop,
    State,
    Step,
    Workflow,
    code_references,
)


def test_every_kind_of_place_is_found_and_nothing_else() -> None:
    child = LoadedWorkflow(
        Workflow(name="child", steps=[Step(id="inner", handler="child_mod:run")]),
        None,
        Path("/child"),
    )
    graph = Graph(
        start="s",
        states={"s": State(handler="h:s")},
        edges=[Edge(from_="s", to="END", condition="@python:m:edge")],
    )
    control = Control(
        objective="o",
        actor="x",
        evaluator="y",
        checks=[Check(expr="@python:m:check"), Check(expr="result.ok")],
    )
    workflow = Workflow(
        name="all",
        output="@python:m:output",
        loop=Loop(max_iterations=2, until="@python:m:again"),
        agents={"coder": Agent(tools=["read", "github.search", "tools_mod:search"])},
        steps=[
            Step(id="a", condition="@python:m:when", handler="h:a"),
            Step(
                id="fan",
                loop=Loop(for_each="@python:m:items", steps=[Step(id="each", tool="t:each")]),
            ),
            Step(id="g", graph=graph),
            Step(id="c", control=control),
            Step(id="plain", agent="coder", instructions="@python:m:not-a-marker in a prompt"),
            Step(id="data", tool="write", tool_input={"content": "@python:m:just-text"}),
        ],
    )
    loaded = LoadedWorkflow(workflow, None, Path("/flows"), includes={"child": child})
    found = [(r.kind, r.reference, r.where, r.base_dir) for r in code_references(loaded)]
    flows = Path("/flows")
    assert found == [
        ("predicate", "@python:m:output", "the workflow", flows),
        ("tool", "tools_mod:search", "agent coder", flows),
        ("predicate", "@python:m:again", "the workflow", flows),
        ("predicate", "@python:m:when", "a", flows),
        ("handler", "h:a", "a", flows),
        ("predicate", "@python:m:items", "fan", flows),
        ("tool", "t:each", "fan.each", flows),
        ("predicate", "@python:m:edge", "g", flows),
        ("handler", "h:s", "g.s", flows),
        ("predicate", "@python:m:check", "c", flows),
        ("handler", "child_mod:run", "inner", Path("/child")),
    ]
