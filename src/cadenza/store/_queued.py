"""What the SQLite and PostgreSQL stores share: writes queued to one writer, fenced by leases.

Both stores hand every write to a writer task (a thread for SQLite, a connection
for PostgreSQL) that commits what is queued in batches; a write of a run whose
lease this store holds is committed only while the lease row still carries its
fence. `QueuedWrites` is that half of a store, the same for both: a backend sets
its writer, its held leases and the statements it writes here.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from cadenza.errors import StoreError
from cadenza.protocols import CallRecord

from ._lease import HeldLeases, Lease, LeaseHolder
from ._records import call_columns, crc

__all__ = ["QueuedWrites", "Writer"]


class Writer(Protocol):
    """A store's writer task, as the store's methods use it."""

    def put(self, statement: Any, parameters: tuple[Any, ...], lease: Lease | None = None) -> None:
        """Queues one statement, fenced by ``lease`` when its run's lease is held."""

    async def flush(self, lease: Lease | None = None) -> None:
        """Returns once everything queued before the call is committed.

        Args:
            lease: The lease of the run the caller drives: if a batch fails, only
                a failure of that run's writes matters (the lease tells, and
                the caller asks it), not the other runs'.
        """


class QueuedWrites:
    """The writing half of a database store; a subclass sets what the attributes name.

    Attributes:
        save_document_statement: Writes ``(run_id, body, crc)`` into the documents.
        release_lease_statement: Frees ``(run_id, fence)``'s lease, keeping its row
            (the next holder's fence must be higher still).
        put_call_statement: Writes (or replaces) a call's row (`call_columns`).
        put_blob_statement: Writes a blob's row unless the run has that blob already.
            Both go under the table ``calls``, so that the writer keeps them in
            queue order with the calls' removals (which collect the blobs no call
            names any more).
    """

    save_document_statement: ClassVar[Any]
    release_lease_statement: ClassVar[Any]
    put_call_statement: ClassVar[Any]
    put_blob_statement: ClassVar[Any]
    _writer: Writer
    _leases: HeldLeases

    async def flush(self, run_id: str | None = None) -> None:
        """Returns once everything queued before this call is committed.

        Raises:
            StoreError: What was queued could not be committed, or the writer failed.
            StoreFailed: ``run_id``'s writes could not be committed: the run must stop.
            LeaseLost: ``run_id``'s lease went to another owner; its writes were refused.
        """
        self._leases.raise_if_stopped(run_id)
        try:
            await self._writer.flush(None if run_id is None else self._leases.get(run_id))
        except StoreError:
            self._leases.raise_if_stopped(run_id)  # the run's own writes failed: say whose
            raise
        self._leases.raise_if_stopped(run_id)

    def save_document(self, run_id: str, body: bytes) -> None:
        """Queues the run's document."""
        self._writer.put(
            self.save_document_statement, (run_id, body, crc(body)), self._leases.get(run_id)
        )

    def put_call(self, run_id: str, call: CallRecord) -> None:
        """Queues one completed call; a body over `CALL_BODY_LIMIT` bytes goes to the blobs."""
        row, blob = call_columns(run_id, call)
        lease = self._leases.get(run_id)
        if blob is not None:
            self._writer.put(self.put_blob_statement, blob, lease)
        self._writer.put(self.put_call_statement, row, lease)

    def release_lease(self, run_id: str, holder: LeaseHolder) -> None:
        """Queues the release of ``holder``'s lease (nothing if it was lost; a lease whose
        writes failed is given back, so that the run can be taken up again)."""
        lease = self._leases.drop(run_id, holder)
        if lease is not None and lease.lost is None:
            self._writer.put(self.release_lease_statement, (run_id, lease.fence))
