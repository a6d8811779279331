"""The ``Actor`` base class and the ``ActorState`` lifecycle.

Every hook and every ``receive`` call of an actor is one turn, and its turns run
one at a time (``_ready_queue.py`` schedules them), so an actor's own attributes
need no locks.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._address import Address
    from ._ref import ActorRef
    from ._supervisor import Supervisor

__all__ = ["Actor", "ActorState"]


class ActorState(enum.Enum):
    """Where an actor (the one behind an ``ActorRef``) is in its life.

    Transitions::

        STARTING --on_start returned--> RUNNING
        STARTING / RUNNING --stop requested--> STOPPING
        STOPPING --current message done, on_stop returned--> STOPPED
        STARTING / RUNNING / STOPPING --on_start, receive or on_stop raised--> FAILED
        STARTING / RUNNING / STOPPING --task cancelled--> STOPPED
        FAILED / STOPPED --restarted by the supervisor--> STARTING

    A restart keeps the ``ActorRef`` and puts a new instance behind it, so
    STOPPED and FAILED are final only once the supervisor decided not to
    restart (the ref is then gone from ``Supervisor.lookup``).
    """

    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


class Actor(ABC):
    """Private state plus a ``receive`` method, driven one turn at a time by the ready queue.

    Subclass it and override ``receive``; the supervisor calls it with one
    message at a time, in inbox order, and the value it returns answers an
    ``ask`` (it is dropped for a ``tell``). Construct actors through the
    factory given to ``Supervisor.spawn``: the factory runs again for each
    restart, so it must build fresh state.

    ``address``, ``supervisor`` and ``ref`` are set after the factory returns
    and before ``on_start``; do not use them in ``__init__``.

    Hooks (turns like ``receive``; an actor has a task only while a turn is
    suspended in an await, and a turn keeps the one it started in):

    * ``on_start``: before the first message. Messages sent meanwhile wait
      in the inbox. If it raises, the actor has crashed: ``on_failure`` runs,
      queued asks fail with ``ActorStopped``, and the restart policy decides.
    * ``on_stop``: after a stop was requested (``stop()``, ``ActorRef.stop``,
      or the supervisor shutting down) and the current message finished. If it
      raises, the stop counts as a crash. It does not run after a crash or a
      cancellation.
    * ``on_failure``: after ``on_start``, ``receive`` or ``on_stop`` raised,
      with that error, before the supervisor decides on a restart. If it
      raises, its error is reported instead (the original is its
      ``__context__``).

    A cancelled actor (``Supervisor.cancel``, an escalation, or the task
    running the supervisor being cancelled) runs no hook; keep clean-up that
    must survive cancellation in ``try``/``finally`` inside ``receive``.
    """

    __slots__ = ("_ref",)

    _ref: ActorRef

    @abstractmethod
    async def receive(self, message: Any) -> Any:
        """Handle one message; the return value answers an ``ask``.

        An exception raised here crashes the actor (see the class docstring);
        if the message came from an ``ask``, the asker gets the exception too.
        """

    async def on_start(self) -> None:  # noqa: B027  (an optional hook, empty on purpose)
        """Prepare before the first message. Does nothing by default."""

    async def on_stop(self) -> None:  # noqa: B027  (an optional hook, empty on purpose)
        """Release what the actor holds after a requested stop. Does nothing by default."""

    async def on_failure(self, error: BaseException) -> None:  # noqa: B027
        """React to a crash (``error``) before the restart decision. Does nothing by default."""

    @property
    def address(self) -> Address:
        """This actor's address."""
        return self._ref.address

    @property
    def supervisor(self) -> Supervisor:
        """The supervisor that spawned this actor (to spawn, tell or ask others)."""
        return self._ref.supervisor

    @property
    def ref(self) -> ActorRef:
        """The handle others use to reach this actor."""
        return self._ref

    @property
    def waiting_messages(self) -> int:
        """How many messages wait in this actor's inbox now (the one being handled aside)."""
        return len(self._ref._inbox)

    def take_messages(self) -> list[Any]:
        """Remove and return every message waiting in this actor's inbox, oldest first.

        For an actor busy with one long message (an agent between two model calls)
        that wants to act on what arrived meanwhile; blocked senders get room.
        """
        return self._ref._inbox.drain()

    def stop(self) -> None:
        """Stop after the current message: ``on_stop`` runs, queued messages are refused.

        Queued asks fail with ``ActorStopped`` and queued tells go to dead
        letters. A ``PERMANENT`` actor that stops itself is restarted, as in
        OTP; stop it through ``ActorRef.stop`` to end it for good.
        """
        self._ref._request_stop(by_owner=False)
