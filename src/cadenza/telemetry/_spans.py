"""A run's events turned into OpenTelemetry spans (see `cadenza.telemetry`).

`RunSpans` is a journal subscriber: every event costs one dict lookup of its
type, and the types that open or close a span do that work and nothing more.
Spans take their start and end times from the events, and their parents from
the addresses: the step ``dev-cycle.0.implement`` is a child of the iteration
``dev-cycle.0``, a child of the loop step ``dev-cycle``, under the run's span.

This module imports ``opentelemetry``; `cadenza.telemetry` imports it only when
telemetry is switched on, so the core package never needs the extra.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.trace import Span, Status, StatusCode, Tracer, set_span_in_context
from opentelemetry.util.types import AttributeValue

from cadenza.protocols import (
    AgentTurn,
    ControlDecision,
    Event,
    EventType,
    GraphEnd,
    GraphTransition,
    ItemEnd,
    ItemStart,
    IterationEnd,
    IterationStart,
    JudgeVerdict,
    LoopEnd,
    RunForked,
    RunResumed,
    StepEnd,
    StepError,
    StepStart,
    Tokens,
    ToolCall,
    WorkflowEnd,
    payload,
)
from cadenza.workflow import step_kind

if TYPE_CHECKING:
    from cadenza.actors.run import Replay, RunJournal

__all__ = ["RunSpans"]

INTERRUPTED: Final = "interrupted"
"""``cadenza.status`` of a span still open when its run ended or stopped being observed."""

_SCOPE_KINDS: Final = frozenset({"iteration", "item"})
"""``step_start`` kinds that record a loop iteration or forEach item, not a step."""

_JUDGE: Final = "judge"
"""``step_start``'s kind of a loop's ``untilAgent`` judge: no step kind, but a leaf."""


def _is_leaf(kind: str | None) -> bool:
    """Whether a span of this ``step_start`` kind has no step spans below it (only model
    and tool calls): its kind says so (`StepKind.leaf`), a judge's too."""
    if kind is None:
        return False
    known = step_kind(kind)
    return known.leaf if known is not None else kind == _JUDGE


Attributes = dict[str, AttributeValue]


class _Open:
    """A span this run has open, with what its children need to know of it."""

    __slots__ = ("kind", "span")

    def __init__(self, span: Span, kind: str | None) -> None:
        self.span = span
        self.kind = kind


class RunSpans:
    """Builds the spans of one run from its events.

    Args:
        tracer: Where spans go.
        journal: The run's journal: its id and workflow name go on every span,
            and a resumed run's replay state says which containers were running
            when the run stopped (they get a span again when a child starts).
    """

    def __init__(self, tracer: Tracer, journal: RunJournal) -> None:
        self._tracer = tracer
        self._journal = journal
        self._common: Attributes = {
            "cadenza.run_id": journal.run_id,
            "cadenza.workflow": journal.workflow,
        }
        self._workflow = journal.workflow
        self._replay: Replay | None = None
        self._run: Span | None = None
        self._steps: dict[str, _Open] = {}
        self._scopes: dict[str, _Open] = {}
        self._calls: dict[str, Span] = {}
        self._tools: dict[str, dict[str, Span]] = {}
        self._handlers: dict[str, Callable[[Event], None]] = {
            EventType.WORKFLOW_START: self._run_started,
            EventType.RUN_RESUMED: self._run_started,
            EventType.RUN_FORKED: self._run_started,
            EventType.WORKFLOW_END: self._run_ended,
            EventType.LOOP_END: self._loop_ended,
            EventType.GRAPH_END: self._graph_ended,
            EventType.GRAPH_TRANSITION: self._graph_transition,
            EventType.JUDGE_VERDICT: self._judge_verdict,
            EventType.DECISION: self._decision,
            EventType.ACTOR_CRASHED: self._actor_crashed,
        }
        # Events about one step, each handled with its address (one without is ignored).
        self._step_handlers: dict[str, Callable[[Event, str], None]] = {
            EventType.STEP_START: self._step_started,
            EventType.STEP_END: self._step_ended,
            EventType.ERROR: self._step_ended,
            EventType.STEP_WAITING: self._step_ended,
            EventType.STEP_RETRY: self._step_retried,
            EventType.STEP_SKIPPED: self._step_skipped,
            EventType.ITERATION_START: self._scope_started,
            EventType.ITEM_START: self._scope_started,
            EventType.ITERATION_END: self._scope_ended,
            EventType.ITEM_END: self._scope_ended,
            EventType.AGENT_TURN: self._agent_turn,
            EventType.TOOL_CALL: self._tool_call,
        }

    def on_event(self, event: Event) -> None:
        """The journal subscriber: one dict lookup, then the event's own handler."""
        handler = self._handlers.get(event.type)
        if handler is not None:
            handler(event)
            return
        at_step = self._step_handlers.get(event.type)
        if at_step is not None and event.step_id is not None:
            at_step(event, event.step_id)

    def close(self) -> None:
        """Ends every span still open, now: the run stopped without a ``workflow_end``."""
        self._end_all(time.time_ns())

    # -- the run -------------------------------------------------------------------

    def _run_started(self, event: Event) -> None:
        if self._run is not None:
            return
        attributes = dict(self._common)
        if event.type == EventType.RUN_RESUMED:
            self._replay = self._journal.replay
            attributes["cadenza.resumed"] = True
            after = payload(event, RunResumed).after_seq
            _put(attributes, "cadenza.resumed.after_seq", after)
        elif event.type == EventType.RUN_FORKED:  # replays its parent's records, as a resume
            self._replay = self._journal.replay
            forked = payload(event, RunForked)
            _put(attributes, "cadenza.forked_from", forked.parent_run_id)
            _put(attributes, "cadenza.forked_at", forked.at)
        self._run = self._tracer.start_span(
            f"run {self._workflow}",
            attributes=attributes,
            start_time=_nanoseconds(event.timestamp),
        )

    def _root(self, event: Event) -> Span:
        if self._run is None:  # observed from the middle of a run: it starts here
            self._run_started(event)
        assert self._run is not None
        return self._run

    def _run_ended(self, event: Event) -> None:
        status = payload(event, WorkflowEnd).status
        now = _nanoseconds(event.timestamp)
        self._end_all(now, keep_run=True)
        run = self._run
        if run is None:
            return
        self._run = None
        _tokens(run, event.tokens)
        _finish(run, status, event.error, now)

    def _end_all(self, now: int, *, keep_run: bool = False) -> None:
        """Ends the open spans, innermost first (all but the run's with ``keep_run``)."""
        for tools in self._tools.values():
            for span in tools.values():
                _finish(span, INTERRUPTED, None, now)
        self._tools.clear()
        for span in self._calls.values():
            _finish(span, INTERRUPTED, None, now)
        self._calls.clear()
        opened = [*self._steps.items(), *self._scopes.items()]
        opened.sort(key=lambda item: len(item[0]), reverse=True)  # deeper addresses first
        records = self._journal.records if keep_run else {}
        for address, record in opened:
            # At the run's end, a span still open is a resumed container whose end
            # re-stated its earlier outcome (the journal drops such repeats): its
            # record says how it ended.
            stored = records.get(address)
            if stored is None or stored.status == "running":
                _finish(record.span, INTERRUPTED, None, now)
            else:
                error = stored.error
                reason = None if error is None else f"{error.type}: {error.message}"
                _finish(record.span, stored.status, reason, now)
        self._steps.clear()
        self._scopes.clear()
        if not keep_run and self._run is not None:
            _finish(self._run, INTERRUPTED, None, now)
            self._run = None

    # -- steps ---------------------------------------------------------------------

    def _step_started(self, event: Event, address: str) -> None:
        start = payload(event, StepStart)
        kind = start.kind
        if kind in _SCOPE_KINDS:  # a multi-step body's own record: the scope's span
            self._open_scope(address, event)
            return
        # A loop's or forEach's single-step body runs at its iteration's address.
        scope = self._scopes.get(address)
        if scope is None and self._replay is not None and _is_scope(address):
            scope = self._resumed(address, event)
        attributes = self._attributes(address)
        if scope is not None:
            parent = scope.span
        else:
            parent, graph_visit = self._ancestor(address, event)
            if graph_visit is not None:
                attributes["cadenza.graph.state"] = graph_visit[1]
                attributes["cadenza.graph.visit"] = graph_visit[0]
        _put(attributes, "cadenza.step.kind", kind)
        _put(attributes, "cadenza.attempt", start.attempt)
        _put(attributes, "cadenza.agent", event.agent)
        span = self._start(f"step {_name(address)}", parent, attributes, event)
        self._steps[address] = _Open(span, kind)

    def _step_ended(self, event: Event, address: str) -> None:
        worker: str | None = None
        if event.type == EventType.STEP_END:
            status, worker = "completed", payload(event, StepEnd).worker
        elif event.type == EventType.STEP_WAITING:
            status = "waiting"
        else:
            failed = payload(event, StepError)
            status, worker = failed.status or "failed", failed.worker
        now = _nanoseconds(event.timestamp)
        self._end_calls(address, status, event.error, now)
        record = self._steps.pop(address, None)
        if record is None:
            scope = self._scopes.get(address)
            if scope is not None:  # an iteration's record: its iteration_end ends the span
                _tokens(scope.span, event.tokens)
                _status(scope.span, status, event.error, now)
            return
        if not _is_leaf(record.kind):
            self._end_inside(address, now)
        span = record.span
        _tokens(span, event.tokens)
        if worker is not None:
            span.set_attribute("cadenza.worker", worker)
        _finish(span, status, event.error, now)

    def _step_retried(self, event: Event, address: str) -> None:
        now = _nanoseconds(event.timestamp)
        self._end_calls(address, "failed", event.error, now)
        record = self._steps.pop(address, None)
        if record is not None:
            if not _is_leaf(record.kind):
                self._end_inside(address, now)
            record.span.set_attribute("cadenza.retried", True)
            _finish(record.span, "failed", event.error, now)

    def _end_inside(self, address: str, now: int) -> None:
        """Ends what a container that ends left open below it (none, as a rule), so a
        retry's iterations, at the same addresses, start spans of their own."""
        inside = (address + ".", address + "[")
        for opened in (self._steps, self._scopes):
            for below in [a for a in opened if a.startswith(inside)]:
                self._end_calls(below, INTERRUPTED, None, now)
                _finish(opened.pop(below).span, INTERRUPTED, None, now)

    def _step_skipped(self, event: Event, address: str) -> None:
        scope = self._scopes.get(address)
        parent = scope.span if scope is not None else self._ancestor(address, event)[0]
        attributes = self._attributes(address)
        _put(attributes, "cadenza.skip_reason", event.message)
        span = self._start(f"step {_name(address)}", parent, attributes, event)
        _finish(span, "skipped", None, _nanoseconds(event.timestamp))

    # -- iterations, items, loops, graphs ----------------------------------------------

    def _scope_started(self, event: Event, address: str) -> None:
        self._open_scope(address, event)

    def _open_scope(self, address: str, event: Event) -> _Open:
        """The span of iteration ``loop.N`` or item ``loop[N]``, opened once."""
        record = self._scopes.get(address)
        if record is None:
            parent = self._parent_of(address, event)
            attributes = self._attributes(address)
            if address.endswith("]"):
                name = f"item {_name(address)}"
                attributes["cadenza.index"] = int(address[address.rindex("[") + 1 : -1])
            else:
                name = f"iteration {_name(address)}"
                attributes["cadenza.iteration"] = int(address[address.rindex(".") + 1 :])
            span = self._start(name, parent, attributes, event)
            record = self._scopes[address] = _Open(span, None)
        if event.type == EventType.ITERATION_START:
            cap = payload(event, IterationStart).max_iterations
            _put_on(record.span, "cadenza.iteration.max", cap)
        elif event.type == EventType.ITEM_START:
            _put_on(record.span, "cadenza.items.total", payload(event, ItemStart).total)
        return record

    def _scope_ended(self, event: Event, address: str) -> None:
        record = self._scopes.pop(address, None)
        if record is not None:
            if event.type == EventType.ITERATION_END:
                status = payload(event, IterationEnd).status
            else:
                status = payload(event, ItemEnd).status
            _finish(record.span, status, None, _nanoseconds(event.timestamp))

    def _loop_ended(self, event: Event) -> None:
        record = self._steps.get(event.step_id or "")
        if record is None:
            return
        ended = payload(event, LoopEnd)
        _put_on(record.span, "cadenza.loop.iterations", ended.iterations)
        _put_on(record.span, "cadenza.termination_reason", ended.termination_reason)
        if ended.flagged:
            record.span.set_attribute("cadenza.loop.flagged", True)

    def _graph_ended(self, event: Event) -> None:
        record = self._steps.get(event.step_id or "")
        if record is None:
            return
        ended = payload(event, GraphEnd)
        record.span.set_attribute("cadenza.graph.path", list(ended.path))
        _put_on(record.span, "cadenza.termination_reason", ended.termination_reason)

    def _graph_transition(self, event: Event) -> None:
        taken = payload(event, GraphTransition)
        graph = "cadenza.graph."
        names = ("from", "to", "step", "edge", "reason")
        values = (taken.from_, taken.to, taken.step, taken.edge, taken.reason)
        self._annotate(
            event, EventType.GRAPH_TRANSITION, _present(zip(names, values, strict=True), graph)
        )

    def _judge_verdict(self, event: Event) -> None:
        verdict = payload(event, JudgeVerdict)
        pairs = (("iteration", verdict.iteration), ("judge.done", verdict.done))
        self._annotate(
            event, EventType.JUDGE_VERDICT, _present((*pairs, ("error", event.error)), "cadenza.")
        )

    def _decision(self, event: Event) -> None:
        ruled = payload(event, ControlDecision)
        pairs = (("iteration", ruled.iteration), ("decision", ruled.decision))
        self._annotate(
            event, EventType.DECISION, _present((*pairs, ("score", ruled.score)), "cadenza.")
        )

    def _actor_crashed(self, event: Event) -> None:
        if event.error is None:
            return
        error_type, message = _split(event.error)
        attributes: Attributes = {"exception.type": error_type, "exception.message": message}
        _put(attributes, "cadenza.address", event.step_id)
        self._root(event).add_event("exception", attributes, _nanoseconds(event.timestamp))

    def _annotate(self, event: Event, name: str, attributes: Attributes) -> None:
        address = event.step_id
        record = None if address is None else self._steps.get(address) or self._scopes.get(address)
        span = record.span if record is not None else self._parent_of(address, event)
        span.add_event(name, attributes, _nanoseconds(event.timestamp))

    # -- model and tool calls ------------------------------------------------------------

    def _agent_turn(self, event: Event, address: str) -> None:
        turn = payload(event, AgentTurn)
        if turn.phase == "request":
            parent = self._steps.get(address)
            attributes = self._attributes(address)
            provider, _, name = turn.model.rpartition(":")
            attributes["gen_ai.operation.name"] = "chat"
            if name:
                attributes["gen_ai.request.model"] = name
            if provider:
                attributes["gen_ai.provider.name"] = provider
            _put(attributes, "cadenza.llm.turn", turn.turn)
            _put(attributes, "cadenza.agent", event.agent)
            span = self._start(
                f"chat {name}" if name else "chat",
                parent.span if parent is not None else self._parent_of(address, event),
                attributes,
                event,
            )
            previous = self._calls.pop(address, None)
            if previous is not None:  # never answered: the step moved on without it
                _finish(previous, INTERRUPTED, None, _nanoseconds(event.timestamp))
            self._calls[address] = span
            return
        call = self._calls.pop(address, None)
        if call is None:
            return
        tokens = event.tokens
        if tokens is not None:
            call.set_attribute("gen_ai.usage.input_tokens", tokens.prompt)
            call.set_attribute("gen_ai.usage.output_tokens", tokens.completion)
            _tokens(call, tokens)
        _put_on(call, "cadenza.llm.attempts", turn.attempts)
        _finish(call, "completed", None, _nanoseconds(event.timestamp))

    def _tool_call(self, event: Event, address: str) -> None:
        called = payload(event, ToolCall)
        call_id = called.tool_call_id
        if called.phase == "start":
            parent = self._steps.get(address)
            attributes = self._attributes(address)
            tool = called.tool_name
            attributes["gen_ai.operation.name"] = "execute_tool"
            attributes["gen_ai.tool.name"] = tool
            attributes["gen_ai.tool.call.id"] = call_id
            span = self._start(
                f"execute_tool {tool}",
                parent.span if parent is not None else self._parent_of(address, event),
                attributes,
                event,
            )
            self._tools.setdefault(address, {})[call_id] = span
            return
        tools = self._tools.get(address)
        ended = None if tools is None else tools.pop(call_id, None)
        if ended is None:
            return
        error = called.error
        if isinstance(error, str):  # the model hears of it; the step goes on
            if not error.partition(": ")[0].isidentifier():  # a tool's own raise is typed
                error = f"ToolError: {error}"
            _finish(ended, "failed", error, _nanoseconds(event.timestamp))
        else:
            _finish(ended, "completed", None, _nanoseconds(event.timestamp))

    def _end_calls(self, address: str, status: str, error: str | None, now: int) -> None:
        """Ends the model and tool calls a step left open: they end with it, as it did."""
        call = self._calls.pop(address, None)
        if call is not None:
            _finish(call, status, error, now)
        tools = self._tools.pop(address, None)
        if tools:
            for span in tools.values():
                _finish(span, status, error, now)

    # -- parents -----------------------------------------------------------------------

    def _attributes(self, address: str) -> Attributes:
        attributes = dict(self._common)
        attributes["cadenza.address"] = address
        return attributes

    def _start(self, name: str, parent: Span, attributes: Attributes, event: Event) -> Span:
        return self._tracer.start_span(
            name,
            context=set_span_in_context(parent),
            attributes=attributes,
            start_time=_nanoseconds(event.timestamp),
        )

    def _parent_of(self, address: str | None, event: Event) -> Span:
        """The span of the nearest enclosing address, or the run's."""
        if address is None:
            return self._root(event)
        return self._ancestor(address, event)[0]

    def _ancestor(self, address: str, event: Event) -> tuple[Span, tuple[int, str] | None]:
        """The span enclosing ``address`` (not its own), and for a graph state's visit
        ``graph.N.S`` the visit's number and state.

        Each enclosing address is tried innermost first: a step before an
        iteration at the same address (a loop that is the body of a loop).
        """
        prefix = _up(address)
        while prefix is not None:
            record = self._steps.get(prefix) or self._scopes.get(prefix)
            if record is None and self._replay is not None:
                record = self._resumed(prefix, event)
            if record is not None:
                visit = None
                if record.kind == "graph":
                    rest = address[len(prefix) + 1 :].split(".")
                    if len(rest) == 2 and rest[0].isdigit():
                        visit = (int(rest[0]), rest[1])
                return record.span, visit
            prefix = _up(prefix)
        return self._root(event), None

    def _resumed(self, address: str, event: Event) -> _Open | None:
        """In a resumed run, a span for a container the interrupted run had started.

        Its own start was recorded before the interruption (the resumed run does not
        repeat it), so the span starts when its first child starts again.
        """
        replay = self._replay
        assert replay is not None
        prior = replay.prior.get(address)
        # Running when the process stopped, or waiting for the answer it now has.
        running = prior is not None and prior.status in ("running", "waiting")
        if _is_scope(address):
            if not (running or replay.launched(address)):
                return None  # a graph visit's number: not a span of its own
            record = self._open_scope(address, event)
        elif running:
            parent = self._parent_of(address, event)
            attributes = self._attributes(address)
            span = self._start(f"step {_name(address)}", parent, attributes, event)
            record = self._steps[address] = _Open(span, None)
        else:
            return None
        record.span.set_attribute("cadenza.resumed", True)
        return record


def _up(address: str) -> str | None:
    """The address one level up: ``a.0.b`` -> ``a.0``, ``a[2]`` -> ``a``, ``a`` -> None."""
    if address.endswith("]"):
        return address[: address.rindex("[")]
    cut = address.rfind(".")
    return None if cut < 0 else address[:cut]


def _is_scope(address: str) -> bool:
    """Whether ``address`` names an iteration (``loop.N``) or an item (``loop[N]``)."""
    return address.endswith("]") or address[address.rfind(".") + 1 :].isdigit()


def _name(address: str) -> str:
    """The step id an address belongs to: ``dev-cycle.0.implement`` -> ``implement``,
    ``dev-cycle.0`` -> ``dev-cycle``, ``fan[3]`` -> ``fan``."""
    for segment in reversed(address.split(".")):
        if not segment.isdigit():
            return segment.partition("[")[0]
    return address


def _present(pairs: Iterable[tuple[str, Any]], prefix: str) -> Attributes:
    """The attributes ``prefix + name`` of the values OpenTelemetry can hold (no None)."""
    attributes: Attributes = {}
    for name, value in pairs:
        _put(attributes, prefix + name, value)
    return attributes


def _put(attributes: Attributes, key: str, value: Any) -> None:
    if isinstance(value, str | bool | int | float):
        attributes[key] = value


def _put_on(span: Span, key: str, value: Any) -> None:
    if isinstance(value, str | bool | int | float):
        span.set_attribute(key, value)


def _tokens(span: Span, tokens: Tokens | None) -> None:
    if tokens is not None:
        span.set_attribute("cadenza.tokens.prompt", tokens.prompt)
        span.set_attribute("cadenza.tokens.completion", tokens.completion)
        span.set_attribute("cadenza.tokens.total", tokens.total)


def _split(error: str) -> tuple[str, str]:
    """``"Timeout: took too long"`` -> ``("Timeout", "took too long")``."""
    kind, colon, message = error.partition(": ")
    if colon and kind.isidentifier():
        return kind, message
    return "Error", error


def _status(span: Span, status: str | None, error: str | None, now: int) -> None:
    """Sets ``cadenza.status``; a failure is an ERROR with an ``exception`` event."""
    if status is not None:
        span.set_attribute("cadenza.status", status)
    if status == "failed":
        if error is None:
            span.set_status(Status(StatusCode.ERROR))
            return
        error_type, message = _split(error)
        span.add_event(
            "exception", {"exception.type": error_type, "exception.message": message}, now
        )
        span.set_status(Status(StatusCode.ERROR, error))


def _finish(span: Span, status: str | None, error: str | None, now: int) -> None:
    _status(span, status, error, now)
    span.end(now)


_second: tuple[str, int] = ("", 0)


def _nanoseconds(stamp: str) -> int:
    """An event's RFC 3339 timestamp (``2026-11-21T10:00:00.123Z``) as epoch nanoseconds."""
    global _second
    whole = stamp[:19]
    if _second[0] != whole:  # events come in bursts within a second: parse it once
        _second = (whole, calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")))
    return _second[1] * 1_000_000_000 + int(stamp[20:23]) * 1_000_000
