"""Supervision policy as data: restart types, strategies, intensity, and the records.

The semantics are Erlang/OTP's (``supervisor`` behaviour), restated here
for actors instead of processes.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

import msgspec

__all__ = [
    "DeadLetter",
    "Intensity",
    "Restart",
    "RestartStrategy",
    "SupervisorStatistics",
]


class Restart(enum.Enum):
    """When a stopped actor is started again (OTP's child ``restart`` type).

    Attributes:
        PERMANENT: Always: after a crash, and after it stopped itself with
            ``Actor.stop()``. Only ``ActorRef.stop`` or the supervisor's own
            shutdown ends it for good.
        TRANSIENT: Only after a crash (``on_start``, ``receive`` or
            ``on_stop`` raised).
        TEMPORARY: Never; a crash is reported (``on_crash``) and the actor is
            gone.
    """

    PERMANENT = "permanent"
    TRANSIENT = "transient"
    TEMPORARY = "temporary"


class RestartStrategy(enum.Enum):
    """Which actors a restart takes with it (OTP's supervisor strategies).

    Attributes:
        ONE_FOR_ONE: Only the actor that ended.
        ONE_FOR_ALL: Every child: the others are stopped (each finishes its
            current message, ``on_stop`` runs), then all that are not
            ``TEMPORARY`` start again in spawn order.
        REST_FOR_ONE: The actor that ended and every child spawned after it,
            stopped and restarted the same way.
    """

    ONE_FOR_ONE = "one_for_one"
    ONE_FOR_ALL = "one_for_all"
    REST_FOR_ONE = "rest_for_one"


class DeadLetter(msgspec.Struct, frozen=True):
    """A message that could not be delivered, reported instead of dropped silently.

    Attributes:
        address: Where it was sent (the text as given, for an unknown address).
        message_type: The message's class name.
        reason: Why it was not delivered, e.g. ``no such actor``,
            ``actor stopped``, ``actor crashed``.
    """

    address: str
    message_type: str
    reason: str


@dataclass(frozen=True, slots=True)
class SupervisorStatistics:
    """A snapshot of a supervisor, from ``Supervisor.statistics()``.

    Attributes:
        live_actors: Actors in the address table (running, or about to restart).
        restarts: Actor instances started again after the first.
        crashes: Actors that ended with an error (each reported to ``on_crash``).
        dead_letters: Messages reported as undeliverable.
    """

    live_actors: int
    restarts: int
    crashes: int
    dead_letters: int


class Intensity:
    """OTP's restart intensity: at most ``max_restarts`` restarts in any ``within`` seconds.

    ``within`` may be ``math.inf``: then at most ``max_restarts`` restarts ever.
    A workflow's ``options.supervisor`` counts its steps' restarts with one per
    list of steps (``actors.containers``).
    """

    __slots__ = ("_max_restarts", "_times", "_within")

    def __init__(self, max_restarts: int, within: float) -> None:
        if max_restarts < 0 or within <= 0:
            raise ValueError(
                f"need max_restarts >= 0 and within > 0, got {max_restarts} and {within}"
            )
        self._max_restarts = max_restarts
        self._within = within
        self._times: deque[float] = deque()

    def admit(self, now: float) -> int | None:
        """Record a restart at ``now``; None if allowed, else the count in the window."""
        times = self._times
        times.append(now)
        while times and times[0] <= now - self._within:
            times.popleft()
        if len(times) > self._max_restarts:
            return len(times)
        return None
