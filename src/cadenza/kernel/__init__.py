"""The actor kernel: addresses, inboxes, actors, supervision, clocks.

It knows nothing of workflows. An ``Actor`` handles one message at a time from
a bounded ``Inbox``; a ``Supervisor`` spawns actors under namespaced
``Address``es, routes tells and asks to them, restarts them by OTP rules, and
reports undeliverable messages as ``DeadLetter``s. Time comes from a ``Clock``
(``FakeClock`` in tests). The run store is `cadenza.store`, beside the kernel:
neither imports the other.

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
from ._ref import ActorRef as ActorRef
from ._restart import DeadLetter as DeadLetter
from ._restart import Intensity as Intensity
from ._restart import Restart as Restart
from ._restart import RestartStrategy as RestartStrategy
from ._restart import SupervisorStatistics as SupervisorStatistics
from ._slots import Slots as Slots
from ._supervisor import Supervisor as Supervisor
from ._threads import call_in_thread as call_in_thread
from ._watchdog import LoopBlocked as LoopBlocked
from ._watchdog import LoopGuard as LoopGuard
from ._watchdog import LoopWatchdog as LoopWatchdog

__all__ = [
    "Actor",
    "ActorRef",
    "ActorState",
    "Address",
    "Clock",
    "DeadLetter",
    "FakeClock",
    "Inbox",
    "Intensity",
    "LoopBlocked",
    "LoopGuard",
    "LoopWatchdog",
    "Restart",
    "RestartStrategy",
    "Slots",
    "Supervisor",
    "SupervisorStatistics",
    "SystemClock",
    "Timer",
    "call_in_thread",
]
