"""Step scopes: unique ids, ``dependsOn`` that resolve, and no dependency cycles.

A scope is one list of steps: the workflow's ``steps`` or a loop's ``steps``.
``dependsOn`` names steps of the same list only (zenflow section 11), so each
scope is checked on its own; ids declared elsewhere in the document are only used
to explain a cross-scope reference.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from ._problems import DocPath, Reporter, did_you_mean, format_path
from ._spec import State, Step, Workflow

__all__ = ["check_scope", "declared_ids", "loop_owners"]


def declared_ids(workflow: Workflow) -> dict[str, list[str]]:
    """Every step id in the document, with the scopes (as paths) that declare it."""
    ids: dict[str, list[str]] = {}
    for path, steps in _scopes(workflow):
        scope = format_path(path)
        for step in steps:
            ids.setdefault(step.id, []).append(scope)
    return ids


def loop_owners(workflow: Workflow) -> dict[str, str]:
    """Each id declared in a loop body -> the id of the step whose loop runs it (first found)."""
    owners: dict[str, str] = {}
    for path, steps in _scopes(workflow):
        if path == ("steps",):
            continue
        owner = _step_at(workflow, path[:-2])
        if owner is None:  # a loop of a graph state: the state has no id
            continue
        for step in steps:
            owners.setdefault(step.id, owner)
    return owners


def _step_at(workflow: Workflow, path: DocPath) -> str | None:
    """The id of the step at ``path`` (``("steps", 0, "loop", "steps", 2)``), if one is."""
    body: Step | State | None = None
    steps: Sequence[Step] = workflow.steps
    for part in path[1:]:
        if isinstance(part, int):
            body = steps[part]
        elif part == "steps" and body is not None and body.loop is not None:
            steps = body.loop.steps or ()
        elif part != "loop":
            return None  # inside a graph
    return body.id if isinstance(body, Step) else None


def _scopes(workflow: Workflow) -> Iterator[tuple[DocPath, Sequence[Step]]]:
    """Every list of steps in the document: the workflow's, and each ``loop.steps``."""
    pending: list[tuple[DocPath, Sequence[Step]]] = [(("steps",), workflow.steps)]
    while pending:
        path, steps = pending.pop()
        yield path, steps
        bodies: list[tuple[DocPath, Step | State]] = [((*path, i), s) for i, s in enumerate(steps)]
        while bodies:
            where, body = bodies.pop()
            if body.loop is not None and body.loop.steps is not None:
                pending.append(((*where, "loop", "steps"), body.loop.steps))
            if body.graph is not None:
                states = body.graph.states.items()
                bodies += [((*where, "graph", "states", name), state) for name, state in states]


def check_scope(
    steps: Sequence[Step], path: DocPath, reporter: Reporter, ids: Mapping[str, list[str]]
) -> None:
    """Report duplicate ids, unresolved ``dependsOn`` and cycles among ``steps``."""
    index: dict[str, int] = {}
    for i, step in enumerate(steps):
        if step.id in index:
            first = format_path((*path, index[step.id]))
            reporter.add_rule((*path, i, "id"), f"duplicate step id {step.id!r} (first at {first})")
        else:
            index[step.id] = i
    edges: list[list[int]] = []
    for i, step in enumerate(steps):
        edges.append([])
        for j, dep in enumerate(step.depends_on):
            if dep in index:
                edges[i].append(index[dep])
                continue
            here = format_path(path)
            elsewhere = [scope for scope in ids.get(dep, ()) if scope != here]
            if elsewhere:
                message = (
                    f"{dep!r} is declared in {elsewhere[0]}, another scope: dependsOn names "
                    f"steps of the same list ({here})"
                )
            else:
                message = f"unknown step {dep!r} in dependsOn" + did_you_mean(dep, index)
            reporter.add_rule((*path, i, "dependsOn", j), message)
    for cycle in _cycles(edges):
        chain = " -> ".join(steps[i].id for i in (*cycle, cycle[0]))
        reporter.add_rule(
            (*path, cycle[0], "dependsOn"),
            f"dependency cycle: {chain} (each step depends on the next)",
        )


def _cycles(edges: list[list[int]]) -> list[list[int]]:
    """One cycle per strongly connected component that has one, first-declared step first."""
    cycles = []
    for component in _components(edges):
        members = set(component)
        start = min(component)
        if len(component) > 1 or start in edges[start]:
            cycles.append(_path_back(edges, start, members))
    return sorted(cycles)


def _path_back(edges: list[list[int]], start: int, members: set[int]) -> list[int]:
    """A shortest walk start -> ... -> start inside one component (breadth first)."""
    parent: dict[int, int] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in edges[node]:
                if nxt == start:
                    walk = [node]
                    while walk[-1] != start:
                        walk.append(parent[walk[-1]])
                    return walk[::-1]
                if nxt in members and nxt not in parent:
                    parent[nxt] = node
                    following.append(nxt)
        frontier = following
    return [start]  # unreachable for a real component; keeps the type total


def _components(edges: list[list[int]]) -> list[list[int]]:
    """Tarjan's strongly connected components, iterative so deep chains cannot overflow."""
    count = len(edges)
    order = [-1] * count
    low = [0] * count
    on_stack = [False] * count
    stack: list[int] = []
    found: list[list[int]] = []
    counter = 0
    for root in range(count):
        if order[root] >= 0:
            continue
        order[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        work = [(root, iter(edges[root]))]
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if order[nxt] < 0:
                    order[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack[nxt] = True
                    work.append((nxt, iter(edges[nxt])))
                    break
                if on_stack[nxt]:
                    low[node] = min(low[node], order[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == order[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack[member] = False
                        component.append(member)
                        if member == node:
                            break
                    found.append(component)
    return found
