"""The event envelope: zenflow's NDJSON event, as one msgspec Struct.

Events are facts about a run, appended to the store and streamed to observers
(``--events``, ``RunHandle.events()``). The envelope is flat and additive: new
fields get defaults, no field ever changes type (msgspec schema evolution), and
consumers ignore what they do not know.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

__all__ = ["Event", "EventType", "Tokens", "format_duration", "timestamp"]


class EventType:
    """Every event type Cadenza emits: the one place their names are spelled.

    Emitters, readers and the payload Structs (`PAYLOADS`) name a type as
    ``EventType.STEP_START``, never as a string of their own; docs/events.md
    lists each one, and tests/test_event_payloads.py holds the three to this
    class. zenflow's names where zenflow has the type (its spec, section 14.2);
    the others are Cadenza's extensions.
    """

    # The run.
    WORKFLOW_START = "workflow_start"
    WORKFLOW_END = "workflow_end"
    RUN_RESUMED = "run_resumed"
    """A run resumed: data ``{replayable, afterSeq}``."""
    RUN_FORKED = "run_forked"
    """A fork of another run starts (it has no ``workflow_start`` of its own); data
    ``{parentRunId, at, replayable, afterSeq, edited}``."""
    RUN_INTERRUPTED = "run_interrupted"
    """The process driving a run stopped it on its way out; the run stays resumable."""
    SIGNAL_RECEIVED = "signal_received"
    """A person answered a waiting step (``cadenza signal``); data ``{answer}``."""
    # Steps.
    STEP_START = "step_start"
    STEP_END = "step_end"
    STEP_SKIPPED = "step_skipped"
    STEP_RETRY = "step_retry"
    STEP_RESTART = "step_restart"
    """Its list's supervisor runs a step again (``options.supervisor``, an extension);
    data ``{strategy, cause, restart, maxRestarts}``."""
    STEP_REPLAYED = "step_replayed"
    """A leaf's recorded outcome was reported again on resume instead of running it."""
    CALLS_REPLAYED = "calls_replayed"
    """A resumed step took the answers of the calls it had made from its journal;
    data ``{calls, model, tools}``."""
    REPLAY_DIVERGED = "replay_diverged"
    """A resumed step asked otherwise than its journal records: it goes live from there;
    data ``{seq, kind, reason}``."""
    STEP_WAITING = "step_waiting"
    """A step waits for a person (``human``); data ``{prompt, schema}``."""
    ERROR = "error"
    MESSAGE = "message"
    DEAD_LETTER = "dead_letter"
    ACTOR_CRASHED = "actor_crashed"
    # Loops, forEach and graphs (Cadenza extensions; ``stepId`` is the namespaced address).
    ITERATION_START = "iteration_start"
    """A repeat-until iteration began; ``stepId`` is ``loop.N``, data ``{iteration}``."""
    ITERATION_END = "iteration_end"
    """A repeat-until iteration ended; data ``{iteration, status}``."""
    JUDGE_VERDICT = "judge_verdict"
    """An ``untilAgent`` judged an iteration; data ``{iteration, done, reason}``.

    ``done`` is null when the judge gave no valid verdict (fail-open; ``error`` says why).
    """
    LOOP_END = "loop_end"
    """A loop stopped; ``stepId`` is the loop, data ``{iterations, terminationReason, flagged}``."""
    ITEM_START = "item_start"
    """A forEach iteration began; ``stepId`` is ``loop[N]`` (N is the index), data ``{total}``."""
    ITEM_END = "item_end"
    """A forEach iteration ended; data ``{status}``."""
    GRAPH_TRANSITION = "graph_transition"
    """A graph took an edge; data ``{from, to, step, edge, condition, reason}``."""
    GRAPH_END = "graph_end"
    """A graph stopped; data ``{path, terminationReason}``."""
    CHECKPOINT = "checkpoint"
    """A ``keepLast`` loop goes on after an iteration: what a resume restarts it from."""
    DECISION = "decision"
    """A control loop ruled on an iteration (`ControlDecision`)."""
    # Agents, tools and messages.
    AGENT_TURN = "agent_turn"
    TOOL_CALL = "tool_call"
    AGENT_MEMORY = "agent_memory"
    """An agent visit's turns, kept for the loop's later visits (``memory``)."""
    TOOL_PERMISSION = "tool_permission"
    """The permission policy decided about a tool call."""
    MCP_TOOL_FAILED = "mcp_tool_failed"
    """An MCP server failed on a tool call."""
    MESSAGE_SENT = "message_sent"
    MESSAGE_DROPPED = "message_dropped"
    AGENT_INBOX_DRAIN = "agent_inbox_drain"
    MESSAGE_UNDELIVERED = "message_undelivered"
    """At the run's end, messages still waited for a step."""
    COORDINATOR_WAKE = "coordinator_wake"
    """The coordinator agent woke for a message (``start``) and answered it (``end``)."""
    COORDINATOR_NARRATION = "coordinator_narration"
    COORDINATOR_SYNTHESIS = "coordinator_synthesis"
    MAX_WAKE_CYCLES_WARNING = "max_wake_cycles_warning"
    MAX_WAKE_CYCLES_REACHED = "max_wake_cycles_reached"
    """The coordinator agent has used all its wakes; a message is not answered."""
    # Worktree isolation (``worktree: per-step``).
    WORKTREE_DONE = "worktree_done"
    """A step's worktree was removed; its changes are on a branch."""
    WORKTREE_KEPT = "worktree_kept"
    """A failed step's worktree is kept for a person to look at."""
    # Remote workers (Cadenza extensions; docs/protocol.md).
    STEP_DISPATCHED = "step_dispatched"
    """A step attempt was sent to a worker; data ``{worker, job, dispatch}``."""
    STEP_QUEUED = "step_queued"
    """A step waits for a worker: none is connected (it does not fail); data ``{job}``."""
    STEP_REQUEUED = "step_requeued"
    """A step's worker was lost; it goes out again; data ``{worker, job, dispatch, reason}``."""
    RESULT_REJECTED = "result_rejected"
    """A stale result (a lost worker's, fenced by ``dispatch``) was refused; data as above."""
    # Streamed model output: zenflow's ``output`` (shown live, never stored).
    OUTPUT = "output"
    """Text a model streamed since the last one, in the envelope's ``delta``; ``done``
    is true on the last of a reply (zenflow's ``output`` event).

    Coalesced: at most one per agent per 100 ms, or per 1,024 characters of
    text. Observers see it; the store does not keep it, it has no ``seq``,
    and the step's record holds the whole text. Cadenza 0.1.0 called it
    ``agent_delta``, with the text in ``data`` (``{turn, attempt, text}``).
    """

    @classmethod
    def names(cls) -> frozenset[str]:
        """Every event type's name (the values above)."""
        return frozenset(
            value for key, value in vars(cls).items() if key.isupper() and isinstance(value, str)
        )


class Tokens(msgspec.Struct, frozen=True):
    """Token counts of one LLM call or of a whole step or run."""

    prompt: int = 0
    completion: int = 0
    total: int = 0


# gc=False: the collector never tracks an event. A run keeps every event it made (the
# memory store, an observer's buffer), and an event whose data is a dict would be
# traversed at each collection; an event holds plain data, never itself, so it can be
# in no reference cycle. It spares the collector 3k instructions a chain step, 15k a
# loop iteration.
class Event(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel", gc=False):
    """One line of the NDJSON event stream (zenflow's envelope).

    Attributes:
        type: What happened (see `EventType`).
        timestamp: RFC 3339 time of the event, UTC.
        run_id: The run it belongs to.
        seq: Position in the run's stream, from 1 (a Cadenza extension that lets a
            late subscriber resume where it left off).
        step_id: The namespaced address of the step, for step-scoped events.
        agent: The agent name, for agent events.
        message: Human-readable detail.
        duration: Go-style duration (``"1.234s"``) on completion events.
        tokens: Token counts on events that carry usage.
        error: The error text on failure events.
        data: Type-specific payload.
        delta: Streamed model text, on ``output`` events only.
        done: On ``output`` events only: true on the one that ends a reply's text.
        reasoning: On ``output`` events only: true when ``delta`` is the model's
            reasoning rather than its answer (absent otherwise).
        agent_id: On ``output`` events only: the agent streaming (as ``agent``).
    """

    type: str
    timestamp: str
    run_id: str
    seq: int = 0
    step_id: str | None = None
    agent: str | None = None
    message: str | None = None
    duration: str | None = None
    tokens: Tokens | None = None
    error: str | None = None
    data: dict[str, Any] | None = None
    # zenflow's streaming fields, last: only ``output`` events set them.
    delta: str | None = None
    done: bool | None = None
    reasoning: bool | None = None
    agent_id: str | None = None


_second_cache: tuple[int, str] = (-1, "")
_milli_cache: tuple[int, str] = (-1, "")


def timestamp(epoch: float | None = None) -> str:
    """RFC 3339 UTC timestamp with milliseconds, e.g. ``2026-11-21T10:00:00.123Z``."""
    global _second_cache, _milli_cache
    milli = int((time.time() if epoch is None else epoch) * 1000)
    # Events come in bursts: a step's start and end often share a millisecond, and
    # the date part changes once a second.
    if _milli_cache[0] == milli:
        return _milli_cache[1]
    whole, fraction = divmod(milli, 1000)
    if _second_cache[0] != whole:
        _second_cache = (whole, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(whole)))
    text = f"{_second_cache[1]}{fraction:03d}Z"
    _milli_cache = (milli, text)
    return text


_SHORT_DURATIONS: dict[str, str] = {}
"""The texts of durations under a second, one object each: most steps take under a
second, and an in-memory store keeps every event (a thousand texts at most)."""


def format_duration(seconds: float) -> str:
    """Go-style duration string as zenflow writes it: ``"1.234s"``."""
    text = f"{seconds:.3f}s"
    if 0 <= seconds < 1:
        return _SHORT_DURATIONS.setdefault(text, text)
    return text
