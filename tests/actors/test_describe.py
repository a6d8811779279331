"""cadenza graph: loops, graphs and includes drawn as super-nodes with their bodies."""

from __future__ import annotations

from pathlib import Path

from cadenza.workflow import describe_workflow, load_workflow, to_mermaid
from tests.conftest import WriteFlow

FLOW = """
name: shapes
steps:
  - id: review
    loop:
      maxIterations: 4
      until: "steps.critic.content.contains('OK')"
      steps:
        - id: draft
          command: "echo draft"
        - id: critic
          dependsOn: [draft]
          command: "echo OK"
  - id: fan
    dependsOn: [review]
    command: "echo hi"
    loop: {forEach: [a, b], maxConcurrency: 1}
  - id: router
    dependsOn: [review]
    graph:
      start: ask
      states:
        ask: {command: "echo ask"}
        act: {command: "echo act", feedback: false}
      edges:
        - {from: ask, to: act, condition: 'content == "go"', description: "when told to"}
        - {from: ask, to: END}
        - {from: act, to: ask}
  - id: sub
    include: child.yaml
"""

CHILD = """
name: child
loop: {maxIterations: 3, until: "steps.check.result.exitCode == 0"}
steps:
  - id: check
    command: "true"
"""


def load(write_flow: WriteFlow, tmp_path: Path) -> Path:
    (tmp_path / "child.yaml").write_text(CHILD)
    return write_flow(FLOW)


def test_mermaid_draws_super_nodes_with_bodies_and_labelled_edges(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """Loops and graphs are subgraphs; until is a dotted back edge; graph edges carry conditions."""
    chart = to_mermaid(load_workflow(load(write_flow, tmp_path)))
    lines = [line.strip() for line in chart.splitlines()]
    assert lines[0] == "flowchart TD"
    assert 'subgraph n_review["review (repeat ≤4)"]' in lines
    assert "n_review_draft --> n_review_critic" in lines
    assert (
        "n_review_critic -.->|\"next iteration (until steps.critic.content.contains('OK'))\"| "
        "n_review_draft"
    ) in lines
    assert 'subgraph n_fan["fan (forEach 2 items, ≤1 at once)"]' in lines
    assert 'subgraph n_router["router (graph)"]' in lines
    assert "n_router_START --> n_router_ask" in lines
    assert 'n_router_ask -->|"content == #quot;go#quot;"| n_router_act' in lines
    assert "n_router_ask --> n_router_END" in lines
    assert 'subgraph n_sub["sub (include child.yaml, repeat ≤3)"]' in lines
    assert "n_review --> n_router" in lines
    assert sum(line == "end" for line in lines) == chart.count("subgraph ")


def test_json_describes_loops_graphs_and_included_workflows(
    write_flow: WriteFlow, tmp_path: Path
) -> None:
    """The JSON form holds each loop's fields, the graph's states and edges, the include's steps."""
    data = describe_workflow(load_workflow(load(write_flow, tmp_path)))
    review, fan, router, sub = data["steps"]
    assert review["loop"]["mode"] == "repeatUntil"
    assert [s["id"] for s in review["loop"]["steps"]] == ["draft", "critic"]
    assert fan["loop"] == {"mode": "forEach", "forEach": ["a", "b"], "maxConcurrency": 1}
    graph = router["graph"]
    assert [s["id"] for s in graph["states"]] == ["ask", "act"]
    assert graph["states"][1]["feedback"] is False
    assert graph["edges"][0] == {
        "from": "ask",
        "to": "act",
        "condition": 'content == "go"',
        "description": "when told to",
    }
    assert sub["workflow"]["loop"]["until"] == "steps.check.result.exitCode == 0"
    assert [s["id"] for s in sub["workflow"]["steps"]] == ["check"]


def test_a_workflow_level_loop_is_one_box_around_the_whole_dag(
    write_flow: WriteFlow,
) -> None:
    """A root loop draws every step inside one box with the back edge to the first step."""
    chart = to_mermaid(
        load_workflow(
            write_flow(
                "name: again\nloop: {maxIterations: 2}\nsteps:\n"
                "  - id: a\n    command: 'true'\n  - id: b\n    dependsOn: [a]\n"
                "    command: 'true'\n"
            )
        )
    )
    assert 'subgraph n_workflow_loop["again (repeat ≤2)"]' in chart
    assert 'n_b -.->|"next iteration"| n_a' in chart


def test_mermaid_counts_a_single_item_in_the_singular(write_flow: WriteFlow) -> None:
    """A literal forEach of one item is "1 item", not "1 items"."""
    flow = write_flow(
        "name: one\nsteps:\n  - id: fan\n    command: 'echo hi'\n    loop: {forEach: [a]}\n"
    )
    lines = [line.strip() for line in to_mermaid(load_workflow(flow)).splitlines()]
    assert 'subgraph n_fan["fan (forEach 1 item)"]' in lines
