"""A recorded run, as an offline replay checks itself against it (``cadenza replay``).

An offline replay runs a recorded run's workflow again, in memory, with nothing
live: every model call and journaled tool call of its agent visits is answered
from the run's call journal (`calls`), a leaf that is not an agent (a command,
a handler, a tool step: side effects) is answered from its recorded outcome
(`answer`), and every controller decides again from those answers. What it is
for is what differs: each decision the replay makes (a step started or skipped,
an iteration begun, a verdict, an edge taken, a forEach's item count) is
matched, as it is made, with the next one the record holds at the same address
(`observe`), and the first that does not match (or a call the journal does not
hold, or one asked otherwise) is the replay's difference: it is said in one
line naming the address and what differs, and the run is stopped there.

Decisions are compared per address, not in the order of the whole log: steps
running side by side finish in another order when nothing takes time, and that
is not a difference. What a decision is compared on is what it decided (a
step's kind, an iteration's status, the edge's ends), not how it was worded: a
condition edited to say the same thing in other words is no difference.

A recorded run that was resumed holds, for a leaf the interruption cut off, a
``step_start`` that nothing ended, and the next one from the resume: the first
is dropped, and the journal of the attempt that ended is the one replayed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from cadenza.errors import CadenzaError
from cadenza.protocols import (
    CallKind,
    CallRecord,
    ControlDecision,
    ErrorInfo,
    Event,
    EventType,
    ForEachMessage,
    GraphEnd,
    GraphTransition,
    ItemEnd,
    ItemStart,
    IterationEnd,
    JudgeVerdict,
    LoopEnd,
    StepError,
    StepRecord,
    StepStart,
    payload,
)

__all__ = ["Recording", "ReplayDiffers"]


class ReplayDiffers(CadenzaError):
    """An offline replay asked for a call its record does not answer: it stops there
    (`Recording.difference` says where and what)."""


class _Decision(NamedTuple):
    key: tuple[Any, ...]
    """What is compared."""
    says: str
    """What it did, as a person reads it after "the record" or "the replay"."""
    seq: int = 0
    """Its event's place in the record (0: the replay's)."""


_ENDS = frozenset(("end", "skipped", "waiting"))
"""The decisions that end a visit of an address (a retry does not: the next attempt follows)."""


def _start(event: Event) -> _Decision:
    return _start_of(payload(event, StepStart).kind)


def _start_of(kind: str) -> _Decision:
    return _Decision(("start", kind), f"started it ({kind})")


def _skipped(event: Event) -> _Decision:
    reason = (event.message or "").removeprefix("ConditionFalse: ")  # its words say so
    why = f" ({reason})" if reason else ""
    return _Decision(("skipped",), f"skipped it{why}")


def _ended(event: Event) -> _Decision:
    return _Decision(("end", "completed"), "completed it")


def _failed(event: Event) -> _Decision:
    status = payload(event, StepError).status or "failed"
    why = f" ({event.error})" if event.error else ""
    said = "failed it" if status == "failed" else f"ended it {status}"
    return _Decision(("end", status), said + why)


def _retried(event: Event) -> _Decision:
    return _Decision(("retry",), "retried it")


def _restarted(event: Event) -> _Decision:
    return _Decision(("restart",), "restarted it")


def _waiting(event: Event) -> _Decision:
    return _Decision(("waiting",), "waited for a person there")


def _iteration_started(event: Event) -> _Decision:
    return _Decision(("iteration",), "began this iteration")


def _iteration_ended(event: Event) -> _Decision:
    status = payload(event, IterationEnd).status
    return _Decision(("iteration end", status), f"ended this iteration {status}")


def _verdict(event: Event) -> _Decision:
    done = payload(event, JudgeVerdict).done
    said = "no verdict" if done is None else f"done: {str(done).lower()}"
    return _Decision(("verdict", done), f"had the judge say {said}")


def _loop_ended(event: Event) -> _Decision:
    end = payload(event, LoopEnd)
    key = ("loop end", end.iterations, end.termination_reason, end.flagged)
    said = f"ended the loop after {end.iterations} iteration(s) ({end.termination_reason})"
    return _Decision(key, said)


def _item_started(event: Event) -> _Decision:
    total = payload(event, ItemStart).total
    return _Decision(("item", total), f"began this item (of {total})")


def _item_ended(event: Event) -> _Decision:
    status = payload(event, ItemEnd).status
    return _Decision(("item end", status), f"ended this item {status}")


def _items(event: Event) -> _Decision:
    items = payload(event, ForEachMessage).items
    return _Decision(("items", items), f"went over {items} item(s)")


def _transition(event: Event) -> _Decision:
    taken = payload(event, GraphTransition)
    key = ("edge", taken.from_, taken.to, taken.step)
    return _Decision(key, f"went {taken.from_} -> {taken.to}")


def _graph_ended(event: Event) -> _Decision:
    end = payload(event, GraphEnd)
    path = " -> ".join(end.path)
    key = ("graph end", tuple(end.path), end.termination_reason)
    return _Decision(key, f"ended the graph ({end.termination_reason}) after {path}")


def _ruling(event: Event) -> _Decision:
    ruled = payload(event, ControlDecision)
    key = ("ruling", ruled.iteration, ruled.decision, ruled.status)
    return _Decision(key, f"ruled {ruled.decision} on iteration {ruled.iteration}")


_DECISIONS: dict[str, Callable[[Event], _Decision]] = {
    EventType.STEP_START: _start,
    EventType.STEP_SKIPPED: _skipped,
    EventType.STEP_END: _ended,
    EventType.ERROR: _failed,
    EventType.STEP_RETRY: _retried,
    EventType.STEP_RESTART: _restarted,
    EventType.STEP_WAITING: _waiting,
    EventType.ITERATION_START: _iteration_started,
    EventType.ITERATION_END: _iteration_ended,
    EventType.JUDGE_VERDICT: _verdict,
    EventType.LOOP_END: _loop_ended,
    EventType.ITEM_START: _item_started,
    EventType.ITEM_END: _item_ended,
    EventType.MESSAGE: _items,
    EventType.GRAPH_TRANSITION: _transition,
    EventType.GRAPH_END: _graph_ended,
    EventType.DECISION: _ruling,
}
"""The events that state a decision, and what each one decided. The rest (model turns,
tool calls, messages, a resume's markers) belong to work the replay answers, or to
how the recorded run was driven."""


class Recording:
    """What a recorded run decided and what its calls answered, consulted by its replay.

    Args:
        records: The latest record of every address, as stored.
        events: The run's events, in order.
        calls: The run's call journal.
        stop: Stops the replay (with the difference as the reason).
    """

    def __init__(
        self,
        records: dict[str, StepRecord],
        events: Sequence[Event],
        calls: Sequence[CallRecord],
        stop: Callable[[str], None],
    ) -> None:
        self._records = records
        self._stop = stop
        self.difference: str | None = None
        """The first place where the replay differs from the record, in one line."""
        self.answered = {"model": 0, "tool": 0, "steps": 0}
        """How many model calls, tool calls and leaves the record answered."""
        self._calls: dict[tuple[str, int], list[CallRecord]] = {}
        for call in calls:
            self._calls.setdefault((call.address, call.attempt), []).append(call)
        for kept in self._calls.values():
            kept.sort(key=lambda call: call.seq)
        self._attempts: dict[str, list[int]] = {}
        self._visits: dict[str, int] = {}
        self._decisions = self._read(events)

    def _read(self, events: Sequence[Event]) -> dict[str, deque[_Decision]]:
        """Each address's decisions in order, less the starts an interruption cut off;
        and which attempts of each address ended (`_attempts`)."""
        found: dict[str, list[_Decision]] = {}
        open_starts: dict[str, tuple[_Decision, int]] = {}
        for event in events:
            read = _DECISIONS.get(event.type)
            address = event.step_id
            if read is None or address is None:
                continue
            decision = read(event)._replace(seq=event.seq)
            kept = found.setdefault(address, [])
            if decision.key[0] == "start":
                cut = open_starts.get(address)
                if cut is not None:  # nothing ended it: the process died, a resume ran it again
                    kept.remove(cut[0])
                open_starts[address] = decision, payload(event, StepStart).attempt
            elif decision.key[0] in _ENDS or decision.key[0] == "retry":
                ended = open_starts.pop(address, None)
                if ended is not None:
                    self._attempts.setdefault(address, []).append(ended[1])
            kept.append(decision)
        return {address: deque(kept) for address, kept in found.items()}

    def observe(self, event: Event) -> None:
        """Matches a decision the replay made (a journal sink) with the record's next one
        at its address."""
        read = _DECISIONS.get(event.type)
        if read is None or event.step_id is None or self.difference is not None:
            return
        self._match(event.step_id, read(event))

    def _match(self, address: str, decision: _Decision) -> bool:
        queue = self._decisions.get(address)
        if not queue:
            self.differ(self._unrecorded(address, decision))
            return False
        expected = queue[0]
        if expected.key != decision.key:
            self.differ(f"{address}: the record {expected.says}, the replay {decision.says}")
            return False
        queue.popleft()
        return True

    def _unrecorded(self, address: str, decision: _Decision) -> str:
        """A decision at an address where the record has none (left): an iteration or an
        item the record did not begin is told as what its loop did instead."""
        if decision.key[0] in ("iteration", "item"):
            container = address.rpartition(".")[0] if decision.key[0] == "iteration" else ""
            container = container or address.rpartition("[")[0]
            queue = self._decisions.get(container)
            if queue:
                return f"{container}: the record {queue[0].says}, the replay began {address}"
        return f"{address}: the replay {decision.says}, the record did not"

    def answer(self, address: str, kind: str) -> StepRecord:
        """The recorded outcome of the leaf at ``address`` (a side effect: it is not run
        again), once its start matches the record's; a ``cancelled`` record when the
        replay differs there (it is stopped)."""
        if self.difference is None and self._match(address, _start_of(kind)):
            queue = self._decisions[address]
            while queue:  # the rest of this visit: its retries and its end
                if queue.popleft().key[0] in _ENDS:
                    break
            record = self._records.get(address)
            if record is not None and record.status not in ("running", "waiting"):
                self.answered["steps"] += 1
                return record
            self.differ(f"{address}: the record holds no outcome for it (keepLast forgets them)")
        reason = self.difference or "the replay differs from the record"
        return StepRecord(status="cancelled", error=ErrorInfo("ReplayDiffers", reason, address))

    def answer_person(self, address: str) -> StepRecord | None:
        """The answer a person gave at ``address`` in the record, as `answer` gives it;
        None when the record holds none (the replay asks, and waits, as the run did)."""
        record = self._records.get(address)
        if record is None or record.status != "completed":
            return None
        return self.answer(address, "human")

    def calls(self, address: str, execution: int) -> tuple[int, list[CallRecord]]:
        """The recorded calls of a visit at ``address``, and the attempt that made them.

        A replayed visit takes the calls of the recorded attempt it stands for: the
        first visit the first attempt that ended, and so on; an address whose visits
        the events do not number (the coordinator's wakes) by its own ``execution``.
        """
        visit = self._visits[address] = self._visits.get(address, 0) + 1
        ended = self._attempts.get(address, ())
        attempt = ended[visit - 1] if visit <= len(ended) else execution
        return attempt, list(self._calls.get((address, attempt), ()))

    def call_answered(self, kind: CallKind) -> None:
        """Counts a call the journal answered."""
        self.answered[kind] += 1

    def call_differs(
        self, address: str, attempt: int, seq: int, kind: CallKind, recorded: CallRecord | None
    ) -> ReplayDiffers:
        """Says how call ``seq`` of a visit differs from the record; the error to raise."""
        of = f" of attempt {attempt}" if attempt > 1 else ""
        if recorded is None:
            said = f"the replay makes {kind} call {seq}{of}, the record has no such call"
        elif recorded.kind != kind:
            said = f"call {seq}{of} is a {recorded.kind} call in the record, a {kind} call now"
        elif kind == "model":
            said = f"the prompt of model call {seq}{of} differs from the record"
        else:
            said = f"tool call {seq}{of} differs from the record (its name or arguments)"
        self.differ(f"{address}: {said}")
        return ReplayDiffers(self.difference or said)

    def differ(self, text: str) -> None:
        """Notes the replay's first difference and stops the replay."""
        if self.difference is None:
            self.difference = text
            self._stop(f"the replay differs from the record: {text}")

    def unmatched(self) -> str | None:
        """The first decision of the record (in its order) the replay did not make."""
        left = [(queue[0], address) for address, queue in self._decisions.items() if queue]
        if not left:
            return None
        decision, address = min(left, key=lambda entry: entry[0].seq)
        return f"{address}: the record {decision.says}, the replay did not"
