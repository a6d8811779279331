"""``ActorRef``: the handle to an actor, and how tells and asks reach its inbox.

A ref outlives restarts: the supervisor puts a fresh instance and inbox
behind the same ref, so holders keep a working handle. Tells go into the
inbox as they are; an ask goes in as an ``_Ask`` envelope carrying its reply
future, so a tell costs no allocation and no task is created per message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cadenza.errors import ActorStopped, AskTimeout, InboxFull

from ._actor import Actor, ActorState
from ._inbox import Inbox

if TYPE_CHECKING:
    from ._address import Address
    from ._restart import Restart
    from ._supervisor import Supervisor

__all__ = ["ActorRef", "RestartBatch"]

_STARTING = ActorState.STARTING
_RUNNING = ActorState.RUNNING
_STOPPING = ActorState.STOPPING


_ACTOR_TYPES: set[type] = set()
"""Classes already seen to be `Actor` subclasses."""


class _Ask:
    __slots__ = ("message", "reply")

    def __init__(self, message: Any, reply: asyncio.Future[Any]) -> None:
        self.message = message
        self.reply = reply


class ActorRef:
    """The handle to one supervised actor: its address, state, and ways to reach it.

    Obtained from ``Supervisor.spawn`` or ``Supervisor.lookup``; never built
    directly. ``send`` and ``ask`` do not yield to the event loop while the
    inbox has room (like ``asyncio.Queue.put``).
    """

    __slots__ = (
        "_actor",
        "_address",
        "_batch",
        "_by_owner",
        "_cancel_pending",
        "_factory",
        "_inbox",
        "_key",
        "_live",
        "_restart",
        "_scheduled",
        "_started",
        "_state",
        "_stop_requested",
        "_supervisor",
        "_task",
    )

    def __init__(
        self,
        supervisor: Supervisor,
        address: Address,
        factory: Callable[[], Actor],
        restart: Restart,
        inbox_size: int,
    ) -> None:
        self._supervisor = supervisor
        self._address = address
        self._factory = factory
        self._restart = restart
        self._key = address._text  # the table key, inbox owner and task name
        self._inbox: Inbox[Any] = Inbox(inbox_size, owner=self._key)
        self._actor: Actor | None = None
        self._state = _STARTING
        self._stop_requested = False
        self._by_owner = False
        # The restart batch (ONE_FOR_ALL / REST_FOR_ONE) this ref waits in, if any.
        self._batch: RestartBatch | None = None
        # The ready queue's view (kernel/_ready_queue.py): the instance is started and
        # not yet ended; on_start has run; it waits in the ready queue; the task
        # running its turn right now, if any; a cancellation to apply once its
        # synchronous turn ends or suspends.
        self._live = False
        self._started = False
        self._scheduled = False
        self._task: asyncio.Task[None] | None = None
        self._cancel_pending = False

    @property
    def address(self) -> Address:
        """The actor's address."""
        return self._address

    @property
    def state(self) -> ActorState:
        """Where the current instance is in its lifecycle."""
        return self._state

    @property
    def supervisor(self) -> Supervisor:
        """The supervisor that owns the actor."""
        return self._supervisor

    def send_nowait(self, message: Any) -> None:
        """Queue ``message`` for the actor now (a tell).

        Raises:
            InboxFull: The inbox is full.
            ActorStopped: The actor stopped or is stopping.
        """
        try:
            self._inbox.send_nowait(message)
        except ActorStopped:
            raise self._refused(message) from None

    async def send(self, message: Any) -> None:
        """Queue ``message`` for the actor, waiting while its inbox is full (a tell).

        Raises:
            ActorStopped: The actor stopped before taking the message.
        """
        inbox = self._inbox
        try:
            inbox.send_nowait(message)
        except InboxFull:
            try:
                await inbox.send(message)
            except ActorStopped:
                raise self._refused(message) from None
        except ActorStopped:
            raise self._refused(message) from None

    # The timeout runs on the supervisor's Clock, so FakeClock drives it in tests.
    async def ask(
        self,
        message: Any,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Any:
        """Send ``message`` and wait for the value ``receive`` returns for it.

        The timeout runs on the supervisor's clock and covers waiting for
        room in the inbox too. An ask given up (timed out or cancelled)
        before the actor takes it is not handled.

        Raises:
            AskTimeout: No reply within ``timeout`` seconds.
            ActorStopped: The actor stopped, crashed on another message, or
                was cancelled before answering.
            RuntimeError: An actor asked itself, which could never be answered.
            Exception: Whatever ``receive`` raised for this message.
        """
        if asyncio.current_task() is self._task:
            raise RuntimeError(f"actor {self._key!r} asked itself; use a tell")
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        envelope = _Ask(message, reply)
        remaining = timeout
        try:
            self._inbox.send_nowait(envelope)
        except InboxFull:
            remaining = await self._send_waiting(envelope, timeout)
        except ActorStopped:
            raise self._stopped(message, "stopped") from None
        if remaining is None or timeout is None:  # both or neither
            return await reply
        clock = self._supervisor.clock
        handle = clock.call_later(remaining, _expire, reply, self._address, message, timeout)
        try:
            return await reply
        finally:
            handle.cancel()

    async def _send_waiting(self, envelope: _Ask, limit: float | None) -> float | None:
        """Queue an ask behind a full inbox within ``limit`` seconds; return the time left."""
        inbox = self._inbox
        try:
            if limit is None:
                await inbox.send(envelope)
                return None
            clock = self._supervisor.clock
            started = clock.now()
            with clock.move_on_after(limit) as scope:
                await inbox.send(envelope)
            if scope.cancelled_caught:
                raise _timeout_error(self._address, envelope.message, limit)
            return limit - (clock.now() - started)
        except ActorStopped:
            raise self._stopped(envelope.message, "stopped") from None

    def stop(self) -> None:
        """Stop the actor for good after its current message (no restart).

        ``on_stop`` runs; queued asks fail with ``ActorStopped`` and queued
        tells go to dead letters. Idempotent.
        """
        self._request_stop(by_owner=True)

    def _request_stop(self, *, by_owner: bool) -> None:
        if by_owner:
            self._by_owner = True
        if self._stop_requested:
            return
        self._stop_requested = True
        if self._state is _RUNNING or self._state is _STARTING:
            self._state = _STOPPING
        self._inbox.close()

    def _wake(self) -> None:
        """Called by the inbox of an idle actor when a message arrives or it closes."""
        self._supervisor._ready_queue.schedule(self)

    def _instantiate(self) -> Actor:
        actor = self._factory()
        kind = type(actor)
        if kind not in _ACTOR_TYPES:  # an ABC isinstance check costs more than a set lookup
            if not isinstance(actor, Actor):
                raise TypeError(f"the factory for {self._address} returned {actor!r}, not an Actor")
            _ACTOR_TYPES.add(kind)
        actor._ref = self
        self._actor = actor
        return actor

    def _refused(self, message: Any) -> ActorStopped:
        return ActorStopped(
            f"actor {self._key!r} is stopping or stopped; it cannot take {type(message).__name__}"
        )

    def _stopped(self, message: Any, how: str) -> ActorStopped:
        return ActorStopped(f"actor {self._key!r} {how} before answering {type(message).__name__}")

    def __repr__(self) -> str:
        return f"<ActorRef {self._address} {self._state.value}>"


class RestartBatch:
    """Actors restarted together (ONE_FOR_ALL, REST_FOR_ONE), in spawn order.

    They restart only once every member's instance has ended, so the new
    instances start in spawn order whatever order the old ones ended in.
    """

    __slots__ = ("members", "running")

    def __init__(self, members: list[ActorRef]) -> None:
        self.members = members
        self.running = sum(member._live for member in members)


def _expire(reply: asyncio.Future[Any], address: Address, message: Any, timeout: float) -> None:
    if not reply.done():
        reply.set_exception(_timeout_error(address, message, timeout))


def _timeout_error(address: Address, message: Any, timeout: float) -> AskTimeout:
    return AskTimeout(
        f"no reply from {str(address)!r} to {type(message).__name__} within {timeout}s"
    )
