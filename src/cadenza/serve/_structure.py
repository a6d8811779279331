"""A run's workflow structure for the viewer: ``cadenza graph --format json`` and more.

`run_structure` starts from `describe_workflow` (the same data as ``cadenza
graph --format json``) and adds what a person watching the run wants to see
beside each box: each workflow's agents (model and system prompt), an agent
step's instructions, a human step's question, and a control step's objective,
checks and roles (planner, actor, evaluator) with the workflows they run, so
the page can draw a control loop as nested boxes like any other loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cadenza.workflow import Control, LoadedWorkflow, State, Step, describe_workflow

__all__ = ["run_structure"]

_ROLES = ("planner", "actor", "evaluator")
_MAX_DEPTH = 6  # includes nest at most 5 deep; this only guards the walk


def run_structure(loaded: LoadedWorkflow) -> dict[str, Any]:
    """The workflow's structure as JSON data, with prompts, questions and control roles."""
    data = describe_workflow(loaded)
    _workflow(data, loaded, 0)
    return data


def _workflow(data: dict[str, Any], loaded: LoadedWorkflow, depth: int) -> None:
    workflow = loaded.workflow
    agents: dict[str, dict[str, Any]] = {}
    for name, agent in workflow.agents.items():
        fields = {"model": agent.model, "prompt": agent.prompt, "description": agent.description}
        agents[name] = {key: value for key, value in fields.items() if value is not None}
    data["agents"] = agents
    if workflow.description:
        data["description"] = workflow.description
    _nodes(data.get("steps", []), workflow.steps, loaded, depth)
    loop = data.get("loop")
    if workflow.loop is not None and workflow.loop.steps and isinstance(loop, dict):
        _nodes(loop.get("steps", []), workflow.loop.steps, loaded, depth)


def _nodes(
    nodes: list[dict[str, Any]],
    bodies: Sequence[Step | State],
    loaded: LoadedWorkflow,
    depth: int,
) -> None:
    for node, body in zip(nodes, bodies, strict=False):
        _node(node, body, loaded, depth)


def _node(node: dict[str, Any], body: Step | State, loaded: LoadedWorkflow, depth: int) -> None:
    if body.instructions:
        node["instructions"] = body.instructions
    if body.human is not None:
        node["human"] = {"prompt": body.human.prompt, "schema": body.human.schema}
    if body.loop is not None and body.loop.steps and "loop" in node:
        _nodes(node["loop"].get("steps", []), body.loop.steps, loaded, depth)
    if body.graph is not None and "graph" in node:
        _nodes(node["graph"]["states"], list(body.graph.states.values()), loaded, depth)
    if body.include is not None and isinstance(node.get("workflow"), dict):
        child = loaded.includes.get(body.include)
        if child is not None and depth < _MAX_DEPTH:
            _workflow(node["workflow"], child, depth + 1)
    if body.control is not None:
        node["control"] = _control(body.control, loaded, depth)


def _control(control: Control, loaded: LoadedWorkflow, depth: int) -> dict[str, Any]:
    roles = []
    for role in _ROLES:
        reference = getattr(control, role)
        if reference is None:
            continue
        node: dict[str, Any] = {"id": role, "kind": "include", "include": reference}
        child = loaded.includes.get(reference)
        if child is not None and depth < _MAX_DEPTH:
            node["workflow"] = describe_workflow(child)
            _workflow(node["workflow"], child, depth + 1)
        roles.append(node)
    data: dict[str, Any] = {
        "objective": control.objective,
        "maxIterations": control.limits.max_iterations,
        "checks": [{"expr": c.expr, "feedback": c.feedback} for c in control.checks],
        "roles": roles,
    }
    if control.criteria:
        data["criteria"] = control.criteria
    return data
