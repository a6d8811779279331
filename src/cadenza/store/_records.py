"""Stored records, checked before anything trusts them: shared by the durable stores.

Every stored body is msgspec JSON with a CRC-32 beside it. Reading one checks
that it decodes to its type, matches its CRC, and agrees with the columns stored
beside it; anything else is a `CorruptRecord` naming the run, the table and the
key. The CRC catches damage and hand edits, not an adversary (who could
recompute it). `RecordChecker` is what ``runs check`` does over a whole store,
whichever database holds it.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import msgspec

from cadenza.errors import CorruptRecord
from cadenza.protocols import Event, RunResult, StepRecord

from ._base import RunRow

__all__ = [
    "RUN_COLUMNS",
    "RecordChecker",
    "checked",
    "crc",
    "read_document",
    "read_events",
    "read_run",
    "read_steps",
    "run_columns",
]

T = TypeVar("T")

_CONTRADICTS = "the record contradicts the columns stored beside it"
_decode_event = msgspec.json.Decoder(Event).decode
_decode_step = msgspec.json.Decoder(StepRecord).decode
_decode_inputs = msgspec.json.Decoder(dict[str, Any]).decode
_decode_result = msgspec.json.Decoder(RunResult).decode


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
    " parent_run_id, parent_address"
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
    )


def read_run(row: Sequence[Any]) -> RunRow:
    """The `RunRow` of a stored ``runs`` row (its `RUN_COLUMNS`), checked."""
    run_id, workflow, path, status, inputs, created_at, updated_at, result, parent, at = row
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
    )


def read_document(run_id: str, row: Sequence[Any] | None) -> bytes | None:
    """A run's stored document from its ``(body, crc)`` row (None: none), checked."""
    if row is None:
        return None
    body, stored = row
    return checked(body, stored, bytes, f"run {run_id!r}, document")


def read_events(run_id: str, rows: Iterable[Sequence[Any]]) -> list[Event]:
    """The run's events from stored ``(seq, body, crc)`` rows, each checked and in place."""
    events = []
    for seq, body, stored in rows:
        event = checked(body, stored, _decode_event, f"run {run_id!r}, events seq {seq}")
        if event.seq != seq or event.run_id != run_id:
            raise CorruptRecord(f"run {run_id!r}, events seq {seq}: the record is misplaced")
        events.append(event)
    return events


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


class RecordChecker:
    """Collects the problems of a store's records, fed one row at a time.

    Events must come ordered by run and ``seq`` (a gap is a problem); steps and
    documents in any order.
    """

    def __init__(self) -> None:
        self.problems: list[str] = []
        self._expected: dict[str, int] = {}

    def event(
        self, run_id: str, seq: int, kind: str, body: bytes | str, stored: int | None
    ) -> None:
        """Checks one stored event."""
        where = f"run {run_id!r}, events seq {seq}"
        try:
            event = checked(body, stored, _decode_event, where)
            if (event.seq, event.type) != (seq, kind):
                self.problems.append(f"{where}: {_CONTRADICTS}")
        except CorruptRecord as error:
            self.problems.append(str(error))
        following = self._expected.get(run_id, 1)
        if seq != following:
            self.problems.append(f"run {run_id!r}: events {following}..{seq - 1} are missing")
        self._expected[run_id] = seq + 1

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

    def report(self, *, limit: int = 100) -> list[str]:
        """The problems found, at most ``limit`` of them and a count of the rest."""
        problems = list(self.problems)
        if len(problems) > limit:
            problems[limit:] = [f"... and {len(problems) - limit} more"]
        return problems
