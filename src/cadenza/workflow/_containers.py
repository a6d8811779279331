"""The shape of loops and graphs (SPEC sections 2 and 3), one container at a time.

These checks look at a single ``loop:`` or ``graph:`` block: forEach versus
repeat-until, what a workflow-level loop may hold, states, ``start``, edges and
``END``. Recursing into loop bodies and graph states is the validator's job, so
that every step in the document is visited exactly once.
"""

from __future__ import annotations

from ._expressions import ExpressionChecker
from ._problems import DocPath, Reporter, did_you_mean
from ._spec import Graph, ItemSource, Loop

__all__ = ["check_graph", "check_loop"]

# The repeat-until keys forEach excludes (zenflow section 6), with their attributes.
_REPEAT_ONLY = {
    "maxIterations": "max_iterations",
    "until": "until",
    "untilAgent": "until_agent",
    "delay": "delay",
    "keepLast": "keep_last",
}


def check_loop(
    loop: Loop, path: DocPath, reporter: Reporter, exprs: ExpressionChecker, *, root: bool
) -> None:
    """Report what is wrong with ``loop`` itself (not its body, not its judge).

    Args:
        loop: The loop block.
        path: Its document path.
        reporter: Where problems go.
        exprs: Compiles ``until`` and a CEL ``forEach``.
        root: True for the workflow-level loop, which is repeat-until only and
            re-runs the workflow's steps rather than carrying its own.
    """
    add = reporter.add_rule
    if root and loop.steps is not None:
        add(
            (*path, "steps"),
            "a workflow-level loop re-runs the workflow's steps; it cannot have steps of its own",
        )
    if loop.for_each is None:
        if loop.max_iterations is None:
            add(
                path,
                "a repeat-until loop needs maxIterations (at least 1), "
                "or forEach to run once per item",
            )
        if loop.until is not None:
            exprs.expression((*path, "until"), loop.until, field="until", want="bool")
        if loop.output_mode == "summary":
            add(
                (*path, "outputMode"),
                "outputMode summary belongs to forEach loops (counts and failures of the "
                "items); a repeat-until loop's is last or cumulative",
            )
        return
    if root:
        add(
            (*path, "forEach"),
            "a workflow-level loop is repeat-until only (maxIterations, until, untilAgent, "
            "delay); forEach belongs on a step",
        )
    for key, attribute in _REPEAT_ONLY.items():
        if getattr(loop, attribute) is not None:
            add(
                (*path, key),
                f"forEach cannot be combined with {key}: a forEach loop runs once per item, "
                f"{key} belongs to repeat-until loops",
            )
    source = loop.for_each
    if isinstance(source, str):
        exprs.expression((*path, "forEach"), source, field="forEach", want="list")
    elif isinstance(source, ItemSource):
        if (source.lines is None) == (source.handler is None):
            add(
                (*path, "forEach"),
                "a streamed forEach names one source: lines (a JSON-lines file) "
                "or handler (a Python generator, 'module:function')",
            )
    elif not source:
        add((*path, "forEach"), "forEach is an empty list; give at least one item")


def check_graph(graph: Graph, path: DocPath, reporter: Reporter, exprs: ExpressionChecker) -> None:
    """Report what is wrong with a graph's states, ``start`` and edges (not inside states)."""
    add = reporter.add_rule
    states = graph.states
    if not states:
        add((*path, "states"), "a graph needs at least one state")
    elif graph.start not in states:
        add(
            (*path, "start"),
            f"start {graph.start!r} is not a state of this graph"
            + did_you_mean(graph.start, states),
        )
    if "END" in states:
        add((*path, "states", "END"), "END is where a graph finishes; no state may be named END")
    leaving: set[str] = set()
    for index, edge in enumerate(graph.edges):
        where = (*path, "edges", index)
        if edge.from_ == "END":
            add((*where, "from"), "no edge may leave END: reaching END finishes the graph")
        elif edge.from_ not in states:
            add(
                (*where, "from"),
                f"edge from unknown state {edge.from_!r}" + did_you_mean(edge.from_, states),
            )
        leaving.add(edge.from_)
        if edge.to != "END" and edge.to not in states:
            add(
                (*where, "to"),
                f"edge to unknown state {edge.to!r}" + did_you_mean(edge.to, [*states, "END"]),
            )
        if edge.condition is not None:
            exprs.expression(
                (*where, "condition"), edge.condition, field="edge condition", want="bool"
            )
    for name in states:
        if name not in leaving and name != "END":
            add(
                (*path, "states", name),
                f"state {name!r} has no outgoing edge; add one "
                "(to END if the graph should finish there)",
            )
