"""``graph``: a state machine over step-like states (SPEC 3)."""

from __future__ import annotations

from cadenza.workflow._containers import check_graph
from cadenza.workflow._problems import DocPath

from ._base import Body, KindChecks, StepKind

__all__ = ["Graph"]


class Graph(StepKind):
    """A graph step: its states are bodies of their own, checked one level deeper."""

    name = "graph"
    loopable = False
    leaf = False

    def check(self, body: Body, path: DocPath, depth: int, at: KindChecks) -> None:
        graph = body.graph
        if graph is None:
            return
        where = (*path, "graph")
        with at.unscoped():  # scopes inside a graph are not worked out
            at.nesting(where, depth + 1)
            check_graph(graph, where, at.reporter, at.exprs)
            for name, state in graph.states.items():
                at.body(state, (*where, "states", name), depth + 1, "graph state")
