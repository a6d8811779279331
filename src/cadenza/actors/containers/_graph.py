"""The graph controller (SPEC 3): a state machine, one state at a time.

Visit N (0-based) of state S runs at ``graph.N.S``. When it completes, the
state's outgoing edges are tried in declaration order: the first whose
``condition`` holds, or that has none, wins. Conditions see ``content``,
``result``, ``status`` of the visit, ``state``, ``step`` (1-based), ``visits``
(per state, this visit included), and ``steps``: the steps around the graph,
plus each visited state's latest output under its name (``steps.analyze``).
A condition may be a Python callable (``cadenza.build``); a graph that has one
routes on a path that awaits the ``async`` ones, a CEL-only graph on a plain
synchronous one. ``END`` finishes the graph; no matching edge fails it with the candidates and
a preview of the output. ``maxSteps`` visits at most, then ``onMaxSteps``.

The next state hears where it was routed from and that state's output; on a
revisit it also gets its own previous output, unless ``feedback: false`` on it
or ``feedbackOnRevisit: false`` on the graph.
"""

from __future__ import annotations

from cadenza.actors.run import Brief, Placement, Scope, work_error
from cadenza.protocols import (
    ErrorInfo,
    EventType,
    GraphEnd,
    GraphSummary,
    GraphTransition,
    StepRecord,
    StepStart,
    StepStatus,
)
from cadenza.workflow import Edge, compile_expression, quote

from ._container import Container, Outcome, amend

__all__ = ["PREVIEW", "GraphController"]

PREVIEW = 200
"""Characters of a state's output quoted when no edge matches."""


class GraphController(Container):
    """Visits states along the first matching edge until END or ``maxSteps``."""

    kind = "graph"

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement)
        step = self.step
        assert step.graph is not None
        self.graph = step.graph
        self.edges: dict[str, list[tuple[int, Edge]]] = {name: [] for name in self.graph.states}
        # A state's step_start index is its place among the states, as declared.
        count = len(self.graph.states)
        self.places = {name: (n, count) for n, name in enumerate(self.graph.states)}
        for index, edge in enumerate(self.graph.edges):
            self.edges.setdefault(edge.from_, []).append((index, edge))
        self.path: list[str] = []
        self.visits: dict[str, int] = {}
        self.previous: dict[str, str] = {}
        self.states = Scope(self.scope)
        self.last: StepRecord | None = None

    def start_data(self, attempt: int) -> StepStart:
        """Where the graph starts and how far it may go."""
        graph = self.graph
        index, total = self.position
        return StepStart(
            kind=self.kind,
            attempt=attempt,
            start=graph.start,
            max_steps=graph.max_steps,
            index=index,
            total=total,
        )

    async def begin(self) -> None:
        """Visits the start state, in a fresh state."""
        self.path = []
        self.visits = {}
        self.previous = {}
        self.states = Scope(self.scope)
        self.last = None
        await self._visit(self.graph.start, self.brief)

    async def _visit(self, state: str, brief: Brief) -> None:
        if self.stopping is not None:
            await self._end("cancelled", "cancelled")
            return
        n = len(self.path)
        self.path.append(state)
        self.visits[state] = self.visits.get(state, 0) + 1
        body = self.graph.states[state]
        address = self.address.iteration(n).child(state)
        placement = Placement(
            self.run,
            self.document,
            state,
            body,
            self.states,
            self.reporter(n),
            self.places[state],
            brief,
        )
        self.children[n] = self.run.spawn_step(placement, address)

    async def child_done(self, key: int, record: StepRecord) -> None:
        """Routes from the state just visited, or ends the graph."""
        state = self.path[key]
        self.last = record
        self.states.record(state, record)
        if record.status == "cancelled" or self.stopping is not None:
            await self._end("cancelled", "cancelled")
            return
        if record.status == "waiting":  # the state waits for a person: no edge to take yet
            await self._end("waiting", "waiting")
            return
        body = self.graph.states[state]
        if record.status == "failed" and body.on_error != "continue":
            await self._end("failed", "failed", record.error)
            return
        try:
            chosen = await self._route(state, key, record)
        except Exception as error:  # a bad edge condition fails the graph, naming it
            await self._end("failed", "failed", work_error(error, self.here))
            return
        if chosen is None:
            if self.stopping is not None:  # cancelled while an async condition ran
                await self._end("cancelled", "cancelled")
            else:
                await self._end("failed", "failed", self._no_match(state, record))
            return
        index, edge, why = chosen
        self.run.journal.emit(
            EventType.GRAPH_TRANSITION,
            step_id=self.here,
            message=f"{state} -> {edge.to} ({why})",
            data=GraphTransition(
                from_=state,
                to=edge.to,
                step=key + 1,
                edge=index,
                condition=edge.condition,
                reason=why,
            ),
        )
        content = record.content or ""
        if edge.to == "END":
            await self._end("completed", "end")
        elif len(self.path) >= self.graph.max_steps:
            await self._at_limit(edge.to)
        else:
            self.previous[state] = content
            await self._visit(edge.to, self._brief(edge.to, state, content))

    async def _route(
        self, state: str, key: int, record: StepRecord
    ) -> tuple[int, Edge, str] | None:
        """The first edge out of ``state`` that applies; None when none does, or when the
        graph was cancelled while an async Python condition ran."""
        names: dict[str, object] | None = None  # built for the first condition only
        for index, edge in self.edges.get(state, ()):
            if edge.condition is None:
                return index, edge, "unconditional"
            if names is None:
                names = self._names(state, key, record)
            expression = compile_expression(edge.condition, step_ids=self.run.step_ids)
            if expression.is_async:
                # The actor takes no message while it awaits: the counts still hold.
                chosen = await self.park(
                    expression.evaluate_bool_async(names, what="edge condition")
                )
                if self.stopping is not None:
                    return None
            else:
                chosen = expression.evaluate_bool(names, what="edge condition")
            if chosen:
                return index, edge, f"condition {quote(edge.condition)} is true"
        return None

    def _names(self, state: str, key: int, record: StepRecord) -> dict[str, object]:
        """What an edge condition sees after visit ``key`` of ``state``."""
        names = self.states.activation(self.run.inputs)
        names["content"] = record.content or ""
        names["result"] = record.result
        names["status"] = record.status
        names["state"] = state
        names["step"] = key + 1
        # No message is taken while conditions run: the live counts cannot change under them.
        names["visits"] = self.visits
        return names

    def _no_match(self, state: str, record: StepRecord) -> ErrorInfo:
        candidates = "; ".join(
            f"-> {edge.to} if {edge.condition}" for _, edge in self.edges.get(state, ())
        )
        text = " ".join((record.content or "").split())
        shown = text if len(text) <= PREVIEW else text[: PREVIEW - 3] + "..."
        message = (
            f"no edge from state {state!r} matched (tried: {candidates or 'none'}); "
            f"its output was {shown!r}"
        )
        return ErrorInfo("NoEdgeMatched", message, self.here)

    def _brief(self, state: str, came_from: str, content: str) -> Brief:
        body = self.graph.states[state]
        again = self.graph.feedback_on_revisit and body.feedback is not False
        previous = self.previous.get(state) if again else None
        return amend(self.brief, routed_from=came_from, routed_content=content, previous=previous)

    async def _at_limit(self, following: str) -> None:
        policy = self.graph.on_max_steps
        if policy == "fail":
            message = (
                f"the graph reached maxSteps ({self.graph.max_steps}) without reaching END; "
                f"it would have gone on to {following!r}"
            )
            await self._end("failed", "maxSteps", ErrorInfo("MaxSteps", message, self.here))
            return
        await self._end("completed", "maxSteps", flagged=policy == "returnWithFlag")

    async def _end(
        self, status: StepStatus, reason: str, error: ErrorInfo | None = None, flagged: bool = False
    ) -> None:
        if self._expired is not None and status == "cancelled":
            reason = "timeout"
        self.run.journal.graphs[self.here] = GraphSummary(list(self.path), reason)
        self.run.journal.emit(
            EventType.GRAPH_END,
            step_id=self.here,
            data=GraphEnd(path=list(self.path), termination_reason=reason, flagged=flagged),
        )
        result: dict[str, object] = {"path": list(self.path), "terminationReason": reason}
        if flagged:
            result["flagged"] = True
        content = self.last.content if self.last is not None else None
        await self.finish(Outcome(status, content, result, error))
