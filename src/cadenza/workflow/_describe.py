"""The structure of a workflow as data and as a Mermaid flowchart (``cadenza graph``).

Loops, graphs and includes are super-nodes: a node with its body inside, so a
reader sees what repeats and what routes without reading YAML.
"""

from __future__ import annotations

import json
from typing import Any

from ._spec import Graph, Loop, State, Step, Workflow

__all__ = ["describe_workflow", "to_mermaid"]


def _node(step_id: str, body: Step | State) -> dict[str, Any]:
    node: dict[str, Any] = {"id": step_id, "kind": body.kind}
    if body.agent is not None:
        node["agent"] = body.agent
    if body.include is not None:
        node["include"] = body.include
    if body.command is not None:
        node["command"] = body.command
    if body.handler is not None:
        node["handler"] = body.handler
    if isinstance(body, Step):
        node["dependsOn"] = list(body.depends_on)
        if body.condition:
            node["condition"] = body.condition
    if body.loop is not None:
        node["loop"] = _loop(body.loop)
    if body.graph is not None:
        node["graph"] = _graph(body.graph)
    return node


def _loop(loop: Loop) -> dict[str, Any]:
    data: dict[str, Any] = {"mode": "forEach" if loop.is_for_each else "repeatUntil"}
    if loop.is_for_each:
        data["forEach"] = loop.for_each
        if loop.max_concurrency:
            data["maxConcurrency"] = loop.max_concurrency
    else:
        data["maxIterations"] = loop.max_iterations
        if loop.until:
            data["until"] = loop.until
        if loop.until_agent:
            data["untilAgent"] = loop.until_agent
    if loop.steps:
        data["steps"] = [_node(step.id, step) for step in loop.steps]
    return data


def _graph(graph: Graph) -> dict[str, Any]:
    return {
        "start": graph.start,
        "maxSteps": graph.max_steps,
        "states": [_node(name, state) for name, state in graph.states.items()],
        "edges": [
            {"from": e.from_, "to": e.to, **({"condition": e.condition} if e.condition else {})}
            for e in graph.edges
        ],
    }


def describe_workflow(workflow: Workflow) -> dict[str, Any]:
    """The workflow's structure as plain JSON data: steps, dependencies, bodies."""
    data: dict[str, Any] = {
        "name": workflow.name,
        "steps": [_node(step.id, step) for step in workflow.steps],
    }
    if workflow.loop is not None:
        data["loop"] = _loop(workflow.loop)
    return data


def _label(text: str) -> str:
    return json.dumps(text)[1:-1].replace('"', "'")


class _Mermaid:
    def __init__(self) -> None:
        self.lines = ["flowchart TD"]

    def steps(self, steps: list[Step], prefix: str, indent: str) -> None:
        for step in steps:
            self.node(f"{prefix}{step.id}", step.id, step, indent)
        for step in steps:
            for dependency in step.depends_on:
                arrow = f"-- {_label(step.condition)} -->" if step.condition else "-->"
                self.lines.append(
                    f"{indent}{_id(prefix + dependency)} {arrow} {_id(prefix + step.id)}"
                )

    def node(self, key: str, name: str, body: Step | State, indent: str) -> None:
        if body.loop is not None and body.loop.steps:
            self.lines.append(
                f'{indent}subgraph {_id(key)}["{_label(name)} ({_loop_label(body.loop)})"]'
            )
            self.steps(body.loop.steps, key + ".", indent + "  ")
            self.lines.append(f"{indent}end")
        elif body.graph is not None:
            self.lines.append(f'{indent}subgraph {_id(key)}["{_label(name)} (graph)"]')
            self.graph(body.graph, key + ".", indent + "  ")
            self.lines.append(f"{indent}end")
        else:
            suffix = f" ({_loop_label(body.loop)})" if body.loop is not None else ""
            self.lines.append(f'{indent}{_id(key)}["{_label(name)}: {body.kind}{suffix}"]')

    def graph(self, graph: Graph, prefix: str, indent: str) -> None:
        for name, state in graph.states.items():
            self.node(prefix + name, name, state, indent)
        self.lines.append(f"{indent}{_id(prefix + 'END')}((END))")
        for edge in graph.edges:
            arrow = f"-- {_label(edge.condition)} -->" if edge.condition else "-->"
            self.lines.append(f"{indent}{_id(prefix + edge.from_)} {arrow} {_id(prefix + edge.to)}")


def _loop_label(loop: Loop) -> str:
    if loop.is_for_each:
        return "forEach"
    until = f" until {loop.until}" if loop.until else ""
    judge = f" judged by {loop.until_agent}" if loop.until_agent else ""
    return _label(f"repeat ≤{loop.max_iterations}{until}{judge}")


def _id(key: str) -> str:
    return "n_" + "".join(c if c.isalnum() else "_" for c in key)


def to_mermaid(workflow: Workflow) -> str:
    """A Mermaid flowchart of the workflow, loops and graphs as subgraphs."""
    chart = _Mermaid()
    if workflow.loop is not None:
        chart.lines.append(
            f'  subgraph root["{_label(workflow.name)} ({_loop_label(workflow.loop)})"]'
        )
        chart.steps(workflow.steps, "", "    ")
        chart.lines.append("  end")
    else:
        chart.steps(workflow.steps, "", "  ")
    return "\n".join(chart.lines) + "\n"
