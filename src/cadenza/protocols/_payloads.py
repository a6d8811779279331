"""Event payloads: one msgspec Struct per event type, the ``data`` of its `Event`.

The envelope's ``type`` is the tag: `PAYLOADS` maps it to the Struct its
``data`` holds, so the union needs no tag field of its own and the NDJSON line
stays what it was. Emitters build a Struct; the journal stores it as the plain
dict `to_data` makes (``Event.data``), key for key and in the same order as the
dicts built by hand before, because a resumed run matches re-emitted decision
events against the stored ones by their encoded bytes. Readers take the Struct
back with `payload`, so a misspelt field is a type error, not a silent None.

Field order is wire order. A key that an event sometimes leaves out is a field
whose default (None, or UNSET where null is a value it can carry) is omitted; a
key it always writes, null or not, has no default. A key added later goes last,
with a default, so that the events stored before it still read.

The stream is zenflow's (its spec, section 14): `ZENFLOW` lists zenflow's event
types and the ``data`` keys zenflow gives each. Where Cadenza emits one of those
types, every key its Struct has beyond zenflow's is a Cadenza extension
(`extra_keys`), and the types zenflow lacks are Cadenza's own (`ADDED_TYPES`);
docs/events.md lists both, and tests/test_zenflow_events.py holds the docs, this
registry and what the examples really emit to one another.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from cadenza.errors import CorruptRecord

from ._events import Event, EventType
from ._result import StepRecord

# The event payloads and what describes them: `cadenza.events` offers exactly these.
# Helpers for the emitters (`Shared`, `to_data`, `iteration_start`/`_end`) are
# imported by name.
__all__ = [
    "ADDED_TYPES",
    "NO_PAYLOAD",
    "PAYLOADS",
    "ZENFLOW",
    "AgentInboxDrain",
    "AgentMemory",
    "AgentTurn",
    "CallsReplayed",
    "Checkpoint",
    "ControlDecision",
    "CoordinatorWake",
    "ForEachMessage",
    "GraphEnd",
    "GraphTransition",
    "ItemEnd",
    "ItemStart",
    "IterationEnd",
    "IterationStart",
    "JudgeVerdict",
    "LoopEnd",
    "MaxWakeCyclesWarning",
    "McpToolFailed",
    "MessageDropped",
    "MessageSent",
    "MessageUndelivered",
    "Output",
    "Payload",
    "ReplayDiverged",
    "ResultRejected",
    "RunForked",
    "RunResumed",
    "SignalReceived",
    "StepDispatched",
    "StepEnd",
    "StepError",
    "StepQueued",
    "StepReplayed",
    "StepRequeued",
    "StepRestart",
    "StepRetry",
    "StepStart",
    "StepWaiting",
    "ToolCall",
    "ToolPermission",
    "WorkflowEnd",
    "WorkflowStart",
    "WorktreeDone",
    "WorktreeKept",
    "ZenflowKeys",
    "extra_keys",
    "payload",
]

P = TypeVar("P", bound="Payload")


class Payload(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The ``data`` of one event type; `event_type` names it.

    Subclasses inherit ``omit_defaults``; they state ``frozen`` again (for mypy) and
    ``kw_only`` (a per-class setting).
    """

    event_type: ClassVar[str]


# -- the run ---------------------------------------------------------------------------


class WorkflowStart(Payload, frozen=True, kw_only=True):
    """A run began; ``total`` is the number of top-level steps."""

    event_type: ClassVar[str] = EventType.WORKFLOW_START
    total: int


class WorkflowEnd(Payload, frozen=True, kw_only=True):
    """A run ended with ``status``."""

    event_type: ClassVar[str] = EventType.WORKFLOW_END
    status: str


class RunResumed(Payload, frozen=True, kw_only=True):
    """A run resumed: ``replayable`` recorded outcomes, after event ``after_seq``."""

    event_type: ClassVar[str] = EventType.RUN_RESUMED
    replayable: int
    after_seq: int = msgspec.field(name="afterSeq")


class RunForked(Payload, frozen=True, kw_only=True):
    """A fork of run ``parent_run_id`` starts at address ``at`` (`Runtime.fork`).

    The events before it are the parent's up to ``at``'s start (``after_seq`` of
    them); ``replayable`` outcomes of the parent's are replayed, those at
    ``edited`` with the output the caller gave them.
    """

    event_type: ClassVar[str] = EventType.RUN_FORKED
    parent_run_id: str = msgspec.field(name="parentRunId")
    at: str
    replayable: int
    after_seq: int = msgspec.field(name="afterSeq")
    edited: list[str] = []


class SignalReceived(Payload, frozen=True, kw_only=True):
    """A person answered a waiting step (``cadenza signal``)."""

    event_type: ClassVar[str] = EventType.SIGNAL_RECEIVED
    answer: Any


# -- steps -----------------------------------------------------------------------------


class StepStart(Payload, frozen=True, kw_only=True):
    """An address began executing; containers add what they are (zenflow's keys).

    ``index`` and ``total`` are zenflow's: the step's position in the topological
    order of the steps declared with it (zenflow's: dependencies first, else in
    declaration order), and how many they are; a graph state's, its place among
    the graph's states. An address no one declared (an iteration, a forEach
    item, a judge, a control loop's calls) has the position of the step it
    belongs to, as zenflow gives a loop's iterations the loop's. Every new
    event has them; events stored before they existed do not (None).
    """

    event_type: ClassVar[str] = EventType.STEP_START
    kind: str
    attempt: int
    loop_type: str | None = None
    max_iterations: int | None = msgspec.field(default=None, name="maxIterations")
    include: str | None = None
    role: str | None = None
    start: str | None = None
    max_steps: int | None = msgspec.field(default=None, name="maxSteps")
    index: int | None = None
    total: int | None = None
    items: int | None = None


class StepEnd(Payload, frozen=True, kw_only=True):
    """An address completed; ``worker`` ran it, its model calls cost ``cost`` USD (a
    step with neither carries no data)."""

    event_type: ClassVar[str] = EventType.STEP_END
    worker: str | None = None
    cost: float | None = None
    """USD of the step's priced model calls (absent: it made none)."""


class StepError(Payload, frozen=True, kw_only=True):
    """An address ended failed or cancelled (``status``); the coordinator's carries none."""

    event_type: ClassVar[str] = EventType.ERROR
    status: str | None = None
    worker: str | None = None
    cost: float | None = None
    """USD of the step's priced model calls (absent: it made none)."""


class StepRetry(Payload, frozen=True, kw_only=True):
    """Attempt ``attempt`` of ``of`` failed; the next one starts."""

    event_type: ClassVar[str] = EventType.STEP_RETRY
    attempt: int
    of: int


class StepRestart(Payload, frozen=True, kw_only=True):
    """The supervisor of a list of steps runs this one again (``options.supervisor``).

    ``cause`` is the step whose failure led to it: this one, or under ``one_for_all``
    and ``rest_for_one`` a sibling; ``restart`` counts the list's restarts so far.
    """

    event_type: ClassVar[str] = EventType.STEP_RESTART
    strategy: str
    cause: str
    restart: int
    max_restarts: int = msgspec.field(name="maxRestarts")


class StepReplayed(Payload, frozen=True, kw_only=True):
    """A leaf's recorded outcome was reported again instead of running it."""

    event_type: ClassVar[str] = EventType.STEP_REPLAYED
    status: str


class CallsReplayed(Payload, frozen=True, kw_only=True):
    """A resumed step took ``calls`` answers from its journal (``model`` of them model
    replies, ``tools`` tool outputs) instead of making the calls again."""

    event_type: ClassVar[str] = EventType.CALLS_REPLAYED
    calls: int
    model: int
    tools: int


class ReplayDiverged(Payload, frozen=True, kw_only=True):
    """A resumed step's call ``seq`` is not the one its journal records: from there on
    it calls live. ``reason`` says what differs."""

    event_type: ClassVar[str] = EventType.REPLAY_DIVERGED
    seq: int
    kind: str
    reason: str


class StepWaiting(Payload, frozen=True, kw_only=True):
    """A step waits for a person: the question its record holds."""

    event_type: ClassVar[str] = EventType.STEP_WAITING
    prompt: str
    schema: dict[str, Any] | None


# -- loops, forEach, graphs ------------------------------------------------------------


class ForEachMessage(Payload, frozen=True, kw_only=True):
    """The ``message`` a forEach writes as it starts: how many items (None: a generator's,
    unknown until it ends), how many at once."""

    event_type: ClassVar[str] = EventType.MESSAGE
    items: int | None
    max_concurrency: int = msgspec.field(name="maxConcurrency")


class IterationStart(Payload, frozen=True, kw_only=True):
    """A repeat-until or control iteration began."""

    event_type: ClassVar[str] = EventType.ITERATION_START
    iteration: int
    max_iterations: int = msgspec.field(name="maxIterations")


class IterationEnd(Payload, frozen=True, kw_only=True):
    """An iteration ended with ``status``."""

    event_type: ClassVar[str] = EventType.ITERATION_END
    iteration: int
    status: str


class JudgeVerdict(Payload, frozen=True, kw_only=True):
    """An ``untilAgent`` judged an iteration; ``done`` is None without a valid verdict."""

    event_type: ClassVar[str] = EventType.JUDGE_VERDICT
    iteration: int
    done: bool | None
    reason: Any  # the judge's ``reason``, as its result holds it (a string, as a rule)


class LoopEnd(Payload, frozen=True, kw_only=True):
    """A loop, forEach or control loop stopped, after ``iterations``, and why."""

    event_type: ClassVar[str] = EventType.LOOP_END
    iterations: int
    termination_reason: str = msgspec.field(name="terminationReason")
    flagged: bool


class ItemStart(Payload, frozen=True, kw_only=True):
    """A forEach item began; ``total`` items in all (None: a generator's, not yet known)."""

    event_type: ClassVar[str] = EventType.ITEM_START
    total: int | None


class ItemEnd(Payload, frozen=True, kw_only=True):
    """A forEach item ended with ``status``."""

    event_type: ClassVar[str] = EventType.ITEM_END
    status: str


class GraphTransition(Payload, frozen=True, kw_only=True):
    """A graph took edge number ``edge`` after visit ``step``."""

    event_type: ClassVar[str] = EventType.GRAPH_TRANSITION
    from_: str = msgspec.field(name="from")
    to: str
    step: int
    edge: int
    condition: str | None
    reason: str


class GraphEnd(Payload, frozen=True, kw_only=True):
    """A graph stopped: the states it visited, and why."""

    event_type: ClassVar[str] = EventType.GRAPH_END
    path: list[str]
    termination_reason: str = msgspec.field(name="terminationReason")
    flagged: bool


class Checkpoint(Payload, frozen=True, kw_only=True):
    """A ``keepLast`` loop goes on after ``iteration``: what a resume restarts it from."""

    event_type: ClassVar[str] = EventType.CHECKPOINT
    iteration: int
    block: str
    last: StepRecord | None


class ControlDecision(Payload, frozen=True, kw_only=True):
    """A control loop ruled on an iteration; ``status`` is its terminal status, or None."""

    event_type: ClassVar[str] = EventType.DECISION
    iteration: int
    decision: str
    reason: str
    feedback: str
    score: float | None
    status: str | None


# -- agents and messages ---------------------------------------------------------------


class AgentTurn(Payload, frozen=True, kw_only=True):
    """A model call: its ``request`` (with ``turn``), then its ``response`` (``attempts``).

    A ``scripted`` model's response also says which reply of the script it was
    (``script_position``, 0-based): a resumed run gives those replies out once,
    and what the call cost in USD (``cost``) when its model has a price.
    """

    event_type: ClassVar[str] = EventType.AGENT_TURN
    phase: str
    turn: int | None = None
    model: str
    attempts: int | None = None
    script_position: int | None = None
    cost: float | None = None
    """A response's USD, from the run's price table (absent: the model has no price)."""
    thinking: str | None = None
    """A request's ``thinking`` level, when the agent or the run set one."""
    reasoning_tokens: int | None = None
    """Of a response's completion tokens, those the model spent reasoning, when the
    provider counts them apart."""


class ToolCall(Payload, frozen=True, kw_only=True):
    """A tool call's ``start``, then its ``end`` with its output, error (null or text)
    and ``duration`` (Go-style, as the envelope's: zenflow lists it among the keys)."""

    event_type: ClassVar[str] = EventType.TOOL_CALL
    phase: str
    tool_name: str
    tool_call_id: str
    input: str
    output: str | None = None
    error: str | UnsetType | None = UNSET
    duration: str | None = None


class AgentMemory(Payload, frozen=True, kw_only=True):
    """An agent visit's turns, kept under ``key`` for the loop's later visits."""

    event_type: ClassVar[str] = EventType.AGENT_MEMORY
    key: str
    turns: list[Any]


class MessageSent(Payload, frozen=True, kw_only=True):
    """A message was sent (``msg_type``: 0 info, see ``MSG_TYPES``)."""

    event_type: ClassVar[str] = EventType.MESSAGE_SENT
    from_: str = msgspec.field(name="from")
    to: str
    text: str
    msg_type: int


class MessageDropped(Payload, frozen=True, kw_only=True):
    """A message found no room; ``dropped`` counts a target's drops so far."""

    event_type: ClassVar[str] = EventType.MESSAGE_DROPPED
    from_: str = msgspec.field(name="from")
    to: str
    text: str | None = None
    msg_type: int
    reason: str
    dropped: int | None = None


class AgentInboxDrain(Payload, frozen=True, kw_only=True):
    """A step took a message from ``from_`` into its next turn."""

    event_type: ClassVar[str] = EventType.AGENT_INBOX_DRAIN
    from_: str = msgspec.field(name="from")
    msg_type: int


class MessageUndelivered(Payload, frozen=True, kw_only=True):
    """At the run's end, ``count`` messages still waited for ``to``."""

    event_type: ClassVar[str] = EventType.MESSAGE_UNDELIVERED
    to: str
    count: int


class CoordinatorWake(Payload, frozen=True, kw_only=True):
    """The coordinator agent woke for a message (``start``) and has answered it (``end``).

    ``from`` is the step whose message woke it. A resumed run wakes the agent
    again for a message whose wake did not reach its ``end``.
    """

    event_type: ClassVar[str] = EventType.COORDINATOR_WAKE
    phase: str
    from_: str = msgspec.field(name="from")


class MaxWakeCyclesWarning(Payload, frozen=True, kw_only=True):
    """The coordinator agent has used most of its wakes."""

    event_type: ClassVar[str] = EventType.MAX_WAKE_CYCLES_WARNING
    current_cycle: int
    max_cycles: int
    unread_remaining: int | None = None  # always written; None in events stored before it


class McpToolFailed(Payload, frozen=True, kw_only=True):
    """An MCP server failed on a tool call."""

    event_type: ClassVar[str] = EventType.MCP_TOOL_FAILED
    server: str
    tool: str
    error: str


class ToolPermission(Payload, frozen=True, kw_only=True):
    """The permission policy decided about a tool call, and who decided (``by``)."""

    event_type: ClassVar[str] = EventType.TOOL_PERMISSION
    tool_name: str
    tool_call_id: str
    allowed: bool
    by: str
    reason: str


class Output(Payload, frozen=True, kw_only=True):
    """zenflow's ``output`` (its text is the envelope's ``delta``): ``data`` only with ``whole``.

    With ``whole``, ``delta`` is all the reply's text so far: what an observer
    that joined mid-reply gets first, to replace (not extend) what it shows.
    """

    event_type: ClassVar[str] = EventType.OUTPUT
    whole: bool = False


class WorktreeDone(Payload, frozen=True, kw_only=True):
    """A step's worktree was removed; its changes are on ``branch`` (null: none)."""

    event_type: ClassVar[str] = EventType.WORKTREE_DONE
    branch: str | None
    commit: str | None


class WorktreeKept(Payload, frozen=True, kw_only=True):
    """A failed step's worktree is kept, at ``path``, for a person to look at."""

    event_type: ClassVar[str] = EventType.WORKTREE_KEPT
    path: str


# -- remote workers --------------------------------------------------------------------


class StepDispatched(Payload, frozen=True, kw_only=True):
    """A step attempt went to ``worker`` as ``job``, under fence ``dispatch``."""

    event_type: ClassVar[str] = EventType.STEP_DISPATCHED
    worker: str
    job: int
    dispatch: int


class StepQueued(Payload, frozen=True, kw_only=True):
    """A step waits for a worker."""

    event_type: ClassVar[str] = EventType.STEP_QUEUED
    job: int


class StepRequeued(Payload, frozen=True, kw_only=True):
    """A step's worker was lost; it goes out again."""

    event_type: ClassVar[str] = EventType.STEP_REQUEUED
    worker: str
    job: int
    dispatch: int
    reason: str


class ResultRejected(Payload, frozen=True, kw_only=True):
    """A stale result (fenced by ``dispatch``) was refused."""

    event_type: ClassVar[str] = EventType.RESULT_REJECTED
    worker: str
    job: int
    dispatch: int
    reason: str


PAYLOADS: dict[str, type[Payload]] = {
    kind.event_type: kind
    for kind in (
        WorkflowStart,
        WorkflowEnd,
        RunResumed,
        RunForked,
        SignalReceived,
        StepStart,
        StepEnd,
        StepError,
        StepRetry,
        StepRestart,
        StepReplayed,
        CallsReplayed,
        ReplayDiverged,
        StepWaiting,
        ForEachMessage,
        IterationStart,
        IterationEnd,
        JudgeVerdict,
        LoopEnd,
        ItemStart,
        ItemEnd,
        GraphTransition,
        GraphEnd,
        Checkpoint,
        ControlDecision,
        AgentTurn,
        ToolCall,
        AgentMemory,
        MessageSent,
        MessageDropped,
        AgentInboxDrain,
        MessageUndelivered,
        CoordinatorWake,
        MaxWakeCyclesWarning,
        McpToolFailed,
        ToolPermission,
        Output,
        WorktreeDone,
        WorktreeKept,
        StepDispatched,
        StepQueued,
        StepRequeued,
        ResultRejected,
    )
}
"""The payload Struct of every event type that carries data, by type."""

NO_PAYLOAD: frozenset[str] = frozenset(
    (
        EventType.STEP_SKIPPED,
        EventType.ACTOR_CRASHED,
        EventType.DEAD_LETTER,
        EventType.RUN_INTERRUPTED,
        EventType.COORDINATOR_NARRATION,
        EventType.COORDINATOR_SYNTHESIS,
        EventType.MAX_WAKE_CYCLES_REACHED,
    )
)
"""The event types that never carry data: their ``message`` or ``error`` says it all."""


class ZenflowKeys(NamedTuple):
    """The ``data`` keys zenflow's spec (section 14.2) gives one event type."""

    required: frozenset[str]
    """Always present (``tool_call`` and ``agent_turn`` add some by ``phase``: see
    tests/test_zenflow_events.py)."""
    optional: frozenset[str] = frozenset()
    """Present where they apply (a loop's ``loop_type``, an ``end``'s ``output``)."""

    @property
    def keys(self) -> frozenset[str]:
        """Every key zenflow defines for the type."""
        return self.required | self.optional


def _keys(required: str = "", optional: str = "") -> ZenflowKeys:
    return ZenflowKeys(frozenset(required.split()), frozenset(optional.split()))


ZENFLOW: Mapping[str, ZenflowKeys] = {
    "workflow_start": _keys("total"),
    "workflow_end": _keys(),
    "step_start": _keys("index total", "loop_type items include"),
    "step_end": _keys(),
    "step_skipped": _keys(),
    "error": _keys(),
    "agent_turn": _keys("phase model", "turn"),
    "tool_call": _keys(
        "phase tool_name tool_call_id input", "output duration error depth parentCallID"
    ),
    "message": _keys("", "reason messageCount"),
    "coordinator_narration": _keys(),
    "coordinator_message": _keys(),
    "coordinator_synthesis": _keys(),
    "coordinator_inbox_message": _keys("from type"),
    "message_sent": _keys("to text msg_type"),
    "message_dropped": _keys("reason from to msg_type"),
    "agent_inbox_drain": _keys("from msg_type"),
    "agent_idle": _keys("unread_count"),
    "agent_wake": _keys("message_count cycle"),
    "max_wake_cycles_warning": _keys("current_cycle max_cycles unread_remaining"),
    "resume_started": _keys("resumeID from"),
    "resume_completed": _keys("resumeID from durationMs"),
    "resume_failed": _keys("resumeID from reason durationMs"),
    "resume_queued": _keys("resumeID from", "activeResumeID"),
    "transcript_sealed": _keys("reason error"),
    "plan_ready": _keys("workflow"),
    EventType.OUTPUT: _keys(),
}
"""zenflow's event types (its spec, section 14.2) and the ``data`` keys of each."""

ADDED_TYPES: frozenset[str] = frozenset(
    kind for kind in (*PAYLOADS, *NO_PAYLOAD) if kind not in ZENFLOW
)
"""The event types Cadenza adds to zenflow's."""


def extra_keys(event_type: str) -> tuple[str, ...]:
    """The ``data`` keys Cadenza's ``event_type`` has beyond zenflow's, in wire order.

    For a type zenflow lacks, every key its data can have.
    """
    kind = PAYLOADS.get(event_type)
    if kind is None:
        return ()
    zenflow = ZENFLOW[event_type].keys if event_type in ZENFLOW else frozenset()
    fields = msgspec.structs.fields(kind)
    return tuple(field.encode_name for field in fields if field.encode_name not in zenflow)


def to_data(data: Payload) -> dict[str, Any]:
    """``data`` as ``Event.data`` holds it: a plain dict, keys in field order."""
    built: dict[str, Any] = msgspec.to_builtins(data)
    return built


class Shared:
    """A payload converted once, for an event that repeats it many times.

    Each such event's ``Event.data`` is then the same dict: a forEach over 10,000
    items would otherwise keep 20,000 equal dicts in a store that holds its events.
    """

    __slots__ = ("data",)

    def __init__(self, payload: Payload) -> None:
        self.data = to_data(payload)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Shared:
        """A payload built plain already: for the hot paths below, tested against their Structs."""
        shared = cls.__new__(cls)
        shared.data = data
        return shared


def iteration_start(iteration: int, max_iterations: int) -> Shared:
    """`IterationStart`'s data, built plain: every loop iteration emits one."""
    return Shared.of({"iteration": iteration, "maxIterations": max_iterations})


def iteration_end(iteration: int, status: str) -> Shared:
    """`IterationEnd`'s data, built plain: every loop iteration emits one."""
    return Shared.of({"iteration": iteration, "status": status})


def payload(event: Event, kind: type[P]) -> P:
    """The ``data`` of ``event`` as a ``kind``; an event without data reads as ``{}``.

    Raises:
        CorruptRecord: The data does not fit ``kind`` (a required key is missing, or
            a value is of another type); the message names the event.
    """
    try:
        return msgspec.convert(event.data or {}, kind)
    except msgspec.ValidationError as error:
        raise CorruptRecord(
            f"event {event.seq} ({event.type!r}) of run {event.run_id!r}: "
            f"its data does not fit {kind.__name__}: {error}"
        ) from None
