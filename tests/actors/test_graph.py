"""Graphs: first-match edges, END, routing context, revisit feedback, maxSteps, no match."""

from __future__ import annotations

import pytest

from tests._helpers import run_flow, run_with_events
from tests._workflows import ROUTER, ROUTER_HANDLERS
from tests.conftest import RunYaml, WriteFlow


async def test_edges_route_first_match_until_end(write_flow: WriteFlow) -> None:
    """The path follows the first true edge; visit N of a state is graph.N.state."""
    result, events = await run_with_events(write_flow(ROUTER, handlers=ROUTER_HANDLERS))
    assert result.status == "completed", result.error
    graph = result.graphs["router"]
    assert graph.path == ["analyze", "toolA", "analyze", "toolB", "analyze"]
    assert graph.termination_reason == "end"
    for n, state in enumerate(graph.path):
        assert result.steps[f"router.{n}.{state}"].status == "completed"
    record = result.steps["router"]
    assert record.content == "FINISHED"
    assert record.result == {"path": graph.path, "terminationReason": "end"}
    moves = [(e.data or {}) for e in events if e.type == "graph_transition"]
    assert [(m["from"], m["to"], m["edge"]) for m in moves] == [
        ("analyze", "toolA", 0),
        ("toolA", "analyze", 3),
        ("analyze", "toolB", 1),
        ("toolB", "analyze", 4),
        ("analyze", "END", 2),
    ]
    assert moves[0]["reason"] == "condition \"content == 'USE_A'\" is true"
    assert moves[-1]["reason"] == "unconditional"
    assert all(e.step_id == "router" for e in events if e.type == "graph_transition")


async def test_a_state_hears_who_routed_to_it_and_its_previous_output(
    write_flow: WriteFlow,
) -> None:
    """routed_from/routed_content on every visit; previous on a revisit unless feedback: false."""
    path = write_flow(
        """
        name: briefs
        steps:
          - id: g
            graph:
              start: ask
              states:
                ask: {handler: "HANDLERS:ask"}
                echo: {handler: "HANDLERS:echo"}
                quiet: {handler: "HANDLERS:echo", feedback: false}
              edges:
                - {from: ask, to: END, condition: "visits.ask == 3"}
                - {from: ask, to: echo, condition: "visits.ask == 1"}
                - {from: ask, to: quiet}
                - {from: echo, to: ask}
                - {from: quiet, to: ask}
        """,
        handlers="""
        def ask(ctx):
            b = ctx.brief
            return f"ask{ctx.steps.get('ask').content if 'ask' in ctx.steps else ''}" \\
                f"[{b.routed_from}|{b.previous}]"
        def echo(ctx):
            return f"echo of {ctx.brief.routed_content}"
        """,
    )
    result = await run_flow(path)
    assert result.status == "completed", result.error
    assert result.graphs["g"].path == ["ask", "echo", "ask", "quiet", "ask"]
    assert result.steps["g.0.ask"].content == "ask[None|None]"
    assert result.steps["g.1.echo"].content == "echo of ask[None|None]"
    # A revisit sees its own previous output; the graph's states are steps by name.
    assert result.steps["g.2.ask"].content == "askask[None|None][echo|ask[None|None]]"
    assert (result.steps["g.3.quiet"].content or "").startswith("echo of askask")


async def test_feedback_on_revisit_can_be_switched_off_for_the_whole_graph(
    run_yaml: RunYaml,
) -> None:
    """feedbackOnRevisit: false: no state gets its previous output."""
    result = await run_yaml(
        """
        name: forgetful
        steps:
          - id: g
            graph:
              start: a
              feedbackOnRevisit: false
              states:
                a: {handler: "HANDLERS:a"}
              edges:
                - {from: a, to: END, condition: "visits.a == 2"}
                - {from: a, to: a}
        """,
        handlers="""
        def a(ctx):
            return f"previous={ctx.brief.previous}"
        """,
    )
    assert result.steps["g.1.a"].content == "previous=None"


@pytest.mark.parametrize(
    ("policy", "status"),
    [("returnLast", "completed"), ("fail", "failed"), ("returnWithFlag", "completed")],
)
async def test_max_steps_policies(write_flow: WriteFlow, policy: str, status: str) -> None:
    """A graph that never reaches END stops after maxSteps visits, as onMaxSteps says."""
    path = write_flow(
        f"""
        name: spin
        steps:
          - id: spin
            onError: continue
            graph:
              start: a
              maxSteps: 3
              onMaxSteps: {policy}
              states:
                a: {{handler: "HANDLERS:a"}}
                b: {{handler: "HANDLERS:a"}}
              edges:
                - {{from: a, to: b}}
                - {{from: b, to: a}}
        """,
        handlers="""
        def a(ctx):
            return f"visit {len(ctx.steps)}"
        """,
    )
    result = await run_flow(path)
    graph = result.graphs["spin"]
    assert graph.path == ["a", "b", "a"]
    assert graph.termination_reason == "maxSteps"
    record = result.steps["spin"]
    assert record.status == status
    if policy == "returnWithFlag":
        assert record.result["flagged"] is True
    if status == "failed":
        assert record.error is not None
        assert record.error.type == "MaxSteps"
    assert "spin.3.b" not in result.steps


async def test_no_matching_edge_fails_listing_candidates_and_a_preview(
    run_yaml: RunYaml,
) -> None:
    """No edge matched: the error names each candidate and quotes the state's output."""
    result = await run_yaml(
        """
        name: stuck
        steps:
          - id: g
            graph:
              start: a
              states:
                a: {handler: "HANDLERS:a"}
              edges:
                - {from: a, to: END, condition: "content == 'done'"}
                - {from: a, to: a, condition: "content == 'again'"}
        """,
        handlers="""
        def a(ctx):
            return "something else " * 40
        """,
    )
    assert result.status == "failed"
    error = result.steps["g"].error
    assert error is not None
    assert error.type == "NoEdgeMatched"
    assert "-> END if content == 'done'" in error.message
    assert "-> a if content == 'again'" in error.message
    assert "something else something else" in error.message
    assert len(error.message) < 500
    assert result.graphs["g"].termination_reason == "failed"


async def test_a_failed_state_fails_the_graph_unless_it_continues(write_flow: WriteFlow) -> None:
    """A failing state ends the graph; with onError: continue its edges still route."""
    path = write_flow(
        """
        name: failing
        options: {onStepFailure: skip-dependents}
        steps:
          - id: strict
            graph:
              start: bad
              states:
                bad: {handler: "HANDLERS:bad"}
              edges:
                - {from: bad, to: END}
          - id: lenient
            graph:
              start: bad
              states:
                bad: {handler: "HANDLERS:bad", onError: continue}
                fix: {handler: "HANDLERS:fix"}
              edges:
                - {from: bad, to: fix, condition: "status == 'failed'"}
                - {from: bad, to: END}
                - {from: fix, to: END}
        """,
        handlers="""
        def bad(ctx):
            raise RuntimeError("state broke")
        def fix(ctx):
            return "fixed"
        """,
    )
    result = await run_flow(path)
    assert result.steps["strict"].status == "failed"
    assert result.graphs["strict"].termination_reason == "failed"
    assert result.steps["lenient"].status == "completed"
    assert result.graphs["lenient"].path == ["bad", "fix"]
    assert result.steps["lenient"].content == "fixed"
