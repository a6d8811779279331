"""The structure of a workflow as data and as a Mermaid flowchart (``cadenza graph``).

Loops, graphs and includes are super-nodes: a box with its body inside, so a
reader sees what repeats and what routes without reading YAML. In the chart a
repeat-until loop has a dotted edge back from its last body step to its first,
labelled with what stops it; a forEach says what it iterates over; a graph
shows its start, its states, ``END`` and every edge with its condition. Given a
`LoadedWorkflow`, included workflows are drawn inside their include step.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._loader import LoadedWorkflow
from ._spec import Edge, Graph, ItemSource, Loop, State, Step, Workflow
from .kinds import short, step_kind

__all__ = ["describe_workflow", "to_mermaid"]

_MAX_INCLUDE_DEPTH = 6  # the loader caps includes at 5; this only guards the drawing


def _split(source: Workflow | LoadedWorkflow) -> tuple[Workflow, LoadedWorkflow | None]:
    if isinstance(source, LoadedWorkflow):
        return source.workflow, source
    return source, None


# JSON ---------------------------------------------------------------------------


def describe_workflow(source: Workflow | LoadedWorkflow) -> dict[str, Any]:
    """The workflow's structure as plain JSON data: steps, dependencies, bodies.

    Given a `LoadedWorkflow`, each include step carries the included workflow's
    structure under ``workflow``.
    """
    workflow, loaded = _split(source)
    return _Describer(loaded, 0).workflow(workflow)


class _Describer:
    def __init__(self, loaded: LoadedWorkflow | None, depth: int) -> None:
        self.loaded = loaded
        self.depth = depth

    def workflow(self, workflow: Workflow) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": workflow.name,
            "steps": [self.node(step.id, step) for step in workflow.steps],
        }
        if workflow.loop is not None:
            data["loop"] = self.loop(workflow.loop)
        if workflow.output is not None:
            data["output"] = workflow.output
        return data

    def node(self, name: str, body: Step | State) -> dict[str, Any]:
        node: dict[str, Any] = {"id": name, "kind": body.kind}
        kind = step_kind(body.kind)
        if kind is not None:
            node.update(kind.describe(body))
        if body.timeout is not None:
            node["timeout"] = body.timeout
        if body.retries:
            node["retries"] = body.retries
        if body.on_error != "fail":
            node["onError"] = body.on_error
        if isinstance(body, Step):
            node["dependsOn"] = list(body.depends_on)
            if body.condition:
                node["condition"] = body.condition
        elif body.feedback is not None:
            node["feedback"] = body.feedback
        if body.loop is not None:
            node["loop"] = self.loop(body.loop)
        if body.graph is not None:
            node["graph"] = self.graph(body.graph)
        child = self._child(body)
        if child is not None:
            node["workflow"] = _Describer(child, self.depth + 1).workflow(child.workflow)
        return node

    def _child(self, body: Step | State) -> LoadedWorkflow | None:
        if body.include is None or self.loaded is None or self.depth >= _MAX_INCLUDE_DEPTH:
            return None
        return self.loaded.includes.get(body.include)

    def loop(self, loop: Loop) -> dict[str, Any]:
        data: dict[str, Any] = {"mode": "forEach" if loop.is_for_each else "repeatUntil"}
        if loop.is_for_each:
            source = loop.for_each
            data["forEach"] = msgspec.to_builtins(source)  # a list, CEL or a source's block
            if loop.max_concurrency:
                data["maxConcurrency"] = loop.max_concurrency
            if loop.output_mode == "summary":
                data["outputMode"] = "summary"
        else:
            data["maxIterations"] = loop.max_iterations
            stops = {"until": loop.until, "untilAgent": loop.until_agent, "delay": loop.delay}
            data.update({key: value for key, value in stops.items() if value})
            data["outputMode"] = loop.output_mode or "last"
            data["onMaxIterations"] = loop.on_max_iterations
            data["feedback"] = loop.feedback
            if loop.keep_last:
                data["keepLast"] = loop.keep_last
        if loop.steps:
            data["steps"] = [self.node(step.id, step) for step in loop.steps]
        return data

    def graph(self, graph: Graph) -> dict[str, Any]:
        return {
            "start": graph.start,
            "maxSteps": graph.max_steps,
            "onMaxSteps": graph.on_max_steps,
            "feedbackOnRevisit": graph.feedback_on_revisit,
            "states": [self.node(name, state) for name, state in graph.states.items()],
            "edges": [_edge(edge) for edge in graph.edges],
        }


def _edge(edge: Edge) -> dict[str, Any]:
    data: dict[str, Any] = {"from": edge.from_, "to": edge.to}
    if edge.condition:
        data["condition"] = edge.condition
    if edge.description:
        data["description"] = edge.description
    return data


# Mermaid ------------------------------------------------------------------------


def to_mermaid(source: Workflow | LoadedWorkflow) -> str:
    """A Mermaid flowchart: loops, graphs and includes as subgraphs with their bodies."""
    workflow, loaded = _split(source)
    chart = _Mermaid()
    if workflow.loop is not None:
        chart.open("workflow-loop", f"{workflow.name} ({_loop_title(workflow.loop)})", "  ")
        chart.steps(workflow.steps, "", "    ", loaded, 0)
        firsts, lasts = _ends(workflow.steps, "")
        chart.back_edge(lasts, firsts, _repeat_label(workflow.loop), "    ")
        chart.lines.append("  end")
    else:
        chart.steps(workflow.steps, "", "  ", loaded, 0)
    return "\n".join(chart.lines) + "\n"


def _label(text: str) -> str:
    """Text safe inside a quoted Mermaid label (entity codes for what would end or tag it)."""
    flat = " ".join(text.split())
    return flat.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def _loop_title(loop: Loop) -> str:
    if loop.is_for_each:
        source = loop.for_each
        if isinstance(source, str):
            over = source
        elif isinstance(source, ItemSource):
            over = f"lines of {source.lines}" if source.lines else f"handler {source.handler}"
        else:
            count = len(source or [])
            over = f"{count} item" if count == 1 else f"{count} items"
        cap = f", ≤{loop.max_concurrency} at once" if loop.max_concurrency else ""
        return f"forEach {short(str(over), 60)}{cap}"
    return f"repeat ≤{loop.max_iterations or 100}"


def _repeat_label(loop: Loop) -> str:
    stops = []
    if loop.until:
        stops.append(f"until {short(loop.until, 60)}")
    if loop.until_agent:
        stops.append(f"judged by {loop.until_agent}")
    return "next iteration" + (f" ({'; '.join(stops)})" if stops else "")


def _ends(steps: list[Step], prefix: str) -> tuple[list[str], list[str]]:
    """The keys of a body's first steps (no dependencies) and last ones (no dependents)."""
    needed = {dep for step in steps for dep in step.depends_on}
    firsts = [prefix + s.id for s in steps if not s.depends_on]
    lasts = [prefix + s.id for s in steps if s.id not in needed]
    return firsts, lasts


class _Mermaid:
    def __init__(self) -> None:
        self.lines = ["flowchart TD"]
        self._ids: dict[str, str] = {}
        self._taken: set[str] = set()

    def id(self, key: str) -> str:
        """A unique Mermaid id per key (``a-b`` and ``a_b`` must not merge)."""
        known = self._ids.get(key)
        if known is not None:
            return known
        base = "n_" + "".join(c if c.isalnum() else "_" for c in key)
        made, n = base, 1
        while made in self._taken:
            n += 1
            made = f"{base}_{n}"
        self._taken.add(made)
        self._ids[key] = made
        return made

    def open(self, key: str, title: str, indent: str) -> None:
        self.lines.append(f'{indent}subgraph {self.id(key)}["{_label(title)}"]')

    def back_edge(self, sources: list[str], targets: list[str], label: str, indent: str) -> None:
        for source in sources:
            for target in targets:
                self.lines.append(
                    f'{indent}{self.id(source)} -.->|"{_label(label)}"| {self.id(target)}'
                )

    def steps(
        self, steps: list[Step], prefix: str, indent: str, loaded: LoadedWorkflow | None, depth: int
    ) -> None:
        for step in steps:
            self.node(prefix + step.id, step.id, step, indent, loaded, depth)
        for step in steps:
            for dependency in step.depends_on:
                arrow = f'-->|"{_label(step.condition)}"|' if step.condition else "-->"
                source, target = self.id(prefix + dependency), self.id(prefix + step.id)
                self.lines.append(f"{indent}{source} {arrow} {target}")

    def node(
        self,
        key: str,
        name: str,
        body: Step | State,
        indent: str,
        loaded: LoadedWorkflow | None,
        depth: int,
    ) -> None:
        """A step or state: a loop box around its body, or what `leaf` draws."""
        loop = body.loop
        if loop is None:
            self.leaf(key, name, body, indent, loaded, depth)
            return
        inner = indent + "  "
        self.open(key, f"{name} ({_loop_title(loop)})", indent)
        if loop.steps:
            self.steps(loop.steps, key + ".", inner, loaded, depth)
            firsts, lasts = _ends(loop.steps, key + ".")
        else:
            work = key + (".each" if loop.is_for_each else ".N")
            self.leaf(work, name, body, inner, loaded, depth)
            firsts = lasts = [work]
        if not loop.is_for_each:
            self.back_edge(lasts, firsts, _repeat_label(loop), inner)
        self.lines.append(f"{indent}end")

    def leaf(
        self,
        key: str,
        name: str,
        body: Step | State,
        indent: str,
        loaded: LoadedWorkflow | None,
        depth: int,
    ) -> None:
        """What runs once: a graph box, an include box holding the child, or a plain node."""
        inner = indent + "  "
        if body.graph is not None:
            self.open(key, f"{name} (graph)", indent)
            self.graph(body.graph, key + ".", inner, loaded, depth)
            self.lines.append(f"{indent}end")
            return
        child = None
        if body.include is not None and loaded is not None and depth < _MAX_INCLUDE_DEPTH:
            child = loaded.includes.get(body.include)
        if child is None:
            kind = step_kind(body.kind)
            text = body.kind if kind is None else kind.label(body)
            self.lines.append(f'{indent}{self.id(key)}["{_label(f"{name}: {text}")}"]')
            return
        workflow = child.workflow
        repeat = f", {_loop_title(workflow.loop)}" if workflow.loop is not None else ""
        self.open(key, f"{name} (include {body.include}{repeat})", indent)
        self.steps(workflow.steps, key + ".", inner, child, depth + 1)
        if workflow.loop is not None:
            firsts, lasts = _ends(workflow.steps, key + ".")
            self.back_edge(lasts, firsts, _repeat_label(workflow.loop), inner)
        self.lines.append(f"{indent}end")

    def graph(
        self, graph: Graph, prefix: str, indent: str, loaded: LoadedWorkflow | None, depth: int
    ) -> None:
        start, end = self.id(prefix + "START"), self.id(prefix + "END")
        self.lines.append(f"{indent}{start}(( ))")
        for name, state in graph.states.items():
            self.node(prefix + name, name, state, indent, loaded, depth)
        self.lines.append(f"{indent}{end}((END))")
        self.lines.append(f"{indent}{start} --> {self.id(prefix + graph.start)}")
        for edge in graph.edges:
            label = edge.condition or edge.description
            arrow = f'-->|"{_label(label)}"|' if label else "-->"
            target = end if edge.to == "END" else self.id(prefix + edge.to)
            self.lines.append(f"{indent}{self.id(prefix + edge.from_)} {arrow} {target}")
