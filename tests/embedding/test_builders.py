"""Building workflows in Python: the same Structs, validation and runs as YAML (cadenza.build)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest

from cadenza import LoadedWorkflow, RunResult, Runtime, StepContext, Workflow, WorkflowError
from cadenza import build as b
from cadenza.protocols import LoopSummary
from cadenza.workflow import Loop, Step, load_workflow_text
from tests._helpers import EXAMPLES, load_example, run_flow, run_on, run_with_events, started
from tests._workflows import ROUTER

# -- helpers ---------------------------------------------------------------------


def comparable(result: RunResult) -> RunResult:
    """The result without what differs between any two runs: the id and durations."""
    steps = {
        address: msgspec.structs.replace(record, duration_ms=0)
        for address, record in result.steps.items()
    }
    return msgspec.structs.replace(result, run_id="", steps=steps)


def yaml(text: str, tmp_path: Path | None = None, **refs: str) -> LoadedWorkflow:
    """A workflow from YAML text, with ``REF_NAME`` tokens replaced by ``refs[NAME]``."""
    body = textwrap.dedent(text)
    for name, ref in refs.items():
        body = body.replace(f"REF_{name}", ref)
    return load_workflow_text(body, base_dir=tmp_path)


def ref(function: Callable[[StepContext], Any]) -> str:
    """How a builder names ``function`` in a document (what a YAML twin must write)."""
    reference = b.handler("x", function).step.handler
    assert reference is not None
    return reference


async def same_run(built: LoadedWorkflow, loaded: LoadedWorkflow, **inputs: Any) -> RunResult:
    """Runs both; their results must be equal. Returns the builder's."""
    mine = await run_flow(built, inputs=inputs)
    theirs = await run_flow(loaded, inputs=inputs)
    assert comparable(mine) == comparable(theirs)
    return mine


# -- handlers ----------------------------------------------------------------------


def shout(context: StepContext) -> str:
    return "hello"


async def tally(context: StepContext) -> dict[str, Any]:
    return {"seen": sorted(context.steps)}


def iterate(context: StepContext) -> str:
    return f"round {context.iteration}"


def second(context: StepContext) -> str:
    return f"b{context.iteration}"


def itemize(context: StepContext) -> str:
    return f"{context.index}:{context.item}"


def analyze(context: StepContext) -> str:
    answers = {None: "USE_A", "A-result": "USE_B", "B-result": "FINISHED"}
    return answers[context.brief.routed_content]


def tool_a(context: StepContext) -> str:
    return "A-result"


def tool_b(context: StepContext) -> str:
    return "B-result"


def double(context: StepContext) -> dict[str, Any]:
    return {"value": context.inputs["n"] * 2}


def act(context: StepContext) -> dict[str, Any]:
    text = "a tagline far too long to fit" if not context.inputs["feedback"] else "short"
    return {"text": text}


def judge(context: StepContext) -> dict[str, Any]:
    return {"passed": True, "score": 0.9, "feedback": "fine"}


# -- every kind of step, built and loaded --------------------------------------------


async def test_leaf_steps_build_the_yaml_structs_and_run_the_same() -> None:
    """handler, command, agent (defined inline), dependsOn, when and output, as in YAML."""
    built = b.workflow(
        "kinds",
        inputs={"who": b.input_("string", default="world")},
        steps=[
            b.handler("greet", shout),
            b.command("echo", ["echo", "hi"], depends_on=["greet"]),
            b.agent(
                "talk",
                "Say hi to {{ inputs.who }}.",
                prompt="You talk.",
                script=["hi there"],
                depends_on=["greet"],
            ),
            b.handler(
                "count",
                tally,
                depends_on=["echo", "talk"],
                when="steps.greet.status == 'completed'",
            ),
            b.handler("never", shout, when="inputs.who == 'nobody'"),
        ],
        output="steps['count'].result",
    )
    loaded = yaml(
        """
        name: kinds
        inputs:
          who: {type: string, default: world}
        agents:
          talk: {prompt: You talk., script: ["hi there"]}
        steps:
          - {id: greet, handler: "REF_SHOUT"}
          - {id: echo, command: [echo, hi], dependsOn: [greet]}
          - id: talk
            agent: talk
            instructions: "Say hi to {{ inputs.who }}."
            dependsOn: [greet]
          - id: count
            handler: "REF_TALLY"
            dependsOn: [echo, talk]
            condition: "steps.greet.status == 'completed'"
          - {id: never, handler: "REF_SHOUT", condition: "inputs.who == 'nobody'"}
        output: "steps['count'].result"
        """,
        SHOUT=ref(shout),
        TALLY=ref(tally),
    )
    assert built.workflow == loaded.workflow
    result = await same_run(built, loaded)
    assert result.status == "completed", result.error
    assert result.output == {"seen": ["echo", "greet", "never", "talk"]}
    assert result.steps["talk"].content == "hi there"
    assert result.steps["never"].status == "skipped"


def add_numbers(a: int, b: int = 0) -> dict[str, int]:
    """A Python tool: adds two whole numbers."""
    return {"sum": a + b}


async def test_tool_steps_build_the_yaml_structs_and_run_the_same(tmp_path: Path) -> None:
    """A built-in tool with a `$` CEL input, and a Python tool given as a function."""
    built = b.workflow(
        "tools",
        steps=[
            b.handler("draft", shout),
            b.tool(
                "save",
                "write",
                {"path": "out/draft.txt", "content": "$steps.draft.content"},
                depends_on=["draft"],
            ),
            b.tool("add", add_numbers, {"a": 2, "b": 3}),
        ],
        base_dir=tmp_path,
    )
    assert built.workflow.steps[2].tool == f"{__name__}:add_numbers"
    loaded = yaml(
        """
        name: tools
        steps:
          - {id: draft, handler: "REF_SHOUT"}
          - id: save
            tool: write
            toolInput: {path: out/draft.txt, content: $steps.draft.content}
            dependsOn: [draft]
          - {id: add, tool: "REF_ADD", toolInput: {a: 2, b: 3}}
        """,
        tmp_path,
        SHOUT=ref(shout),
        ADD=f"{__name__}:add_numbers",
    )
    assert built.workflow == loaded.workflow
    result = await same_run(built, loaded)
    assert result.status == "completed", result.error
    assert result.steps["add"].content == '{"sum":5}'
    assert (tmp_path / "out" / "draft.txt").read_text() == result.steps["draft"].content


def test_a_tool_function_that_cannot_be_imported_by_name_is_refused() -> None:
    with pytest.raises(TypeError, match="cannot be imported by name"):
        b.tool("add", lambda a: a, {"a": 1})


async def test_loops_and_foreach_build_the_yaml_structs_and_run_the_same() -> None:
    """A repeated step, a loop body, a forEach over a list and one over CEL, a root loop."""
    built = b.workflow(
        "loops",
        inputs={"names": b.input_("array", default=["ann", "bob"])},
        steps=[
            b.loop(
                "spin",
                step=b.handler("spin", iterate),
                max_iterations=4,
                until="content == 'round 2'",
            ),
            b.loop(
                "body",
                max_iterations=3,
                output_mode="cumulative",
                until="steps.second.content == 'b1'",
                steps=[
                    b.handler("first", iterate),
                    b.handler("second", second, depends_on=["first"]),
                ],
            ),
            b.for_each("fan", ["x", "y"], step=b.handler("fan", itemize)),
            b.for_each(
                "fan2",
                "inputs.names",
                max_concurrency=1,
                steps=[b.handler("one", itemize), b.handler("two", itemize, depends_on=["one"])],
            ),
        ],
    )
    loaded = yaml(
        """
        name: loops
        inputs:
          names: {type: array, default: [ann, bob]}
        steps:
          - id: spin
            handler: "REF_ITERATE"
            loop: {maxIterations: 4, until: "content == 'round 2'"}
          - id: body
            loop:
              maxIterations: 3
              outputMode: cumulative
              until: "steps.second.content == 'b1'"
              steps:
                - {id: first, handler: "REF_ITERATE"}
                - {id: second, handler: "REF_SECOND", dependsOn: [first]}
          - id: fan
            handler: "REF_ITEMIZE"
            loop: {forEach: [x, y]}
          - id: fan2
            loop:
              forEach: inputs.names
              maxConcurrency: 1
              steps:
                - {id: one, handler: "REF_ITEMIZE"}
                - {id: two, handler: "REF_ITEMIZE", dependsOn: [one]}
        """,
        ITERATE=ref(iterate),
        SECOND=ref(second),
        ITEMIZE=ref(itemize),
    )
    assert built.workflow == loaded.workflow
    result = await same_run(built, loaded)
    assert result.status == "completed", result.error
    assert result.loops["spin"].iterations == 3
    assert result.loops["body"].termination_reason == "until"
    assert result.steps["fan2[1].two"].content == "1:bob"


async def test_a_workflow_level_loop_builds_and_runs_as_in_yaml() -> None:
    """The whole DAG re-runs until its condition holds (SPEC 2.4)."""
    built = b.workflow(
        "again",
        steps=[b.handler("tick", iterate)],
        loop=b.workflow_loop(max_iterations=5, until="steps.tick.content == 'round 1'"),
    )
    loaded = yaml(
        """
        name: again
        loop: {maxIterations: 5, until: "steps.tick.content == 'round 1'"}
        steps:
          - {id: tick, handler: "REF_ITERATE"}
        """,
        ITERATE=ref(iterate),
    )
    assert built.workflow == loaded.workflow
    result = await same_run(built, loaded)
    assert result.loops["loop"].iterations == 2


async def test_a_graph_builds_the_yaml_structs_and_runs_the_same() -> None:
    """States from step builders, named by their ids; edges in order; feedback on a state."""
    built = b.workflow(
        "router",
        steps=[
            b.graph(
                "router",
                max_steps=12,
                states=[
                    b.handler("analyze", analyze),
                    b.handler("toolA", tool_a),
                    b.handler("toolB", tool_b, feedback=False),
                ],
                edges=[
                    b.edge("analyze", "toolA", when="content == 'USE_A'"),
                    b.edge(
                        "analyze", "toolB", when="content == 'USE_B' && visits.analyze == step - 1"
                    ),
                    b.edge("analyze", b.END),
                    b.edge("toolA", "analyze"),
                    b.edge("toolB", "analyze", description="back"),
                ],
            )
        ],
    )
    text = ROUTER  # actors/test_graph.py's router, with these handlers
    for name, function in (("analyze", analyze), ("tool_a", tool_a), ("tool_b", tool_b)):
        text = text.replace(f"HANDLERS:{name}", ref(function))
    loaded = yaml(text)
    assert built.workflow == loaded.workflow
    result = await same_run(built, loaded)
    assert result.graphs["router"].path == ["analyze", "toolA", "analyze", "toolB", "analyze"]


async def test_an_include_of_a_built_workflow_runs_as_a_file_include(tmp_path: Path) -> None:
    """A child built in Python is included from memory; the run is the file include's."""
    child = b.workflow(
        "child",
        inputs={"n": "integer"},
        steps=[b.handler("double", double)],
        output="steps.double.result",
    )
    built = b.workflow(
        "parent",
        inputs={"start": b.input_("integer", default=21)},
        steps=[b.include("kid", child, inputs={"n": "{{ inputs.start }}"})],
    )
    (tmp_path / "child.yaml").write_text(
        textwrap.dedent(
            f"""
            name: child
            inputs:
              n: {{type: integer}}
            steps:
              - {{id: double, handler: "{ref(double)}"}}
            output: steps.double.result
            """
        )
    )
    loaded = yaml(
        """
        name: parent
        inputs:
          start: {type: integer, default: 21}
        includes: {child: child.yaml}
        steps:
          - {id: kid, include: child, inputs: {n: "{{ inputs.start }}"}}
        """,
        tmp_path,
    )
    assert built.workflow.steps == loaded.workflow.steps
    assert built.includes["child"].workflow == loaded.includes["child"].workflow
    result = await same_run(built, loaded)
    assert result.steps["kid"].result == {"value": 42}
    assert result.steps["kid.double"].status == "completed"


async def test_a_human_step_waits_as_in_yaml() -> None:
    """The run ends ``waiting`` at the step, with the same records."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    built = b.workflow(
        "ask",
        steps=[
            b.human("approve", "Publish?", schema=schema),
            b.command("ship", "echo shipped", depends_on=["approve"]),
        ],
    )
    loaded = yaml(
        """
        name: ask
        steps:
          - id: approve
            human:
              prompt: Publish?
              schema: {type: object, properties: {ok: {type: boolean}}, required: [ok]}
          - {id: ship, command: echo shipped, dependsOn: [approve]}
        """
    )
    assert built.workflow == loaded.workflow
    result = await same_run(built, loaded)
    assert result.status == "waiting"


def control_roles() -> tuple[LoadedWorkflow, LoadedWorkflow]:
    actor = b.workflow(
        "actor",
        inputs={name: b.input_() for name in ("objective", "plan", "feedback", "iteration")},
        steps=[b.handler("act", act)],
        output="steps.act.result",
    )
    evaluator = b.workflow(
        "evaluator",
        inputs={name: b.input_() for name in ("objective", "criteria", "result")},
        steps=[b.handler("judge", judge)],
        output="steps.judge.result",
    )
    return actor, evaluator


async def test_a_control_step_with_built_roles_runs_as_with_role_files(tmp_path: Path) -> None:
    """Roles built in Python, a check that fails the first draft; YAML twins agree."""
    actor, evaluator = control_roles()
    built = b.workflow(
        "tagline",
        steps=[
            b.control(
                "tag",
                "Write a tagline",
                criteria="short",
                actor=actor,
                evaluator=evaluator,
                checks=[b.check("size(result.text) <= 10", "Too long: {{ size(result.text) }}")],
                limits=b.ControlLimits(max_iterations=3),
            )
        ],
    )
    roles: dict[str, tuple[tuple[str, ...], Callable[[StepContext], Any]]] = {
        "actor": (("objective", "plan", "feedback", "iteration"), act),
        "evaluator": (("objective", "criteria", "result"), judge),
    }
    for name, (inputs, function) in roles.items():
        declared = "".join(f"\n  {key}: {{}}" for key in inputs)
        (tmp_path / f"{name}.yaml").write_text(
            f"name: {name}\ninputs:{declared}\n"
            f'steps:\n  - {{id: {function.__name__}, handler: "{ref(function)}"}}\n'
            f"output: steps.{function.__name__}.result\n"
        )
    loaded = yaml(
        """
        name: tagline
        includes: {actor: actor.yaml, evaluator: evaluator.yaml}
        steps:
          - id: tag
            control:
              objective: Write a tagline
              criteria: short
              actor: actor
              evaluator: evaluator
              checks:
                - {expr: "size(result.text) <= 10", feedback: "Too long: {{ size(result.text) }}"}
              limits: {maxIterations: 3}
        """,
        tmp_path,
    )
    assert built.workflow.steps == loaded.workflow.steps
    for name in ("actor", "evaluator"):
        assert built.includes[name].workflow == loaded.includes[name].workflow
    result = await same_run(built, loaded)
    assert result.status == "completed", result.error
    log = result.steps["tag"].result["decisionLog"]
    assert [entry["decision"] for entry in log] == ["retry", "accept"]
    assert log[0]["feedback"].startswith("Too long: 29")


async def test_a_python_check_is_evidence_like_a_cel_one() -> None:
    """A plain function as a check: it fails the long draft, the next attempt passes."""
    actor, evaluator = control_roles()

    def short(context: b.PredicateContext) -> bool:
        return len(context.result["text"]) <= 10

    built = b.workflow(
        "tagline",
        steps=[
            b.control(
                "tag",
                "Write a tagline",
                actor=actor,
                evaluator=evaluator,
                checks=[b.check(short, "Too long")],
            )
        ],
    )
    result = await run_flow(built)
    log = result.steps["tag"].result["decisionLog"]
    assert [entry["decision"] for entry in log] == ["retry", "accept"]
    assert log[0]["feedback"].startswith("Too long")


def test_an_async_check_is_refused_when_built() -> None:
    """Checks run synchronously, so an async function cannot be one."""

    async def short(context: b.PredicateContext) -> bool:
        return True

    with pytest.raises(TypeError, match="plain function"):
        b.check(short)  # type: ignore[arg-type]


# -- Python predicates ---------------------------------------------------------------


def go_sync(context: b.PredicateContext) -> bool:
    return context.steps["first"].content == "go"


async def go_async(context: b.PredicateContext) -> bool:
    await asyncio.sleep(0)
    return context.steps["first"].content == "go"


def twice_sync(context: b.PredicateContext) -> bool:
    return context.iteration == 1


async def twice_async(context: b.PredicateContext) -> bool:
    await asyncio.sleep(0)
    return context.iteration == 1


def names_sync(context: b.PredicateContext) -> list[Any]:
    return list(context.inputs["names"])


async def names_async(context: b.PredicateContext) -> list[Any]:
    await asyncio.sleep(0)
    return list(context.inputs["names"])


def enough_sync(context: b.PredicateContext) -> bool:
    return context.visits["a"] >= 2


async def enough_async(context: b.PredicateContext) -> bool:
    await asyncio.sleep(0)
    return context.visits["a"] >= 2


def output_sync(context: b.PredicateContext) -> Any:
    return {"maybe": context.steps["maybe"].content, "fan": context.steps["fan"].content}


async def output_async(context: b.PredicateContext) -> Any:
    await asyncio.sleep(0)
    return output_sync(context)


def go(context: StepContext) -> str:
    return "go"


PREDICATES: dict[str, dict[str, Any]] = {
    "cel": {
        "when": "steps.first.content == 'go'",
        "until": "iteration == 1",
        "items": "inputs.names",
        "edge": "visits.a >= 2",
        "output": "{'maybe': steps.maybe.content, 'fan': steps.fan.content}",
    },
    "sync": {
        "when": go_sync,
        "until": twice_sync,
        "items": names_sync,
        "edge": enough_sync,
        "output": output_sync,
    },
    "async": {
        "when": go_async,
        "until": twice_async,
        "items": names_async,
        "edge": enough_async,
        "output": output_async,
    },
}


def predicated(mode: str) -> LoadedWorkflow:
    """One workflow with a predicate at every place that takes one."""
    p = PREDICATES[mode]
    return b.workflow(
        "predicates",
        inputs={"names": b.input_("array", default=["ann", "bob"])},
        steps=[
            b.handler("first", go),
            b.handler("maybe", shout, depends_on=["first"], when=p["when"]),
            b.loop("spin", step=b.handler("spin", iterate), max_iterations=5, until=p["until"]),
            b.for_each("fan", p["items"], step=b.handler("fan", itemize)),
            b.graph(
                "g",
                states=[b.handler("a", shout), b.handler("bb", shout)],
                edges=[b.edge("a", b.END, when=p["edge"]), b.edge("a", "bb"), b.edge("bb", "a")],
            ),
        ],
        output=p["output"],
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_python_predicates_give_the_runs_their_cel_twins_give(mode: str) -> None:
    """when, until, forEach items, edge when and output: a callable or CEL, same run."""
    result = await run_flow(predicated(mode))
    assert result.status == "completed", result.error
    assert comparable(result) == comparable(await run_flow(predicated("cel")))
    assert result.steps["maybe"].status == "completed"
    assert result.loops["spin"] == LoopSummary(2, "until")
    assert result.graphs["g"].path == ["a", "bb", "a"]
    assert result.output == {"maybe": "hello", "fan": "0:ann\n\n---\n\n1:bob"}


async def test_a_predicate_sees_what_cel_sees_there() -> None:
    """The context of each place: steps, iteration and output, item and index, state and visits."""
    seen: dict[str, b.PredicateContext] = {}

    def record(where: str, answer: bool) -> Callable[[b.PredicateContext], bool]:
        def predicate(context: b.PredicateContext) -> bool:
            seen[where] = context
            return answer

        return predicate

    built = b.workflow(
        "contexts",
        inputs={"topic": b.input_("string", default="actors")},
        steps=[
            b.handler("first", go),
            b.handler("cond", shout, depends_on=["first"], when=record("when", True)),
            b.loop(
                "spin",
                step=b.handler("spin", iterate),
                max_iterations=3,
                until=record("until", True),
            ),
            b.for_each(
                "fan", ["x"], steps=[b.handler("inner", itemize, when=record("item", True))]
            ),
            b.graph(
                "g",
                states=[b.handler("a", shout)],
                edges=[b.edge("a", b.END, when=record("edge", True))],
            ),
        ],
    )
    result = await run_flow(built)
    assert result.status == "completed", result.error
    when = seen["when"]
    assert when.inputs == {"topic": "actors"}
    assert when.steps["first"].content == "go"
    assert when.steps["first"].status == "completed"
    assert (when.iteration, when.item, when.state) == (None, None, None)
    until = seen["until"]
    assert (until.iteration, until.content, until.status) == (0, "round 0", "completed")
    assert (seen["item"].item, seen["item"].index) == ("x", 0)
    edge = seen["edge"]
    assert (edge.state, edge.step, edge.content) == ("a", 1, "hello")
    assert dict(edge.visits) == {"a": 1}
    assert edge.steps["a"].content == "hello"
    with pytest.raises(AttributeError):
        edge.state = "b"  # type: ignore[misc]


def explode(context: b.PredicateContext) -> bool:
    return 1 // 0 == 1


async def explode_async(context: b.PredicateContext) -> bool:
    await asyncio.sleep(0)
    return 1 // 0 == 1


def not_a_bool(context: b.PredicateContext) -> Any:
    return "yes"


def failing(place: str, predicate: Any) -> LoadedWorkflow:
    """A workflow whose predicate at ``place`` is ``predicate``."""
    steps: list[b.BuiltStep] = [b.handler("first", go)]
    if place == "when":
        steps.append(b.handler("second", go, depends_on=["first"], when=predicate))
    elif place == "until":
        steps.append(
            b.loop(
                "second",
                step=b.handler("x", go),
                max_iterations=2,
                until=predicate,
                depends_on=["first"],
            )
        )
    elif place == "items":
        steps.append(b.for_each("second", predicate, step=b.handler("x", go), depends_on=["first"]))
    else:
        edges = [b.edge("a", b.END, when=predicate), b.edge("a", b.END)]
        steps.append(
            b.graph("second", states=[b.handler("a", go)], edges=edges, depends_on=["first"])
        )
    return b.workflow("failing", steps=steps)


@pytest.mark.parametrize("place", ["when", "until", "items", "edge"])
@pytest.mark.parametrize("predicate", [explode, explode_async])
async def test_a_raising_predicate_fails_its_step_like_a_failing_cel_expression(
    place: str, predicate: Any
) -> None:
    """The step fails with an ExpressionEvaluationError naming the function and the error."""
    result = await run_flow(failing(place, predicate))
    cel = await run_flow(failing(place, "steps.first.result.missing == 1"))
    assert result.status == cel.status == "failed"
    error = result.steps["second"].error
    assert error is not None
    assert cel.steps["second"].error is not None
    assert error.type == cel.steps["second"].error.type == "ExpressionEvaluationError"
    assert error.address == "second"
    assert f"@python:{__name__}:{predicate.__name__}" in error.message
    assert "ZeroDivisionError: integer division or modulo by zero" in error.message


async def test_a_predicate_that_returns_no_bool_is_refused_as_cel_would_be() -> None:
    result = await run_flow(failing("until", not_a_bool))
    error = result.steps["second"].error
    assert error is not None
    assert "the until must be true or false, but it gave string 'yes'" in error.message


async def test_a_raising_output_fails_the_run() -> None:
    built = b.workflow("out", steps=[b.handler("first", go)], output=explode)
    result = await run_flow(built)
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.type == "ExpressionEvaluationError"
    assert "ZeroDivisionError" in result.error.message


def blocked(place: str, entered: asyncio.Event) -> LoadedWorkflow:
    async def hang(context: b.PredicateContext) -> Any:
        entered.set()
        await asyncio.Event().wait()  # never set: only a cancel ends it
        return True

    return failing(place, hang)


@pytest.mark.parametrize("place", ["when", "until", "items", "edge"])
async def test_cancelling_a_run_reaches_an_async_predicate(place: str) -> None:
    """A predicate stuck awaiting does not hold the run: cancel ends it ``cancelled``."""
    entered = asyncio.Event()
    async with started(blocked(place, entered)) as (handle, _):
        await entered.wait()
        handle.cancel("enough")
        result = await handle.result()
    assert result.status == "cancelled"
    if place == "when":  # stopped before it started: no record
        assert "second" not in result.steps
    else:
        assert result.steps["second"].status == "cancelled"


# -- markers without their function ----------------------------------------------------


def test_a_document_naming_an_unregistered_predicate_is_invalid() -> None:
    """Loaded from text in a process that never built it: a located problem, with the fix."""
    with pytest.raises(WorkflowError) as caught:
        yaml(
            """
            name: stray
            steps:
              - id: spin
                handler: "json:dumps"
                loop: {maxIterations: 2, until: "@python:nowhere:done"}
            """
        )
    (problem,) = caught.value.problems
    assert problem.path == "steps[0].loop.until"
    assert "not registered in this process" in problem.message
    assert "Build the workflow again" in problem.message


async def test_running_a_stored_document_without_its_predicate_fails_clearly() -> None:
    """As a resumed run in a fresh process would: the step fails with PredicateNotRegistered."""
    # Built as the store keeps a document: never validated again when it is read back.
    spin = Step(id="spin", handler=ref(go), loop=Loop(max_iterations=2, until="@python:gone:f"))
    loaded = LoadedWorkflow(Workflow(name="stray", steps=[spin]), None, Path.cwd())
    result = await run_flow(loaded)
    error = result.steps["spin"].error
    assert error is not None
    assert error.type == "PredicateNotRegistered"
    assert "Build the workflow again in this process" in error.message


RESUMABLE = """
from cadenza import StepContext
from cadenza import build as b


def done(context: b.PredicateContext) -> bool:
    return context.iteration == 1


def tick(context: StepContext) -> str:
    return f"tick {context.iteration}"


def build(base_dir: str) -> b.LoadedWorkflow:
    return b.workflow(
        "resumable",
        base_dir=base_dir,
        steps=[
            b.human("approve", "Go on?"),
            b.loop("spin", step=b.handler("spin", tick), max_iterations=5, until=done,
                   depends_on=["approve"]),
        ],
    )
"""

RESUME = """
import asyncio, json, sys
import cadenza
store, run_id, how, base = sys.argv[1:]
if how == "build":
    import resumable_flow
    resumable_flow.build(base)
async def main():
    async with cadenza.Runtime(store=store) as runtime:
        try:
            result = await (await runtime.resume(run_id)).result()
        except cadenza.CadenzaError as error:
            print(json.dumps({"raised": type(error).__name__, "message": str(error)}))
            return
    spin = result.steps["spin"]
    loop = result.loops.get("spin")
    print(json.dumps({
        "status": result.status,
        "error": spin.error.type if spin.error else None,
        "iterations": loop.iterations if loop else None,
    }))
asyncio.run(main())
"""


def load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


async def test_a_run_resumes_in_a_new_process_once_the_workflow_is_built_there(
    tmp_path: Path,
) -> None:
    """Resumed elsewhere: without the build, refused and left as it was; after it, it goes on."""
    (tmp_path / "resumable_flow.py").write_text(RESUMABLE)
    store = tmp_path / "runs.db"
    module = load_module(tmp_path / "resumable_flow.py", "resumable_flow")
    try:  # in sys.modules while it builds, so its handler is named resumable_flow:tick
        flow = module.build(str(tmp_path))
    finally:
        del sys.modules["resumable_flow"]
    async with run_on(store, flow) as (runtime, result):
        assert result.status == "waiting"
        await runtime.signal("r", "approve", {"ok": True})
        events = len(await runtime.stored_events("r"))

    def resume(how: str) -> dict[str, Any]:
        path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
        done = subprocess.run(
            [sys.executable, "-c", RESUME, str(store), "r", how, str(tmp_path)],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": path},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    # The handler is found by its name (module:function); the predicate is not.
    plain = resume("plain")
    assert plain["raised"] == "RunNeedsCode"
    assert "needs the Python predicate 'resumable_flow:done'" in plain["message"]
    async with Runtime(store=store) as runtime:
        row = await runtime.get_run("r")
        assert (row.status, len(await runtime.stored_events("r"))) == ("waiting", events)
    built = resume("build")
    assert (built["status"], built["error"], built["iterations"]) == ("completed", None, 2)


# -- validation -----------------------------------------------------------------


def test_a_builder_mistake_is_reported_with_its_document_path_like_yaml() -> None:
    """The same problem, at the same path, with the same message, from both front ends."""
    with pytest.raises(WorkflowError) as built:
        b.workflow(
            "bad",
            steps=[
                b.handler("first", go),
                b.loop("spin", steps=[b.handler("x", go)], until="steps.x.content =="),
            ],
        )
    with pytest.raises(WorkflowError) as loaded:
        yaml(
            """
            name: bad
            steps:
              - {id: first, handler: "json:dumps"}
              - id: spin
                loop:
                  maxIterations: 100
                  until: "steps.x.content =="
                  steps: [{id: x, handler: "json:dumps"}]
            """
        )
    (mine,) = built.value.problems
    (theirs,) = loaded.value.problems
    assert mine.path == theirs.path == "steps[1].loop.until"
    assert mine.message == theirs.message
    assert mine.message.startswith("invalid CEL in until:")
    assert str(mine).startswith("<python>:0:0: steps[1].loop.until: invalid CEL in until")


def test_every_problem_of_a_built_workflow_is_reported_at_once() -> None:
    with pytest.raises(WorkflowError) as caught:
        b.workflow(
            "bad",
            steps=[
                b.handler("Bad Id", go),
                b.agent("talk", "hi", agent="nobody"),
                b.graph("g", states=[b.handler("a", go)], edges=[b.edge("a", "nowhere")]),
            ],
        )
    paths = [problem.path for problem in caught.value.problems]
    assert paths == ["steps[0].id", "steps[1].agent", "steps[2].graph.edges[0].to"]


def test_builder_arguments_that_contradict_each_other_are_refused() -> None:
    with pytest.raises(TypeError, match="not both"):
        b.agent("talk", "hi", agent="writer", prompt="You write.")
    with pytest.raises(TypeError, match="one"):
        b.loop("spin", max_iterations=2)
    with pytest.raises(ValueError, match="graph states only"):
        b.workflow("x", steps=[b.handler("a", go, feedback=False)])
    with pytest.raises(ValueError, match="two different agents"):
        b.workflow(
            "x",
            steps=[
                b.agent("a", "hi", name="same", prompt="one"),
                b.agent("b", "hi", name="same", prompt="two"),
            ],
        )


async def test_a_loop_built_without_max_iterations_gets_the_safety_cap() -> None:
    """SPEC 2.1: a loop built through the Python API without a cap stops at 100."""
    built = b.workflow("capped", steps=[b.loop("spin", step=b.handler("spin", go))])
    assert built.workflow.steps[0].loop is not None
    assert built.workflow.steps[0].loop.max_iterations == 100
    result = await run_flow(built)
    assert result.loops["spin"].iterations == 100


async def test_a_lambda_handler_and_a_plain_workflow_struct_run_too() -> None:
    """Functions without an importable name are registered; a bare Workflow is validated."""
    built = b.workflow("lambda", steps=[b.handler("hi", lambda context: "hi there")])
    assert built.workflow.steps[0].handler is not None
    assert built.workflow.steps[0].handler.startswith("cadenza.loops._functions:HANDLERS.")
    result = await run_flow(built.workflow)
    assert result.output == "hi there"


# -- the examples -------------------------------------------------------------------


async def test_the_python_reflection_example_runs_as_its_yaml_twin() -> None:
    """Three drafts, the critic approves the third; the same run as reflection.yaml."""
    module = load_example("reflection_python")
    main: Callable[[], Awaitable[RunResult]] = module.main
    result = await main()
    assert result.status == "completed", result.error
    assert result.loops["reflection"].iterations == 3
    assert result.loops["reflection"].termination_reason == "judge"
    twin = await run_flow(EXAMPLES / "reflection.yaml")
    assert result.output == twin.output
    assert list(result.steps) == list(twin.steps)
    assert str(result.output).endswith("so it needs no locks.")


async def test_the_graph_router_example_routes_with_python_predicates() -> None:
    """search, then calc (an async predicate), then END; the tools' outputs reach the analyst."""
    module = load_example("graph_router")
    result, events = await run_with_events(module.build())
    assert result.status == "completed", result.error
    assert result.graphs["router"].path == ["analyze", "search", "analyze", "calc", "analyze"]
    assert result.steps["router.3.calc"].result == {"answer": 42}
    assert result.output == "FINISHED: 42 is the answer"
    reasons = [(e.data or {})["reason"] for e in events if e.type == "graph_transition"]
    assert reasons[0].startswith("condition '@python:example_graph_router:needs_search")
    assert reasons[-1] == "unconditional"
