"""The ``Supervisor``: spawns actors under addresses, routes to them, stops them.

Actors have no task of their own: the supervisor's ready queue
(``_ready_queue.py``) runs their turns, and gives an actor a task only while a
turn is suspended. Those tasks are plain asyncio tasks rather than anyio
task-group children: anyio's ``start_soon`` measured 3x the spawn time and
+0.75 KiB per task here (docs/runtime-notes.md). Structured concurrency is
kept by hand: the supervisor counts its live actor instances and the
ready queue's tasks, and ``async with`` does not return until both are zero;
cancelling the block cancels every actor. The restart and failure rules live
in ``_supervision.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType
from typing import Any

from anyio import CancelScope

from cadenza.errors import ActorStopped, AddressError, InboxFull

from ._actor import Actor
from ._address import Address
from ._clock import Clock
from ._inbox import Inbox
from ._ref import ActorRef
from ._restart import DeadLetter, Restart, RestartStrategy, SupervisorStatistics
from ._supervision import _RUNNING, Phase, SupervisionCore

__all__ = ["Supervisor"]


class Supervisor(SupervisionCore):
    """Owns a set of actors: spawns, routes, restarts, and stops them together.

    Use it as ``async with Supervisor() as sup:``. Leaving the block normally
    stops every actor gracefully (each finishes its current message and runs
    ``on_stop``; queued asks fail with ``ActorStopped``, queued tells become
    dead letters) and waits for them. Leaving it with an exception, or being
    cancelled, cancels every actor and waits for them. No task outlives the
    block.

    Args:
        strategy: Which actors a restart takes along (see ``RestartStrategy``).
        max_restarts: More restarts than this within ``within`` seconds make
            the supervisor give up: it cancels every actor and the block
            raises ``SupervisorEscalation`` with the last crash as its cause.
        within: The intensity window in seconds, on ``clock``.
        clock: Time for ask timeouts and restart intensity; the event loop's
            by default.
        inbox_size: The default capacity of an actor's inbox.
        on_dead_letter: Called with each undeliverable message; by default
            it is logged (``dead_letter`` on the ``cadenza.kernel`` logger).
        on_crash: Called with the address and error of every crash, before
            the restart decision; by default it is logged (``actor_crashed``).
            If a callback raises, the supervisor cancels its actors and the
            block raises that exception.
    """

    def __init__(
        self,
        *,
        strategy: RestartStrategy = RestartStrategy.ONE_FOR_ONE,
        max_restarts: int = 3,
        within: float = 5.0,
        clock: Clock | None = None,
        inbox_size: int = 1000,
        on_dead_letter: Callable[[DeadLetter], None] | None = None,
        on_crash: Callable[[Address, BaseException], None] | None = None,
    ) -> None:
        if inbox_size < 1:
            raise ValueError(f"inbox_size must be at least 1, not {inbox_size}")
        super().__init__(
            strategy=strategy,
            max_restarts=max_restarts,
            within=within,
            clock=clock,
            on_dead_letter=on_dead_letter,
            on_crash=on_crash,
        )
        self._inbox_size = inbox_size

    @property
    def clock(self) -> Clock:
        """The clock for ask timeouts and restart intensity."""
        return self._clock

    @property
    def children(self) -> tuple[ActorRef, ...]:
        """The live actors, in spawn order."""
        return tuple(self._table.values())

    def statistics(self) -> SupervisorStatistics:
        """A snapshot of actor, restart, crash and dead-letter counts."""
        return SupervisorStatistics(
            live_actors=len(self._table),
            restarts=self._restarts,
            crashes=self._crashes,
            dead_letters=self._dead_letters,
        )

    async def __aenter__(self) -> Supervisor:
        if self._phase is not Phase.NEW:
            raise RuntimeError("a Supervisor can be entered only once")
        self._scope = CancelScope()
        self._scope.__enter__()
        self._phase = Phase.RUNNING
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        assert self._scope is not None
        self._phase = Phase.STOPPING
        self._ready_queue.close()  # its task ends once the last actor has
        if exc is None and not self._scope.cancel_called:
            for ref in list(self._table.values()):
                ref._request_stop(by_owner=True)
        else:
            self._cancel_children()
        swallowed = bool(self._scope.__exit__(exc_type, exc, tb))
        cancelled = await self._wait_for_children()
        self._phase = Phase.CLOSED
        if self._failure is not None:
            raise self._failure
        if cancelled is not None and (exc is None or swallowed):
            raise cancelled
        return swallowed

    async def _wait_for_children(self) -> asyncio.CancelledError | None:
        """Wait until every actor and task ended; the cancellation that came meanwhile, if any."""
        cancelled: asyncio.CancelledError | None = None
        while self._busy():
            self._idle = asyncio.get_running_loop().create_future()
            try:
                await self._idle
            except asyncio.CancelledError as error:
                # Stop waiting politely: cancel the stragglers, wait for them, and
                # re-raise this very error (anyio recognises its own by message).
                cancelled = cancelled or error
                self._cancel_children()
        self._idle = None
        return cancelled

    def cancel(self) -> None:
        """Cancel every actor and the body of the ``async with`` block.

        The block then ends without an error, after every actor ended;
        pending asks fail with ``ActorStopped``; no hook runs.
        """
        self._cancelling = True
        self._cancel_children()
        if self._scope is not None:
            self._scope.cancel()

    def spawn(
        self,
        address: Address | str,
        factory: Callable[[], Actor],
        *,
        restart: Restart = Restart.TEMPORARY,
        inbox_size: int | None = None,
    ) -> ActorRef:
        """Create an actor from ``factory`` at ``address`` and schedule its start.

        Synchronous: ``on_start`` runs at the caller's next await (after the
        caller's own turn, when an actor spawns). The factory runs now (its
        errors reach the caller) and again on each restart.

        Raises:
            AddressError: ``address`` does not parse, or a live actor has it.
            ActorStopped: The supervisor is stopping.
            RuntimeError: The supervisor was not entered (``async with``).
        """
        if self._phase is not _RUNNING:
            if self._phase is Phase.NEW:
                raise RuntimeError("spawn() needs a running supervisor: use `async with`")
            raise ActorStopped(f"the supervisor is stopping; cannot spawn {str(address)!r}")
        if isinstance(address, str):
            address = Address.parse(address)
        size = self._inbox_size if inbox_size is None else inbox_size
        ref = ActorRef(self, address, factory, restart, size)
        key = ref._key
        table = self._table
        if key in table:
            raise AddressError(f"a live actor already has the address {key!r}", text=key)
        ref._instantiate()
        table[key] = ref
        name = address._name  # the field, not the property: this runs for every step
        named = self._by_name.get(name)
        if named is None:
            named = self._by_name[name] = {}
        named[ref] = None
        self._start(ref)
        return ref

    def lookup(self, address: Address | str) -> ActorRef | None:
        """The live actor at ``address``, else the newest live one whose name is ``address``.

        A bare name such as ``implement`` finds the newest of
        ``dev-cycle.0.implement``, ``dev-cycle.1.implement`` and so on.
        """
        key = str(address)
        ref = self._table.get(key)
        if ref is None:
            named = self._by_name.get(key)
            if named:
                ref = next(reversed(named))
        return ref

    async def tell(self, address: Address | str, message: Any) -> None:
        """Deliver ``message`` to the actor at ``address``, waiting while its inbox is full.

        An unknown or stopped address makes a dead letter, not an error.
        """
        ref = self.lookup(address)
        if ref is None:
            self._dead_letter(address, message, "no such actor")
            return
        inbox = ref._inbox
        try:
            inbox.send_nowait(message)
        except InboxFull:
            await self._tell_waiting(ref, inbox, message)
        except ActorStopped:
            self._dead_letter(ref._address, message, "actor stopped")

    async def _tell_waiting(self, ref: ActorRef, inbox: Inbox[Any], message: Any) -> None:
        try:
            await inbox.send(message)
        except ActorStopped:
            self._dead_letter(ref._address, message, "actor stopped")

    def tell_nowait(self, address: Address | str, message: Any) -> None:
        """Deliver ``message`` now; an unknown or stopped address makes a dead letter.

        Raises:
            InboxFull: The actor's inbox is full.
        """
        ref = self.lookup(address)
        if ref is None:
            self._dead_letter(address, message, "no such actor")
            return
        try:
            ref._inbox.send_nowait(message)
        except ActorStopped:
            self._dead_letter(ref._address, message, "actor stopped")

    # The timeout runs on the supervisor's Clock, so FakeClock drives it in tests.
    async def ask(
        self,
        address: Address | str,
        message: Any,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Any:
        """Ask the actor at ``address`` (exact, or newest by bare name); see ``ActorRef.ask``.

        Raises:
            ActorStopped: No live actor there, or it stopped before answering.
            AskTimeout: No reply within ``timeout`` seconds of ``clock``.
        """
        ref = self.lookup(address)
        if ref is None:
            raise ActorStopped(
                f"no live actor at {str(address)!r} to answer {type(message).__name__}"
            )
        return await ref.ask(message, timeout=timeout)

    def __repr__(self) -> str:
        return f"<Supervisor {self._phase.value}, {len(self._table)} actors>"
