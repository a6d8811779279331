"""Resuming a run by replay at the leaves.

A resumed run runs its workflow again from the top, and every controller makes
its decisions again: they are deterministic functions of the recorded outputs
(CEL is pure), so ``until``, edges, ``condition`` and forEach lists come out as
they did. What is not re-done is leaf work. `spawn_step`, the one place where
every controller starts a child, asks the `Replay` first: an address with a
finished record from before the interruption (``completed``, ``failed``,
``skipped``, its ``attempts`` kept) is not executed; a `ReplayedStep` reports
that record to the controller at once (once the resumed coordinator agent has
answered what the step sent and the interruption left unanswered), through the
same path a child uses, so the controller cannot tell the difference. Leaves
that were in flight (``running``, or ``cancelled`` by the interruption's
aftermath) run again with their ``attempt`` one higher. The judge of a loop
replays its verdict the same way.

Controllers re-emit the events of the decisions they make again; those already
in the log (same type, address, message and data, counted with multiplicity)
are dropped, so the log reads as one run with a ``run_resumed`` marker where
the process restarted, and a second resume does not duplicate the first.

A fork (`cadenza.Runtime.fork`) is a new run that starts as a resume does, from
records and events copied from the run it forks: what finished there before the
fork's address started is replayed, the rest runs live.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec

from cadenza.errors import CorruptRecord
from cadenza.protocols import CallRecord, Event, EventType, RunForked, StepRecord, Tokens
from cadenza.store import RunStore

from ._messages import COORDINATOR
from ._replay_log import LogState, read_log

__all__ = ["REPLAYABLE", "Replay"]

REPLAYABLE = frozenset(("completed", "failed", "skipped"))
"""Statuses of a record that is final: its address is replayed, never re-executed."""

# What controllers emit while deciding; the rest (agent turns, tool calls, messages)
# belongs to leaf work, which a replay does not repeat and a re-run does anew.
_DECISIONS = frozenset(
    (
        EventType.STEP_START,
        EventType.STEP_END,
        EventType.STEP_SKIPPED,
        EventType.STEP_RETRY,
        EventType.STEP_RESTART,
        EventType.ERROR,
        EventType.MESSAGE,
        EventType.ITERATION_START,
        EventType.ITERATION_END,
        EventType.JUDGE_VERDICT,
        EventType.LOOP_END,
        EventType.ITEM_START,
        EventType.ITEM_END,
        EventType.GRAPH_TRANSITION,
        EventType.GRAPH_END,
        EventType.STEP_REPLAYED,
        EventType.STEP_WAITING,
        EventType.CHECKPOINT,
        EventType.DECISION,  # a control loop's ruling
    )
)

_encode = msgspec.json.Encoder().encode
_Key = tuple[str, str | None, str | None, str | None, bytes]

# zenflow's keys that `step_start` gained after runs were stored without them: left out
# of the comparison, so that an older run resumes without restating its starts. They
# say nothing a replay could decide otherwise: a step's place, a forEach's item count
# (its ``message`` event holds that too).
_STEP_START_ADDED = frozenset(("index", "total", "items"))


def _key(type: str, step_id: str | None, message: str | None, error: str | None, data: Any) -> _Key:
    if type == EventType.STEP_START and data is not None and "index" in data:
        data = {key: value for key, value in data.items() if key not in _STEP_START_ADDED}
    return (type, step_id, message, error, b"" if data is None else _encode(data))


class Replay:
    """What an interrupted run recorded, consulted while it is run again.

    Args:
        records: The latest record of every address, as stored.
        events: The run's events, in order.

    Raises:
        CorruptRecord: The events are not numbered 1, 2, 3... (some are missing).
    """

    def __init__(self, records: dict[str, StepRecord], events: list[Event]) -> None:
        for expected, event in enumerate(events, start=1):
            if event.seq != expected:
                raise CorruptRecord(
                    f"run {event.run_id!r}: events {expected}..{event.seq - 1} are missing"
                )
        self.prior = records
        self.last_seq = events[-1].seq if events else 0
        self.log: LogState = read_log(events)
        self._final = {a: r for a, r in records.items() if r.status in REPLAYABLE}
        self._seen: Counter[_Key] = Counter(
            _key(e.type, e.step_id, e.message, e.error, e.data)
            for e in events
            if e.type in _DECISIONS
        )
        self._launched = {e.step_id for e in events if e.type == EventType.ITERATION_START}
        self.forked: RunForked | None = None
        """Set when this is a fork's start (`Runtime.fork`): the run says so with a
        ``run_forked`` event instead of ``run_resumed``."""
        self.calls: dict[str, list[CallRecord]] = {}
        """The calls recorded at each address the kill cut off, read by `load_calls`."""

    async def load_calls(self, store: RunStore, run_id: str) -> None:
        """Reads the calls of every address the kill cut off (and of the coordinator
        agent's wakes) before the run starts again: a visit that continues one takes
        them at once, so the resumed run's visits ask in the order they did."""
        cut_off = [a for a, r in self.prior.items() if r.status not in (*REPLAYABLE, "waiting")]
        for address in [*cut_off, str(COORDINATOR)]:
            calls = await store.calls(run_id, address)
            if calls:
                self.calls[address] = calls

    @property
    def replayable(self) -> int:
        """How many addresses have a final record to replay."""
        return len(self._final)

    def take(self, address: str) -> StepRecord | None:
        """The final record of ``address``, once: a second visit (a retried container) runs."""
        return self._final.pop(address, None)

    def next_attempt(self, address: str) -> int:
        """The attempt number a leaf at ``address`` starts from: one past any recorded one."""
        record = self.prior.get(address)
        return 1 if record is None or record.status in REPLAYABLE else record.attempts + 1

    def is_final(self, address: str) -> bool:
        """Whether ``address`` already has a final (or waiting) record in the store."""
        record = self.prior.get(address)
        return record is not None and record.status in (*REPLAYABLE, "waiting")

    def unchanged(self, address: str, record: StepRecord) -> StepRecord | None:
        """The stored record when ``record`` says the same (its duration aside), else None."""
        prior = self.prior.get(address)
        if prior is None or prior.status == "running":
            return None
        same = msgspec.structs.replace(record, duration_ms=prior.duration_ms) == prior
        return prior if same else None

    def overwritten(self, address: str) -> None:
        """The run records ``address`` anew: its stored record is no longer the one above."""
        self.prior.pop(address, None)

    def suppress(
        self, type: str, step_id: str | None, message: str | None, error: str | None, data: Any
    ) -> bool:
        """Whether an event is a re-emission of one already in the log (it is then consumed)."""
        if type not in _DECISIONS or not self._seen:
            return False
        key = _key(type, step_id, message, error, data)
        left = self._seen.get(key, 0)
        if left == 0:
            return False
        if left == 1:
            del self._seen[key]
        else:
            self._seen[key] = left - 1
        return True

    def tokens(self, address: str) -> Tokens | None:
        """The model tokens the execution that recorded ``address``'s outcome spent."""
        return self.log.step_tokens.get(address)

    def launched(self, iteration: str) -> bool:
        """Whether the interrupted run had already started this loop iteration (``loop.N``)."""
        return iteration in self._launched
