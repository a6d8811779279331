"""The run store: what a run must not lose, kept in memory, SQLite or PostgreSQL.

``RunStore`` is the protocol every store implements (``_base.py``, with
``RunRow`` and the commands one process leaves for the one driving a run); a
store backend is one module or subpackage beside it: ``MemoryRunStore``,
``sqlite/`` (``SqliteRunStore``) and ``postgres/`` (``PostgresRunStore``).
They share the run leases (``Lease``, ``LeaseHolder``: which process drives a
run, fenced), the checked records (``_records.py``) and, for the two databases,
the writing half of a store (``_queued.py``: writes queued to one writer, fenced).
``make_store`` picks a store from a path, a ``postgresql://`` URL or None, and
``describe_store`` names one without its password.

It knows nothing of actors or workflows: it stores events, step records and
run rows (``cadenza.protocols``) for whoever drives the run.
"""

from ._base import WAITING_COMMAND_BYTES as WAITING_COMMAND_BYTES
from ._base import WAITING_COMMANDS as WAITING_COMMANDS
from ._base import CancelCommand as CancelCommand
from ._base import Command as Command
from ._base import Fleet as Fleet
from ._base import MessageCommand as MessageCommand
from ._base import QueueDepth as QueueDepth
from ._base import RunRow as RunRow
from ._base import RunStore as RunStore
from ._base import SupervisorRow as SupervisorRow
from ._base import WorkerLoad as WorkerLoad
from ._base import is_under as is_under
from ._lease import DEFAULT_LEASE_TTL as DEFAULT_LEASE_TTL
from ._lease import Lease as Lease
from ._lease import LeaseHolder as LeaseHolder
from ._lease import lease_failed as lease_failed
from ._lease import lease_lost as lease_lost
from ._lease import lease_ttl_from_environment as lease_ttl_from_environment
from ._memory import MemoryRunStore as MemoryRunStore
from ._open import describe_store as describe_store
from ._open import make_store as make_store
from ._urls import is_postgres_url as is_postgres_url
from .postgres import SCHEMA_VERSION as POSTGRES_SCHEMA_VERSION
from .postgres import PostgresRunStore as PostgresRunStore
from .sqlite import SCHEMA_VERSION as SCHEMA_VERSION
from .sqlite import SqliteRunStore as SqliteRunStore

__all__ = [
    "DEFAULT_LEASE_TTL",
    "POSTGRES_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "WAITING_COMMANDS",
    "WAITING_COMMAND_BYTES",
    "CancelCommand",
    "Command",
    "Fleet",
    "Lease",
    "LeaseHolder",
    "MemoryRunStore",
    "MessageCommand",
    "PostgresRunStore",
    "QueueDepth",
    "RunRow",
    "RunStore",
    "SqliteRunStore",
    "SupervisorRow",
    "WorkerLoad",
    "describe_store",
    "is_postgres_url",
    "is_under",
    "lease_failed",
    "lease_lost",
    "lease_ttl_from_environment",
    "make_store",
]
