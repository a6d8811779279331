"""Stored records, checked before anything trusts them: shared by the durable stores.

Every stored body is msgspec JSON with a CRC-32 beside it. Reading one checks
that it decodes to its type, matches its CRC, and agrees with the columns stored
beside it; anything else is a `CorruptRecord` naming the run, the table and the
key. The CRC catches damage and hand edits, not an adversary (who could
recompute it). `RecordChecker` is what ``runs check`` does over a whole store,
whichever database holds it.

A call's body (`CallRecord`) is the one stored body that is not a msgspec Struct:
it is the answer's JSON text as the layer above wrote it, kept as it came and
checked by its CRC only. A body over `CALL_BODY_LIMIT` bytes is kept in the
``blobs`` table once per run, named by its SHA-256, and the call's row names it
(``blob``): the CRC beside the call then covers the name, and the blob's own CRC
its body.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar, get_args

import msgspec

from cadenza.errors import CorruptRecord
from cadenza.protocols import CALL_BODY_LIMIT, CallKind, CallRecord, Event, RunResult, StepRecord

from ._base import RunRow

__all__ = [
    "PACKED_EVENTS",
    "RUN_COLUMNS",
    "RecordChecker",
    "call_columns",
    "checked",
    "crc",
    "pack_events",
    "packed_body",
    "read_calls",
    "read_document",
    "read_events",
    "read_run",
    "read_steps",
    "run_columns",
    "unpack_events",
]

T = TypeVar("T")

_CONTRADICTS = "the record contradicts the columns stored beside it"
_decode_event = msgspec.json.Decoder(Event).decode
_decode_packed = msgspec.json.Decoder(list[Event]).decode
_encode = msgspec.json.Encoder().encode
_decode_step = msgspec.json.Decoder(StepRecord).decode
_decode_inputs = msgspec.json.Decoder(dict[str, Any]).decode
_decode_result = msgspec.json.Decoder(RunResult).decode
_CALL_KINDS = frozenset(get_args(CallKind))


def crc(body: bytes) -> int:
    """The CRC-32 stored beside ``body``."""
    return zlib.crc32(body)


def checked(
    body: bytes | str,
    stored_crc: int | None,
    decode: Callable[[bytes], T],
    where: str,
    *,
    consistent: Callable[[T], bool] = lambda value: True,
) -> T:
    """Decodes a stored body after checking its CRC; ``consistent`` checks it against its row.

    Raises:
        CorruptRecord: The body fails its CRC, does not decode, or contradicts its row.
    """
    data = body.encode() if isinstance(body, str) else body
    if stored_crc is not None and zlib.crc32(data) != stored_crc:
        raise CorruptRecord(f"{where}: the record does not match its checksum (it was altered)")
    try:
        value = decode(data)
    except msgspec.DecodeError as error:  # ValidationError is a DecodeError
        raise CorruptRecord(f"{where}: the record cannot be read: {error}") from None
    if not consistent(value):
        raise CorruptRecord(f"{where}: the record contradicts the columns stored beside it")
    return value


RUN_COLUMNS = (
    "run_id, workflow, path, status, inputs, created_at, updated_at, result,"
    " parent_run_id, parent_address, priority"
)
"""The ``runs`` table's columns in `RunRow`'s order: what both stores select and insert.

Named, never ``*``: a store upgraded in place has its columns in the order they
were added, and a newer Cadenza may add more."""


def run_columns(row: RunRow, inputs: bytes | str) -> tuple[Any, ...]:
    """A new run row's `RUN_COLUMNS`, ``inputs`` already encoded (no result yet)."""
    return (
        row.run_id,
        row.workflow,
        row.path,
        row.status,
        inputs,
        row.created_at,
        row.updated_at,
        None,
        row.parent_run_id,
        row.parent_address,
        row.priority,
    )


def read_run(row: Sequence[Any]) -> RunRow:
    """The `RunRow` of a stored ``runs`` row (its `RUN_COLUMNS`), checked."""
    run_id, workflow, path, status, inputs, created_at, updated_at, result, parent, at, rank = row
    return RunRow(
        run_id=run_id,
        workflow=workflow,
        path=path,
        status=status,
        inputs=checked(inputs, None, _decode_inputs, f"run {run_id!r}, inputs"),
        created_at=created_at,
        updated_at=updated_at,
        result=None
        if result is None
        else checked(result, None, _decode_result, f"run {run_id!r}, result"),
        parent_run_id=parent,
        parent_address=at,
        priority=rank,
    )


def read_document(run_id: str, row: Sequence[Any] | None) -> bytes | None:
    """A run's stored document from its ``(body, crc)`` row (None: none), checked."""
    if row is None:
        return None
    body, stored = row
    return checked(body, stored, bytes, f"run {run_id!r}, document")


def read_events(run_id: str, rows: Iterable[Sequence[Any]]) -> list[Event]:
    """The run's events from stored ``(seq, last_seq, body, crc)`` rows, each checked and in
    place; a row with a ``last_seq`` is a pack (`pack_events`), one without it one event."""
    events: list[Event] = []
    for seq, last, body, stored in rows:
        if last is None:
            event = checked(body, stored, _decode_event, f"run {run_id!r}, events seq {seq}")
            if event.seq != seq or event.run_id != run_id:
                raise CorruptRecord(f"run {run_id!r}, events seq {seq}: the record is misplaced")
            events.append(event)
        else:
            events += unpack_events(run_id, seq, last, body, stored)
    return events


EventRows = Callable[[int, int, int | None, int | None], Awaitable[Iterable[Sequence[Any]]]]
"""A store's read of a run's ``(seq, last_seq, body, crc)`` rows, ``(low, after, until,
rows)``: those with ``seq > low`` and ``seq <= until`` (None: no bound) whose last
``seq`` is past ``after``, in order, the first ``rows`` (None: all)."""


async def paged_events(
    run_id: str, after_seq: int, limit: int | None, event_rows: EventRows
) -> list[Event]:
    """The run's events after ``after_seq``, in order (the first ``limit``, if given), from
    rows of single events and packs (`pack_events`) that ``event_rows`` reads.

    A pack that holds ``after_seq + 1`` starts at most `PACKED_EVENTS` before it, so
    the key's range bounds the scan. A page reads the rows holding seqs
    ``after_seq + 1 .. after_seq + limit``, not ``limit`` rows, which as packs would
    be read, decoded and dropped by the hundred thousand at every page of a resume;
    only when they fall short (the end, or a gap in the numbers) does it read on.
    """

    async def between(until: int | None, rows: int | None = None) -> list[Event]:
        found = await event_rows(after_seq - PACKED_EVENTS, after_seq, until, rows)
        return [
            event
            for event in read_events(run_id, found)
            if event.seq > after_seq and (until is None or event.seq <= until)
        ]

    events: list[Event] = []
    if limit is not None:
        events = await between(after_seq + limit)
    if limit is None or len(events) < limit:
        events = await between(None, limit)
    return events if limit is None else events[:limit]


def packed_body(event: Event) -> bytes:
    """An event as a pack holds it: without its run id and ``seq``, which its row has."""
    return _encode(msgspec.structs.replace(event, run_id="", seq=0))


PACKED_EVENTS = 256
"""Events at most in one stored row (`pack_events`): a reader after one event reads its
row whole, so a row stays a few tens of KiB."""


def _pack_crc(run_id: str, first: int, last: int, body: bytes) -> int:
    """The CRC-32 beside a pack: of its place (run, first and last ``seq``) and its body,
    so a pack moved to another run or place does not check out."""
    return zlib.crc32(body, zlib.crc32(f"{run_id} {first} {last}".encode()))


def pack_events(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """A batch's events as the rows that store them: one row per run of consecutive events
    of one run (at most `PACKED_EVENTS`), ``(run_id, seq, last_seq, type, body, crc)``.

    ``rows`` are queued ``(run_id, seq, type, body)``, ``body`` a `packed_body`; a later
    row of the same run and ``seq`` replaces an earlier one. The row's ``seq`` is its
    first event's, its ``type`` its last event's (what "the run's newest event" asks),
    its body the JSON array of its events. Four rows of ~100 bytes an item (a forEach's)
    become one row of ~400: the row's own bytes (its header, the run id, the key's index
    entry, ~150 bytes on PostgreSQL) are paid once per commit, not once per event.
    """
    runs: dict[str, dict[int, tuple[Any, ...]]] = {}
    for row in rows:
        runs.setdefault(row[0], {})[row[1]] = row
    packed = []
    for run_id, by_seq in runs.items():
        seqs = sorted(by_seq)
        start = 0
        for end in range(1, len(seqs) + 1):
            if end == len(seqs) or seqs[end] != seqs[end - 1] + 1 or end - start == PACKED_EVENTS:
                first, last = seqs[start], seqs[end - 1]
                chosen = [by_seq[seq] for seq in seqs[start:end]]
                body = b"[" + b",".join(row[3] for row in chosen) + b"]"
                crc_ = _pack_crc(run_id, first, last, body)
                packed.append((run_id, first, last, chosen[-1][2], body, crc_))
                start = end
    return packed


def unpack_events(run_id: str, seq: int, last: int, body: bytes | str, stored: int) -> list[Event]:
    """The events of one stored pack (`pack_events`), checked: its CRC, that it holds
    ``last - seq + 1`` events; each gets its run id and ``seq`` back.

    Raises:
        CorruptRecord: The pack fails its CRC or does not decode.
    """
    where = f"run {run_id!r}, events seq {seq}..{last}"
    data = body.encode() if isinstance(body, str) else bytes(body)
    if _pack_crc(run_id, seq, last, data) != stored:
        raise CorruptRecord(f"{where}: the record does not match its checksum (it was altered)")
    try:
        events = _decode_packed(data)
    except msgspec.DecodeError as error:
        raise CorruptRecord(f"{where}: the record cannot be read: {error}") from None
    if len(events) != last - seq + 1:
        raise CorruptRecord(f"{where}: {_CONTRADICTS}")
    replace = msgspec.structs.replace
    return [replace(event, run_id=run_id, seq=seq + i) for i, event in enumerate(events)]


def read_steps(run_id: str, rows: Iterable[Sequence[Any]]) -> dict[str, StepRecord]:
    """The run's step records from stored ``(address, status, body, crc)`` rows, checked."""
    records = {}
    for address, status, body, stored in rows:
        where = f"run {run_id!r}, steps {address!r}"
        record = checked(body, stored, _decode_step, where)
        if record.status != status:
            raise CorruptRecord(f"{where}: the record contradicts the columns beside it")
        records[address] = record
    return records


def _call_crc(kind: str, digest: str, body: bytes | None, blob: str | None) -> int:
    """The CRC-32 stored beside a call: of its kind and digest, and of its body or, for a
    body kept in the blobs, of the blob's name."""
    head = f"{kind} {digest} " if blob is None else f"{kind} {digest} blob {blob}"
    return zlib.crc32(body or b"", zlib.crc32(head.encode()))


def call_columns(run_id: str, call: CallRecord) -> tuple[tuple[Any, ...], tuple[Any, ...] | None]:
    """A call's row as both stores write it, and its blob's row when its body goes there.

    The call's row is ``(run_id, address, attempt, seq, kind, digest, body, blob, crc)``.
    A body over `CALL_BODY_LIMIT` bytes goes in the blob's row ``(run_id, name, body,
    crc)`` instead, named by its SHA-256: the call's ``blob`` is that name, its ``body`` None.
    """
    data = call.body.encode()
    head = (run_id, call.address, call.attempt, call.seq, call.kind, call.digest)
    if len(data) <= CALL_BODY_LIMIT:
        return (*head, call.body, None, _call_crc(call.kind, call.digest, data, None)), None
    name = hashlib.sha256(data).hexdigest()
    row = (*head, None, name, _call_crc(call.kind, call.digest, None, name))
    return row, (run_id, name, call.body, crc(data))


def _text(value: str | bytes) -> tuple[str, bytes]:
    """A stored text as text and as the bytes its CRC is of (a hand edit may leave bytes)."""
    if isinstance(value, str):
        return value, value.encode()
    data = bytes(value)
    return data.decode(errors="replace"), data


def _check_call(where: str, row: Sequence[Any]) -> str | None:
    """A stored call's body if its row holds it, None if it names a blob; checked.

    ``row`` is ``(address, attempt, seq, kind, digest, body, blob, crc)``.

    Raises:
        CorruptRecord: The row fails its CRC, or holds both a body and a blob's name or neither.
    """
    _, _, _, kind, digest, body, blob, stored = row
    if (body is None) == (blob is None) or kind not in _CALL_KINDS:
        raise CorruptRecord(f"{where}: {_CONTRADICTS}")
    text, data = (None, None) if body is None else _text(body)
    if _call_crc(kind, digest, data, blob) != stored:
        raise CorruptRecord(f"{where}: the record does not match its checksum (it was altered)")
    return text


def _check_blob(where: str, body: str | bytes, stored: int) -> str:
    """A stored blob's body, checked against its CRC (`CorruptRecord` if it fails)."""
    text, data = _text(body)
    if crc(data) != stored:
        raise CorruptRecord(f"{where}: the record does not match its checksum (it was altered)")
    return text


def read_calls(run_id: str, rows: Iterable[Sequence[Any]]) -> list[CallRecord]:
    """The run's calls from stored rows, checked, ordered by address, attempt and seq.

    A row is a call's ``(address, attempt, seq, kind, digest, body, blob, crc)``, or a
    blob that calls name, ``(None, None, None, None, name, body, None, crc)``: one
    query reads both, so that they are of one moment. A blob named by many calls is
    read and checked once, and their records share its text.
    """
    rows = list(rows)
    blobs = {
        row[4]: _check_blob(f"run {run_id!r}, blobs {row[4]!r}", row[5], row[7])
        for row in rows
        if row[0] is None
    }
    calls = []
    for row in rows:
        address, attempt, seq, kind, digest, _, blob, _ = row
        if address is None:
            continue
        where = f"run {run_id!r}, calls {address!r} attempt {attempt} seq {seq}"
        body = _check_call(where, row)
        if body is None:
            body = blobs.get(blob)
            if body is None:
                raise CorruptRecord(f"{where}: its body (blob {blob!r}) is missing")
        calls.append(
            CallRecord(
                address=address, attempt=attempt, seq=seq, kind=kind, digest=digest, body=body
            )
        )
    calls.sort(key=lambda call: (call.address, call.attempt, call.seq))
    return calls


class RecordChecker:
    """Collects the problems of a store's records, fed one row at a time.

    Events must come ordered by run and ``seq`` (a gap is a problem); steps,
    documents, calls and blobs in any order.
    """

    def __init__(self) -> None:
        self.problems: list[str] = []
        self._expected: dict[str, int] = {}
        self._named: dict[tuple[str, str], list[str]] = {}  # (run, blob) -> the calls naming it
        self._blobs: set[tuple[str, str]] = set()

    def event(
        self,
        run_id: str,
        seq: int,
        kind: str,
        body: bytes | str,
        stored: int | None,
        last: int | None = None,
    ) -> None:
        """Checks one stored event, or a pack of them (``last``: its last ``seq``)."""
        where = f"run {run_id!r}, events seq {seq}"
        try:
            if last is None:
                event = checked(body, stored, _decode_event, where)
                if (event.seq, event.type) != (seq, kind):
                    self.problems.append(f"{where}: {_CONTRADICTS}")
            else:
                assert stored is not None  # a pack always has its CRC
                packed = unpack_events(run_id, seq, last, body, stored)
                if packed[-1].type != kind:
                    self.problems.append(f"{where}..{last}: {_CONTRADICTS}")
        except CorruptRecord as error:
            self.problems.append(str(error))
        following = self._expected.get(run_id, 1)
        if seq != following:
            self.problems.append(f"run {run_id!r}: events {following}..{seq - 1} are missing")
        self._expected[run_id] = (seq if last is None else last) + 1

    def step(
        self, run_id: str, address: str, status: str, body: bytes | str, stored: int | None
    ) -> None:
        """Checks one stored step record."""
        where = f"run {run_id!r}, steps {address!r}"
        try:
            if checked(body, stored, _decode_step, where).status != status:
                self.problems.append(f"{where}: {_CONTRADICTS}")
        except CorruptRecord as error:
            self.problems.append(str(error))

    def document(self, run_id: str, body: bytes | str, stored: int | None) -> None:
        """Checks one stored document."""
        try:
            checked(body, stored, msgspec.json.decode, f"run {run_id!r}, document")
        except CorruptRecord as error:
            self.problems.append(str(error))

    def call(self, run_id: str, row: Sequence[Any]) -> None:
        """Checks one stored call, ``(address, attempt, seq, kind, digest, body, blob, crc)``."""
        address, attempt, seq, _, _, _, blob, _ = row
        where = f"run {run_id!r}, calls {address!r} attempt {attempt} seq {seq}"
        try:
            if _check_call(where, row) is None:
                self._named.setdefault((run_id, blob), []).append(where)
        except CorruptRecord as error:
            self.problems.append(str(error))

    def blob(self, run_id: str, name: str, body: str | bytes, stored: int) -> None:
        """Checks one stored blob: its CRC, and that its name is its body's SHA-256."""
        where = f"run {run_id!r}, blobs {name!r}"
        self._blobs.add((run_id, name))
        try:
            _check_blob(where, body, stored)
            if hashlib.sha256(_text(body)[1]).hexdigest() != name:
                self.problems.append(f"{where}: {_CONTRADICTS}")
        except CorruptRecord as error:
            self.problems.append(str(error))

    def report(self, *, limit: int = 100) -> list[str]:
        """The problems found, at most ``limit`` of them and a count of the rest."""
        problems = list(self.problems)
        problems += [
            f"{where}: its body (blob {key[1]!r}) is missing"
            for key, calls in self._named.items()
            if key not in self._blobs
            for where in calls
        ]
        if len(problems) > limit:
            problems[limit:] = [f"... and {len(problems) - limit} more"]
        return problems
