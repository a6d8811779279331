"""The actor kernel: addresses, inboxes, actors, supervision, clocks, run stores.

It knows nothing of workflows. An ``Actor`` handles one message at a time from
a bounded ``Inbox``; a ``Supervisor`` spawns actors under namespaced
``Address``es, routes tells and asks to them, restarts them by OTP rules, and
reports undeliverable messages as ``DeadLetter``s. Time comes from a ``Clock``
(``FakeClock`` in tests). The run store (``RunStore`` and its memory, SQLite
and PostgreSQL implementations, and ``make_store``, which picks one from a
path or a URL) lives here too.

It was ``cadenza.runtime`` until it was renamed so that no reader confuses it with
`cadenza.Runtime`, the workflow service; ``cadenza.runtime`` remains an alias
for one release.
"""

from ._actor import Actor as Actor
from ._actor import ActorState as ActorState
from ._address import Address as Address
from ._clock import Clock as Clock
from ._clock import SystemClock as SystemClock
from ._clock import Timer as Timer
from ._fake_clock import FakeClock as FakeClock
from ._inbox import Inbox as Inbox
from ._lease import DEFAULT_LEASE_TTL as DEFAULT_LEASE_TTL
from ._lease import Lease as Lease
from ._lease import LeaseHolder as LeaseHolder
from ._lease import lease_failed as lease_failed
from ._lease import lease_lost as lease_lost
from ._lease import lease_ttl_from_environment as lease_ttl_from_environment
from ._postgres import PostgresRunStore as PostgresRunStore
from ._postgres_schema import SCHEMA_VERSION as POSTGRES_SCHEMA_VERSION
from ._ref import ActorRef as ActorRef
from ._restart import DeadLetter as DeadLetter
from ._restart import Intensity as Intensity
from ._restart import Restart as Restart
from ._restart import RestartStrategy as RestartStrategy
from ._restart import SupervisorStatistics as SupervisorStatistics
from ._slots import Slots as Slots
from ._sqlite import SCHEMA_VERSION as SCHEMA_VERSION
from ._sqlite import SqliteRunStore as SqliteRunStore
from ._store import WAITING_COMMAND_BYTES as WAITING_COMMAND_BYTES
from ._store import WAITING_COMMANDS as WAITING_COMMANDS
from ._store import CancelCommand as CancelCommand
from ._store import Command as Command
from ._store import MemoryRunStore as MemoryRunStore
from ._store import MessageCommand as MessageCommand
from ._store import RunRow as RunRow
from ._store import RunStore as RunStore
from ._store import is_under as is_under
from ._stores import describe_store as describe_store
from ._stores import make_store as make_store
from ._supervisor import Supervisor as Supervisor
from ._threads import call_in_thread as call_in_thread
from ._urls import is_postgres_url as is_postgres_url
from ._watchdog import LoopBlocked as LoopBlocked
from ._watchdog import LoopGuard as LoopGuard
from ._watchdog import LoopWatchdog as LoopWatchdog

__all__ = [
    "DEFAULT_LEASE_TTL",
    "POSTGRES_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "WAITING_COMMANDS",
    "WAITING_COMMAND_BYTES",
    "Actor",
    "ActorRef",
    "ActorState",
    "Address",
    "CancelCommand",
    "Clock",
    "Command",
    "DeadLetter",
    "FakeClock",
    "Inbox",
    "Intensity",
    "Lease",
    "LeaseHolder",
    "LoopBlocked",
    "LoopGuard",
    "LoopWatchdog",
    "MemoryRunStore",
    "MessageCommand",
    "PostgresRunStore",
    "Restart",
    "RestartStrategy",
    "RunRow",
    "RunStore",
    "Slots",
    "SqliteRunStore",
    "Supervisor",
    "SupervisorStatistics",
    "SystemClock",
    "Timer",
    "call_in_thread",
    "describe_store",
    "is_postgres_url",
    "is_under",
    "lease_failed",
    "lease_lost",
    "lease_ttl_from_environment",
    "make_store",
]
