"""Nesting: loops in loops, forEach in loops, graphs in loops, loops in graph states."""

from __future__ import annotations

from pathlib import Path

from tests._helpers import run_flow, run_with_events
from tests.conftest import RunYaml, WriteFlow


async def test_three_levels_compose_their_addresses(write_flow: WriteFlow) -> None:
    """repeat > forEach > repeat: outer.1.fan[3].deploy.1, with events at those addresses."""
    path = write_flow(
        """
        name: deep
        steps:
          - id: outer
            loop:
              maxIterations: 2
              steps:
                - id: fan
                  loop:
                    forEach: [a, b, c, d]
                    maxConcurrency: 2
                    steps:
                      - id: deploy
                        handler: "HANDLERS:deploy"
                        loop: {maxIterations: 2}
        """,
        handlers="""
        def deploy(ctx):
            return f"{ctx.address} item={ctx.item} index={ctx.index} iteration={ctx.iteration}"
        """,
    )
    result, events = await run_with_events(path)
    assert result.status == "completed", result.error
    deepest = result.steps["outer.1.fan[3].deploy.1"]
    assert deepest.content == "outer.1.fan[3].deploy.1 item=d index=3 iteration=1"
    for address in ("outer.1.fan[3].deploy", "outer.1.fan[3]", "outer.1.fan", "outer.1", "outer"):
        assert result.steps[address].status == "completed"
    assert result.loops["outer.1.fan[3].deploy"].iterations == 2
    assert result.loops["outer.0.fan"].termination_reason == "forEach"
    assert len([a for a in result.steps if a.count(".") == 4]) == 2 * 4 * 2
    starts = {e.step_id for e in events if e.type in ("iteration_start", "item_start")}
    assert {"outer.1", "outer.1.fan[3]", "outer.1.fan[3].deploy.1"} <= starts


async def test_graphs_and_loops_nest_both_ways(write_flow: WriteFlow) -> None:
    """A graph in a loop body, and a loop and a graph inside graph states."""
    path = write_flow(
        """
        name: mixed
        steps:
          - id: rounds
            loop:
              maxIterations: 2
              steps:
                - id: machine
                  graph:
                    start: spin
                    states:
                      spin:
                        handler: "HANDLERS:spin"
                        loop: {maxIterations: 2}
                      inner:
                        graph:
                          start: leaf
                          states:
                            leaf: {handler: "HANDLERS:spin"}
                          edges:
                            - {from: leaf, to: END}
                    edges:
                      - {from: spin, to: inner}
                      - {from: inner, to: END}
        """,
        handlers="""
        def spin(ctx):
            return ctx.address
        """,
    )
    result = await run_flow(path)
    assert result.status == "completed", result.error
    assert result.steps["rounds.1.machine.0.spin.1"].content == "rounds.1.machine.0.spin.1"
    assert result.steps["rounds.1.machine.1.inner.0.leaf"].status == "completed"
    assert result.graphs["rounds.1.machine"].path == ["spin", "inner"]
    assert result.graphs["rounds.0.machine.1.inner"].path == ["leaf"]
    assert result.loops["rounds.0.machine.0.spin"].iterations == 2
    assert result.steps["rounds"].content == "rounds.1.machine.1.inner.0.leaf"


async def test_includes_run_inside_foreach_items(run_yaml: RunYaml, tmp_path: Path) -> None:
    """An include in a forEach body: item inputs reach the child at loop[i].step.child."""
    (tmp_path / "child.yaml").write_text(
        "name: child\ninputs:\n  name: {type: string}\nsteps:\n"
        "  - id: hello\n    command: 'echo hi $NAME'\n    env: {NAME: '{{ inputs.name }}'}\n"
    )
    result = await run_yaml(
        """
        name: each-include
        steps:
          - id: people
            loop:
              forEach: [ann, bob]
              steps:
                - id: greet
                  include: child.yaml
                  inputs: {name: "{{ item }}"}
        """
    )
    assert result.status == "completed", result.error
    assert result.steps["people[1].greet.hello"].content == "hi bob\n"
    assert result.steps["people[0].greet"].content == "hi ann\n"
