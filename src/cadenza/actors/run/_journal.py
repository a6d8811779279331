"""A run's journal: the one place where facts about the run are written down.

Every actor of a run reports through the journal: it numbers events, hands them
to observers and to the store, keeps the latest record of every executed
address, and adds up token usage. It lives on the event loop and is only ever
touched from there, one call at a time, so it needs no locks.

It is also where known secrets are masked (``_redact.scrub``): every event,
record, message and result passes through here before it reaches an observer
or the store, so a command that prints its environment or a model that echoes
a key leaves no copy anywhere.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import to_builtins

from cadenza._failpoints import ARMED, failpoint
from cadenza._redact import known_secrets, scrub
from cadenza.llm import usd
from cadenza.protocols import (
    AgentUsage,
    ErrorInfo,
    Event,
    EventType,
    GraphSummary,
    LoopSummary,
    MessageRecord,
    Payload,
    RunResult,
    RunStatus,
    Shared,
    StepEnd,
    StepError,
    StepEvent,
    StepRecord,
    StepReplayed,
    StepStart,
    Tokens,
    Usage,
    format_duration,
    timestamp,
)
from cadenza.store import RunStore

if TYPE_CHECKING:
    from ._replay import Replay

__all__ = [
    "MAX_RESULT_MESSAGES",
    "EventSink",
    "Position",
    "RunJournal",
    "ancestors",
    "clean_message",
    "clean_record",
]

MAX_RESULT_MESSAGES = 1_000
"""Messages a run's result lists (the newest); older ones are counted, not kept."""

MAX_UNSETTLED = 256
"""Decisions a run queues before one waits for their commit: bounds the writer's
queue, and what a kill can take back, when no effect settles them sooner."""

EventSink = Callable[[Event], None]
"""Receives every event of a run as it happens; must not block."""

Position = tuple[int, int]
"""zenflow's ``index`` and ``total`` of a step (`StepStart`): its place among its scope's."""


class RunJournal:
    """Numbers and records a run's events and step outcomes."""

    def __init__(self, run_id: str, workflow: str, store: RunStore) -> None:
        self.run_id = run_id
        self.workflow = workflow
        self.store = store
        self.records: dict[str, StepRecord] = {}
        self.loops: dict[str, LoopSummary] = {}
        self.graphs: dict[str, GraphSummary] = {}
        self.messages: deque[MessageRecord] = deque(maxlen=MAX_RESULT_MESSAGES)
        self.messages_omitted = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.llm_calls = 0
        self.cost = 0.0
        """USD of the run's priced model calls (docs/prices.md)."""
        self.unpriced_calls = 0
        self.agents: dict[str, list[float]] = {}
        """Per agent name: [prompt tokens, completion tokens, calls, cost]."""
        # USD of the calls made at each address, and under each address a cost budget
        # watches (`watch_cost`): what a step's or a loop's maxCost has spent.
        self._address_cost: dict[str, float] = {}
        self._watched: dict[str, float] = {}
        # Usage by address, taken by the step when it ends: steps that run at the
        # same time must not count each other's tokens.
        self._step_usage: dict[str, tuple[int, int, float | None]] = {}
        self.started = time.monotonic()
        self._seq = 0
        self._sinks: list[EventSink] = []
        self._restated: list[EventSink] = []
        # A leaf's step_start data by its position: the last one made there.
        self._leaf_starts: dict[Position, dict[str, Any]] = {}
        # The text of each model reply being streamed now, by step: what an observer
        # who joins mid-reply is shown first (`streaming`). The reply's ``done``, or
        # the step's next recorded event, ends it, and its entry.
        self._streaming: dict[str, Event] = {}
        self.replay: Replay | None = None
        """Set while a resumed run is replayed (see `resume_from`)."""
        # The durable horizon: decisions queued so far (`decided`), and how many of
        # them a flush has seen committed. An effect waits (`settle`) only while
        # the two differ.
        self._decided = 0
        self._settled = 0

    def resume_from(self, replay: Replay) -> None:
        """Continues an interrupted run's journal: its numbering, messages and usage.

        From now on an event that re-states one already in the log is dropped, and
        a record already durable is not written again.
        """
        self.replay = replay
        self._seq = replay.last_seq
        log = replay.log
        self.messages.clear()
        for message in log.messages:
            self.record_message(message)
        self.prompt_tokens = log.prompt_tokens
        self.completion_tokens = log.completion_tokens
        self.llm_calls = log.llm_calls
        self.cost = log.cost
        self.unpriced_calls = log.unpriced_calls
        self.agents = {name: list(usage) for name, usage in log.agents.items()}
        self._address_cost = dict(log.address_cost)

    def record_message(self, message: MessageRecord) -> None:
        """Keeps ``message`` for the result; past `MAX_RESULT_MESSAGES` the oldest is counted."""
        if len(self.messages) == MAX_RESULT_MESSAGES:
            self.messages_omitted += 1
        self.messages.append(message)

    def spend(
        self,
        address: str,
        prompt: int,
        completion: int,
        calls: int = 1,
        *,
        cost: float | None = None,
        agent: str | None = None,
    ) -> None:
        """Counts model usage for the run, for ``agent`` and for the step at ``address``.

        ``cost`` is the calls' USD; None: their model has no price.
        """
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.llm_calls += calls
        if cost is None:
            self.unpriced_calls += calls
        else:
            self.cost += cost
            self._address_cost[address] = self._address_cost.get(address, 0.0) + cost
            if self._watched:
                for prefix in ancestors(address):
                    if prefix in self._watched:
                        self._watched[prefix] += cost
        if agent is not None:
            usage = self.agents.setdefault(agent, [0, 0, 0, 0.0])
            usage[0] += prompt
            usage[1] += completion
            usage[2] += calls
            usage[3] += cost or 0.0
        self.spent_before(address, prompt, completion, cost)

    def spent_before(
        self, address: str, prompt: int, completion: int, cost: float | None = None
    ) -> None:
        """Counts, for the step at ``address`` only, usage of a call it replayed: the run's
        totals have it already (the log the run resumed from counted it)."""
        spent = self._step_usage.get(address, (0, 0, None))
        total = spent[2] if cost is None else (spent[2] or 0.0) + cost
        self._step_usage[address] = (spent[0] + prompt, spent[1] + completion, total)

    def take_usage(self, address: str) -> tuple[int, int, float | None]:
        """The (prompt, completion) tokens and the USD (None: nothing priced) spent at
        ``address`` since the last take."""
        return self._step_usage.pop(address, (0, 0, None))

    def spent_tokens(self) -> int:
        """The run's tokens so far, prompt and completion (``options.maxTokens``)."""
        return self.prompt_tokens + self.completion_tokens

    def spent_cost(self) -> float:
        """The run's USD so far (``options.maxCost``)."""
        return self.cost

    def agent_cost(self, agent: str) -> float:
        """The USD ``agent``'s calls cost so far (its ``maxCost``)."""
        usage = self.agents.get(agent)
        return 0.0 if usage is None else usage[3]

    def watch_cost(self, prefix: str) -> None:
        """From now on, counts the USD of the calls at and under ``prefix`` (`cost_under`).

        A resumed run counts the calls its log holds there too.
        """
        if prefix in self._watched:
            return
        before = 0.0
        if self.replay is not None:
            before = sum(
                cost for address, cost in self._address_cost.items() if _under(address, prefix)
            )
        self._watched[prefix] = before

    def cost_under(self, prefix: str) -> float:
        """The USD of the calls at and under the watched ``prefix`` (`watch_cost`)."""
        return self._watched.get(prefix, 0.0)

    def subscribe(self, sink: EventSink, *, restated: bool = False) -> Callable[[], None]:
        """Adds an observer of every later event; returns a function that removes it.

        With ``restated``, the sink also sees the events a resumed run states again
        that the log already holds (they are otherwise dropped, and not numbered):
        an observer that counts from scratch, as a control loop's budget does,
        needs them.
        """
        sinks = self._restated if restated else self._sinks
        sinks.append(sink)
        return lambda: sinks.remove(sink)

    @property
    def last_seq(self) -> int:
        """The ``seq`` of the newest event."""
        return self._seq

    def emit(
        self,
        type: str,
        *,
        step_id: str | None = None,
        agent: str | None = None,
        message: str | None = None,
        duration: float | None = None,
        tokens: Tokens | None = None,
        error: str | None = None,
        data: Payload | Shared | dict[str, Any] | None = None,
    ) -> Event:
        """Records an event, queues it for the store and shows it to observers.

        ``data`` is stored as the plain dict `to_data` makes of it (``Event.data``);
        a dict is taken as it is: the journal's own hot path builds one (`leaf_started`).
        """
        if data is None:
            plain = None
        elif isinstance(data, Shared):
            plain = data.data
        elif isinstance(data, dict):
            plain = data
        else:
            plain = to_builtins(data)  # `to_data`, without a call more on the hot path
        if known_secrets():
            message, error, plain = _scrubbed(message, error, plain)
        restated = self.replay is not None and self.replay.suppress(
            type, step_id, message, error, plain
        )
        if not restated:
            self._seq += 1
        event = Event(  # positional: the hot path of every step, twice
            type,
            timestamp(),
            self.run_id,
            self._seq,
            step_id,
            agent,
            message,
            None if duration is None else format_duration(duration),
            tokens,
            error,
            plain,
        )
        if restated:  # already in the log: shown to those who count from scratch only
            for sink in self._restated:
                sink(event)
            return event
        self.store.append_event(event)
        if self._streaming and step_id is not None:
            self._streaming.pop(step_id, None)
        for sink in self._sinks:
            sink(event)
        for sink in self._restated:
            sink(event)
        if ARMED:  # a crash test is on: spare every other run the call
            failpoint("event")
        return event

    def restate(
        self,
        type: str,
        *,
        step_id: str | None = None,
        agent: str | None = None,
        tokens: Tokens | None = None,
        data: Payload | None = None,
    ) -> None:
        """Shows an event the log already holds (a replayed call's) to the observers that
        count from scratch (`subscribe` with ``restated``), and to no one else: it is not
        stored or numbered again."""
        plain = None if data is None else to_builtins(data)
        event = Event(type, timestamp(), self.run_id, self._seq, step_id, agent, None, None)
        event = msgspec.structs.replace(event, tokens=tokens, data=plain)
        for sink in self._restated:
            sink(event)

    def output(
        self, step_id: str, agent: str | None, delta: str, done: bool, *, reasoning: bool = False
    ) -> None:
        """Shows observers text a model streamed: zenflow's ``output`` event, not recorded.

        It is neither stored nor numbered (``seq`` 0, left out of its JSON),
        so a resumed run does not restate it, the store does not grow per
        token, and the recorded events stay numbered without gaps. ``done``
        ends the reply's text; ``reasoning`` marks the model's reasoning.
        """
        if known_secrets():
            delta = scrub(delta)
        event = Event(
            EventType.OUTPUT,
            timestamp(),
            self.run_id,
            0,
            step_id,
            agent,
            delta=delta,
            done=done,
            reasoning=True if reasoning else None,
            agent_id=agent,
        )
        self._so_far(step_id, event)
        for sink in self._sinks:
            sink(event)

    def _so_far(self, step_id: str, event: Event) -> None:
        """Adds streamed text to its reply's text so far; ``done`` forgets the reply."""
        if event.done:
            self._streaming.pop(step_id, None)
            return
        known = self._streaming.get(step_id)
        text = event.delta or ""
        if known is not None:
            text = (known.delta or "") + text
        self._streaming[step_id] = msgspec.structs.replace(event, delta=text, data=_WHOLE)

    def streaming(self) -> list[Event]:
        """An ``output`` (data ``whole``) per reply being streamed now: its text so far."""
        return list(self._streaming.values())

    def relay(self, address: str, event: StepEvent) -> Event:
        """Records an event a worker sent for the step at ``address``.

        Its data is already plain: the worker's journal made it so (`emit`).
        """
        return self.emit(
            event.type,
            step_id=address,
            agent=event.agent,
            message=event.message,
            duration=event.duration,
            tokens=event.tokens,
            error=event.error,
            data=None if event.data is None else _Plain(event.data),
        )

    def step_started(self, address: str, start: StepStart, *, agent: str | None) -> None:
        """Records that an address began executing (``start``, its ``step_start`` data)."""
        self.leaf_started(address, start.kind, start.attempt, agent, start)

    def leaf_started(
        self, address: str, kind: str, attempt: int, agent: str | None, at: Position | StepStart
    ) -> None:
        """`step_started` for a leaf, whose data is its kind, attempt and position ``at``.

        Every step has one, so its data is built plain (`StepStart`'s fields) and
        made once for all the leaves that start at the same position the same
        way: the iterations of a loop, the items of a forEach (a container's
        ``start``, with more in it, is converted each time).
        """
        data: StepStart | dict[str, Any] | None
        if isinstance(at, StepStart):
            data = at
        else:
            data = self._leaf_starts.get(at)
            if data is None or data["kind"] != kind or data["attempt"] != attempt:
                data = {"kind": kind, "attempt": attempt, "index": at[0], "total": at[1]}
                self._leaf_starts[at] = data
        record = StepRecord(status="running", attempts=attempt)
        self.records[address] = record
        # A replayed container starts again, but its stored outcome stands until it ends.
        if self.replay is None or not self.replay.is_final(address):
            self.store.put_step(self.run_id, address, record)
        self.emit(EventType.STEP_START, step_id=address, agent=agent, data=data)
        if ARMED:  # a crash test is on: spare every other run the call
            failpoint("step.before_work")

    async def step_finished(
        self,
        address: str,
        record: StepRecord,
        *,
        agent: str | None = None,
        tokens: Tokens | None = None,
        cost: float | None = None,
        decision: bool = False,
    ) -> None:
        """Records an address's outcome; unless it is a ``decision``, waits until it is
        durable.

        Controllers start nothing that depends on the address before this returns.
        ``tokens`` and ``cost`` (USD) are what the step's model calls spent.

        An effect's outcome (a command ran, a person was asked) is durable before
        anything after it starts. A ``decision`` (an agent's answer, a verdict, a
        loop's or graph's outcome: nothing outside the run happened) is committed
        in the background, with the writes after it; the next effect waits for it
        (`settle`). A kill before then loses only decisions, which resume makes
        again: model calls may be sent twice, no effect happens twice.
        """
        if self.replay is not None:
            stored = self.replay.unchanged(address, record)
            if stored is not None:  # decided again, the same way: durable already
                self.records[address] = stored
                self._announce(address, stored, agent, tokens, cost)
                return
            self.replay.overwritten(address)
        if ARMED:  # a crash test is on: spare every other run the call
            failpoint("step.before_record")
        record = clean_record(record)
        self.records[address] = record
        self.store.put_step(self.run_id, address, record)
        self._announce(address, record, agent, tokens, cost)
        if decision and not ARMED:  # a crash test kills at durable points only
            self._decided += 1
            if self._decided - self._settled < MAX_UNSETTLED:
                return
        await self.durable()  # LeaseLost: another process drives the run now
        if ARMED:  # a crash test is on: spare every other run the call
            failpoint("step.after_record")

    def decided(self) -> None:
        """Notes a decision queued outside `step_finished` (a model call's record):
        the next effect waits until it is durable."""
        self._decided += 1

    async def durable(self) -> None:
        """Waits until everything the run has queued so far is committed.

        Raises:
            LeaseLost: Another process drives the run now; the writes were refused.
            StoreFailed: The run's writes could not be committed.
        """
        horizon = self._decided
        await self.store.flush(self.run_id)
        self._settled = max(self._settled, horizon)

    async def settle(self) -> None:
        """Waits, before an effect starts, until every decision before it is durable.

        An effect must not happen in a history that a kill could take back: a
        resumed run might decide otherwise, and the effect would have been for
        nothing, or happen twice. Free when nothing was decided since the last
        commit that anyone waited for.
        """
        if self._settled < self._decided:
            await self.durable()

    def step_replayed(self, address: str, record: StepRecord) -> None:
        """Notes a leaf's recorded outcome, reported again instead of executing the leaf.

        The event carries the tokens the step spent when it ran, for whoever counts.
        """
        self.records[address] = record
        tokens = self.replay.tokens(address) if self.replay is not None else None
        self.emit(
            EventType.STEP_REPLAYED,
            step_id=address,
            tokens=tokens,
            data=StepReplayed(status=record.status),
        )

    def _announce(
        self,
        address: str,
        record: StepRecord,
        agent: str | None,
        tokens: Tokens | None,
        cost: float | None = None,
    ) -> None:
        duration = record.duration_ms / 1000
        if cost is not None:
            cost = usd(cost)
        if record.status == "completed":
            ended = None
            if record.worker is not None or cost is not None:
                ended = StepEnd(worker=record.worker, cost=cost)
            self.emit(
                EventType.STEP_END,
                step_id=address,
                agent=agent,
                duration=duration,
                tokens=tokens,
                data=ended,
            )
        elif record.status == "skipped":
            self.emit(EventType.STEP_SKIPPED, step_id=address, message=_reason(record))
        elif record.status == "waiting":
            # The data is the question the record holds (`StepWaiting`), plain already.
            question = None if record.result is None else _Plain(record.result)
            self.emit(
                EventType.STEP_WAITING, step_id=address, message=record.content, data=question
            )
        else:
            self.emit(
                EventType.ERROR,
                step_id=address,
                agent=agent,
                duration=duration,
                tokens=tokens,
                error=_reason(record),
                data=StepError(status=record.status, worker=record.worker, cost=cost),
            )

    def usage(self) -> Usage:
        """Token usage, and its cost, so far."""
        return Usage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            llm_calls=self.llm_calls,
            cost=usd(self.cost),
            unpriced_calls=self.unpriced_calls,
            by_agent={
                name: AgentUsage(int(usage[0]), int(usage[1]), int(usage[2]), usd(usage[3]))
                for name, usage in sorted(self.agents.items())
            },
        )

    def result(
        self,
        status: RunStatus,
        output: Any,
        error: ErrorInfo | None,
        undelivered: list[MessageRecord] | None = None,
    ) -> RunResult:
        """The result JSON of the run as it stands."""
        return RunResult(
            run_id=self.run_id,
            workflow=self.workflow,
            status=status,
            output=scrub(output),
            steps=dict(self.records),
            loops=dict(self.loops),
            graphs=dict(self.graphs),
            messages=[clean_message(message) for message in self.messages],
            messages_omitted=self.messages_omitted,
            undelivered=[clean_message(m) for m in undelivered or ()],
            usage=self.usage(),
            error=error,
        )


def clean_record(record: StepRecord) -> StepRecord:
    """``record`` with known secrets masked in its content, result and error."""
    if not known_secrets():
        return record
    content, result = scrub(record.content), scrub(record.result)
    error = record.error
    if error is not None and scrub(error.message) is not error.message:
        error = msgspec.structs.replace(error, message=scrub(error.message))
    if content is record.content and result is record.result and error is record.error:
        return record
    return msgspec.structs.replace(record, content=content, result=result, error=error)


def clean_message(message: MessageRecord) -> MessageRecord:
    """``message`` with known secrets masked in its text."""
    text = scrub(message.text)
    return message if text is message.text else msgspec.structs.replace(message, text=text)


_WHOLE = {"whole": True}
"""`Output`'s data on the text so far of a reply, shown to an observer joining mid-reply."""


class _Plain(Shared):
    """Data that is a plain dict already: a worker's event's, a waiting record's question."""

    __slots__ = ()

    def __init__(self, data: dict[str, Any]) -> None:  # no payload: nothing to convert
        self.data = data


def _reason(record: StepRecord) -> str | None:
    if record.error is None:
        return None
    return f"{record.error.type}: {record.error.message}"


def ancestors(address: str) -> list[str]:
    """``address`` and the addresses it is under, outermost first.

    ``loop.0.fan[3].deploy`` is under ``loop``, ``loop.0``, ``loop.0.fan`` and
    ``loop.0.fan[3]``.
    """
    return [address[:i] for i, char in enumerate(address) if char in ".["] + [address]


def _under(address: str, prefix: str) -> bool:
    """Whether ``address`` is ``prefix`` or an address under it."""
    return address.startswith(prefix) and address[len(prefix) : len(prefix) + 1] in ("", ".", "[")


def _scrubbed(
    message: str | None, error: str | None, plain: Any
) -> tuple[str | None, str | None, Any]:
    """An event's text and data with known secrets masked (`scrub`); most events have
    no message or error, so those cost no call."""
    if message is not None:
        message = scrub(message)
    if error is not None:
        error = scrub(error)
    if plain is not None:
        plain = scrub(plain)
    return message, error, plain
