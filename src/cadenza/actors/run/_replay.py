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

import bisect
import heapq
from array import array
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import msgspec

from cadenza.errors import CorruptRecord
from cadenza.protocols import CallRecord, Event, EventType, RunForked, StepRecord, Tokens
from cadenza.store import RunStore

from ._messages import COORDINATOR
from ._replay_log import LogReader, LogState

__all__ = ["READ_PAGE", "REPLAYABLE", "Replay"]

READ_PAGE = 5_000
"""Records, then events, a resume reads from the store at a time (`Replay.read`)."""

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

    Made whole (a fork's: ``Replay(records, events)``), or read from a store a page at
    a time (`Replay.read`): either way it keeps only what replay asks of the journal,
    compactly, so that resuming a run of a million recorded items does not hold a
    million events or records as objects. Each address's record is kept as its
    msgpack body, equal bodies once (`_Records`), and each decision event as a 64-bit
    hash of what `suppress` compares, in one sorted array; the events themselves pass
    through once (`LogReader`) and are let go.

    Args:
        records: The latest record of every address, as stored (None: read pages next).
        events: The run's events, in order.

    Raises:
        CorruptRecord: The events are not numbered 1, 2, 3... (some are missing).
    """

    def __init__(
        self, records: Mapping[str, StepRecord] | None = None, events: Iterable[Event] = ()
    ) -> None:
        self.prior = _Records()
        """The latest record of every address, as stored (less those recorded anew)."""
        self.last_seq = 0
        self.log = LogState()
        self._reader: LogReader | None = LogReader()
        self._hashes = array("q")  # of the decisions' keys: sorted once all are read
        self._consumed = bytearray()  # one flag per hash: re-emitted already
        self._unconsumed = 0
        self._launched: set[str] = set()
        self.forked: RunForked | None = None
        """Set when this is a fork's start (`Runtime.fork`): the run says so with a
        ``run_forked`` event instead of ``run_resumed``."""
        self.calls: dict[str, list[CallRecord]] = {}
        """The calls recorded at each address the kill cut off, read by `load_calls`."""
        if records is not None:
            self.add_records(records)
            self.add_events(events)
            self.seal()

    @classmethod
    async def read(cls, store: RunStore, run_id: str, *, page: int = READ_PAGE) -> Replay:
        """The replay of ``run_id``: its records and events read ``page`` at a time.

        Raises:
            CorruptRecord: A record or event is unreadable, or events are missing.
        """
        replay = cls()
        after: str | None = None
        while True:
            records = await store.steps(run_id, after=after, limit=page)
            replay.add_records(records)
            if len(records) < page:
                break
            after = next(reversed(records))
        while True:
            events = await store.events(run_id, after_seq=replay.last_seq, limit=page)
            replay.add_events(events)
            if len(events) < page:
                break
        replay.seal()
        await replay.load_calls(store, run_id)
        return replay

    def add_records(self, records: Mapping[str, StepRecord]) -> None:
        """Takes in a page of the run's records."""
        for address, record in records.items():
            self.prior[address] = record

    def add_events(self, events: Iterable[Event]) -> None:
        """Takes in the run's next events, in order.

        Raises:
            CorruptRecord: They do not follow on from the last ``seq`` taken in.
        """
        reader = self._reader
        assert reader is not None, "the replay is sealed"
        hashes, decisions, launched = self._hashes, _DECISIONS, self._launched
        for event in events:
            if event.seq != self.last_seq + 1:
                raise CorruptRecord(
                    f"run {event.run_id!r}: events {self.last_seq + 1}..{event.seq - 1} are missing"
                )
            self.last_seq = event.seq
            reader.read(event)
            kind = event.type
            if kind in decisions:
                hashes.append(
                    hash(_key(kind, event.step_id, event.message, event.error, event.data))
                )
                if kind == EventType.ITERATION_START and event.step_id is not None:
                    launched.add(event.step_id)

    def seal(self) -> None:
        """Ends the reading: the log's state is made, the decisions sorted for lookup."""
        reader, self._reader = self._reader, None
        assert reader is not None, "the replay is sealed"
        self.log = reader.finish()
        self._hashes = _sorted(self._hashes)
        self._consumed = bytearray(len(self._hashes))
        self._unconsumed = len(self._hashes)

    async def load_calls(self, store: RunStore, run_id: str) -> None:
        """Reads the calls of every address the kill cut off (and of the coordinator
        agent's wakes) before the run starts again: a visit that continues one takes
        them at once, so the resumed run's visits ask in the order they did."""
        for address in [*self.prior.unfinished(), str(COORDINATOR)]:
            calls = await store.calls(run_id, address)
            if calls:
                self.calls[address] = calls

    @property
    def replayable(self) -> int:
        """How many addresses have a final record to replay."""
        return self.prior.final

    def take(self, address: str) -> StepRecord | None:
        """The final record of ``address``, once: a second visit (a retried container) runs."""
        return self.prior.take(address)

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
        if type not in _DECISIONS or not self._unconsumed:
            return False
        hashes, consumed = self._hashes, self._consumed
        wanted = hash(_key(type, step_id, message, error, data))
        at = bisect.bisect_left(hashes, wanted)
        # Equal keys are few (a decision made twice the same way): a short scan.
        while at < len(hashes) and hashes[at] == wanted:
            if not consumed[at]:
                consumed[at] = 1
                self._unconsumed -= 1
                return True
            at += 1
        return False

    def tokens(self, address: str) -> Tokens | None:
        """The model tokens the execution that recorded ``address``'s outcome spent."""
        return self.log.step_tokens.get(address)

    def launched(self, iteration: str) -> bool:
        """Whether the interrupted run had already started this loop iteration (``loop.N``)."""
        return iteration in self._launched


def _sorted(hashes: array[int]) -> array[int]:
    """``hashes`` in order, sorted a chunk at a time and merged: sorting them at once
    would make a list of as many int objects (some 150 MB for four million)."""
    chunk = 1 << 16
    if len(hashes) <= chunk:
        return array("q", sorted(hashes))
    runs = [array("q", sorted(hashes[i : i + chunk])) for i in range(0, len(hashes), chunk)]
    return array("q", heapq.merge(*runs))


_encode_record = msgspec.msgpack.Encoder().encode
_decode_record = msgspec.msgpack.Decoder(StepRecord).decode


class _Records:
    """Records by address, each kept as its msgpack body, equal bodies once.

    A value is an int: twice the body's number, plus one once `take` has given the
    record out. Bodies of no-op items differ little (a duration, a worker), so those
    numbers stay small, and Python keeps small ints once: an address costs its text
    and its slot, ~100 bytes, where a `StepRecord` and its dict entry were ~250.
    """

    def __init__(self) -> None:
        self._slots: dict[str, int] = {}
        self._bodies: list[bytes] = []
        self._statuses: list[str] = []  # each body's record's
        self._numbers: dict[bytes, int] = {}
        self.final = 0
        """How many final records have not been taken."""

    def __setitem__(self, address: str, record: StepRecord) -> None:
        self.pop(address, None)
        body = _encode_record(record)
        number = self._numbers.get(body)
        if number is None:
            number = self._numbers[body] = len(self._bodies)
            self._bodies.append(body)
            self._statuses.append(record.status)
        self._slots[address] = number << 1
        if record.status in REPLAYABLE:
            self.final += 1

    def get(self, address: str) -> StepRecord | None:
        slot = self._slots.get(address)
        return None if slot is None else _decode_record(self._bodies[slot >> 1])

    def __contains__(self, address: object) -> bool:
        return address in self._slots

    def __len__(self) -> int:
        return len(self._slots)

    def items(self) -> Iterator[tuple[str, StepRecord]]:
        """Every address and its record (`take` may be called meanwhile, not `pop`)."""
        bodies = self._bodies
        for address, slot in self._slots.items():
            yield address, _decode_record(bodies[slot >> 1])

    def unfinished(self) -> list[str]:
        """The addresses whose record is neither final nor waiting: cut off by the kill."""
        statuses, kept = self._statuses, (*REPLAYABLE, "waiting")
        return [a for a, slot in self._slots.items() if statuses[slot >> 1] not in kept]

    def pop(self, address: str, default: None = None) -> StepRecord | None:
        slot = self._slots.pop(address, None)
        if slot is None:
            return default
        record = _decode_record(self._bodies[slot >> 1])
        if not slot & 1 and record.status in REPLAYABLE:
            self.final -= 1
        return record

    def take(self, address: str) -> StepRecord | None:
        """The final record of ``address`` if it has one not taken yet, now taken."""
        slot = self._slots.get(address)
        if slot is None or slot & 1:
            return None
        record = _decode_record(self._bodies[slot >> 1])
        if record.status not in REPLAYABLE:
            return None
        self._slots[address] = slot | 1
        self.final -= 1
        return record
