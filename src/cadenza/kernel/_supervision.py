"""The bookkeeping half of the ``Supervisor``: child exits, restarts, failure.

Everything here runs synchronously in the event loop, called from the end of
an actor's busy period (``exit_actor``) or from the supervisor's own methods,
so the address table never changes under an await.
"""

from __future__ import annotations

import asyncio
import enum
import functools
from collections.abc import Callable
from typing import Any, Final

from anyio import CancelScope

from cadenza._logging import get_logger
from cadenza.errors import SupervisorEscalation

from ._actor import ActorState
from ._address import Address
from ._clock import Clock, SystemClock
from ._consumer import exit_actor
from ._inbox import Inbox
from ._ready_queue import ReadyQueue
from ._ref import ActorRef, RestartBatch
from ._restart import DeadLetter, Intensity, Restart, RestartStrategy

__all__ = ["Phase", "SupervisionCore"]

_log = get_logger("cadenza.kernel")


class Phase(enum.Enum):
    """Where a supervisor is: restarts happen only while RUNNING."""

    NEW = "new"
    RUNNING = "running"
    STOPPING = "stopping"
    CLOSED = "closed"


_RUNNING: Final = Phase.RUNNING
_TEMPORARY: Final = Restart.TEMPORARY


class SupervisionCore:
    """The address table, the task count, and the restart and failure rules."""

    def __init__(
        self,
        *,
        strategy: RestartStrategy,
        max_restarts: int,
        within: float,
        clock: Clock | None,
        on_dead_letter: Callable[[DeadLetter], None] | None,
        on_crash: Callable[[Address, BaseException], None] | None,
    ) -> None:
        self._strategy = strategy
        self._intensity = Intensity(max_restarts, within)
        self._max_restarts = max_restarts
        self._within = within
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._on_dead_letter = on_dead_letter
        self._on_crash = on_crash
        self._table: dict[str, ActorRef] = {}  # live actors by address, in spawn order
        self._by_name: dict[str, dict[ActorRef, None]] = {}  # newest last
        self._phase = Phase.NEW
        self._running = 0  # actor instances started and not yet ended
        self._ready_queue = ReadyQueue(self._settle)
        self._idle: asyncio.Future[None] | None = None  # set once no instance nor task is left
        self._scope: CancelScope | None = None  # cancels the body of ``async with``
        self._failure: BaseException | None = None  # raised by ``async with`` at exit
        self._cancelling = False  # cancel() or a failure: restart nothing from now on
        self._restarts = self._crashes = self._dead_letters = 0

    def _start(self, ref: ActorRef) -> None:
        ref._live = True
        self._running += 1
        self._ready_queue.schedule(ref)

    def _busy(self) -> bool:
        """Whether an actor instance or a task of the ready queue is still alive."""
        return self._running > 0 or self._ready_queue.tasks > 0

    def _settle(self) -> None:
        """Wake ``__aexit__`` once the last instance and the last task have ended."""
        if self._idle is not None and not self._busy() and not self._idle.done():
            self._idle.set_result(None)

    def _dead_letter(self, address: Address | str, message: Any, reason: str) -> None:
        self._dead_letters += 1
        letter = DeadLetter(str(address), type(message).__name__, reason)
        if self._on_dead_letter is None:
            _log.warning(
                "dead_letter",
                address=letter.address,
                message_type=letter.message_type,
                reason=reason,
            )
            return
        try:
            self._on_dead_letter(letter)
        except Exception as error:
            self._fail(error)

    def _child_exited(self, ref: ActorRef, error: BaseException | None, *, cancelled: bool) -> None:
        """Account for an ended actor instance and apply the restart policy."""
        ref._task = None
        ref._live = False
        self._running -= 1
        try:
            if error is not None:
                self._crashes += 1
                self._report_crash(ref, error)
            batch = ref._batch
            if batch is not None:
                batch.running -= 1
                if not batch.running:
                    self._restart_batch(batch)
            elif ref._restart is not _TEMPORARY and self._restartable(
                ref, error, cancelled=cancelled
            ):
                self._apply_strategy(ref, error)
            else:
                self._remove(ref)
        finally:
            if self._idle is not None:  # only ``__aexit__`` waits for the last exit
                self._settle()

    def _report_crash(self, ref: ActorRef, error: BaseException) -> None:
        if self._on_crash is None:
            _log.error("actor_crashed", address=ref._key, exc_info=error)
            return
        try:
            self._on_crash(ref._address, error)
        except Exception as callback_error:
            self._fail(callback_error)

    def _restartable(self, ref: ActorRef, error: BaseException | None, *, cancelled: bool) -> bool:
        if cancelled or not self._may_restart(ref):
            return False
        if ref._restart is Restart.PERMANENT:
            return True
        return ref._restart is Restart.TRANSIENT and error is not None

    def _may_restart(self, ref: ActorRef) -> bool:
        return not (ref._by_owner or self._cancelling or self._phase is not _RUNNING)

    def _apply_strategy(self, ref: ActorRef, error: BaseException | None) -> None:
        count = self._intensity.admit(self._clock.now())
        if count is not None:
            how = "crashed" if error is not None else "stopped"
            escalation = SupervisorEscalation(
                f"actor {ref._key!r} {how}; {count} restarts within {self._within}s "
                f"exceed max_restarts={self._max_restarts}, so the supervisor gave up"
            )
            escalation.__cause__ = error
            self._remove(ref)
            self._fail(escalation)
            return
        if self._strategy is RestartStrategy.ONE_FOR_ONE:
            self._restart(ref)
            return
        batch = RestartBatch(affected_by(self._strategy, ref, list(self._table.values())))
        for member in batch.members:
            member._batch = batch
            if member is not ref:
                member._request_stop(by_owner=False)
        if not batch.running:
            self._restart_batch(batch)

    def _restart_batch(self, batch: RestartBatch) -> None:
        for member in batch.members:
            member._batch = None
            # Siblings restart whatever their own exit was, unless TEMPORARY (as in OTP).
            if self._may_restart(member) and member._restart is not Restart.TEMPORARY:
                self._restart(member)
            else:
                self._remove(member)

    def _restart(self, ref: ActorRef) -> None:
        ref._inbox = Inbox(ref._inbox.maxsize, owner=ref._key)
        ref._actor = None
        ref._state = ActorState.STARTING
        ref._stop_requested = False
        ref._started = False
        ref._cancel_pending = False
        self._restarts += 1
        self._start(ref)

    def _remove(self, ref: ActorRef) -> None:
        # The instance will not run again: let the ref, which outlives it in whoever
        # holds it, drop it and its factory. The two point at each other (``actor.ref``),
        # and a cycle per ended actor is garbage only the collector frees: at a million
        # steps, a collector working harder as the heap grows.
        ref._actor = None
        ref._factory = _ended
        if self._table.get(ref._key) is ref:
            del self._table[ref._key]
            name = ref._address._name
            named = self._by_name[name]
            del named[ref]
            if not named:
                del self._by_name[name]

    def _fail(self, error: BaseException) -> None:
        """Give up: keep the first failure for ``__aexit__`` and cancel everything."""
        if self._failure is None:
            self._failure = error
        self._cancelling = True
        self._cancel_children()
        if self._scope is not None:
            self._scope.cancel()

    def _cancel_children(self) -> None:
        current = asyncio.current_task()
        for ref in list(self._table.values()):
            if not ref._live:  # waiting in a restart batch
                continue
            task = ref._task
            if task is None:
                # Idle, or waiting for its turn: none of its code is running, so it
                # ends here and now, as a task cancelled before its first step would.
                ref._inbox._waker = None  # (it is not to be scheduled by its own closing)
                exit_actor(ref, ref._inbox, None, None, cancelled=True)
                continue
            # Whatever becomes of the cancellation inside (user code may swallow it),
            # the actor ends as cancelled at the end of its current turn.
            ref._cancel_pending = True
            if task is current and self._ready_queue.is_draining(task):
                continue  # the ready queue cancels the turn if it suspends
            if task.cancel() and task is not current:
                # Should the task end without reaching the actor's own code, account
                # for the actor from outside once it is done.
                task.add_done_callback(functools.partial(self._reap, ref))

    def _reap(self, ref: ActorRef, task: asyncio.Task[None]) -> None:
        if ref._task is task and ref._live:
            exit_actor(ref, ref._inbox, None, None, cancelled=True)


def _ended() -> Any:
    """The factory of a ref whose actor ended for good: nothing instantiates it again."""
    raise RuntimeError("this actor has ended; it is not started again")


def affected_by(
    strategy: RestartStrategy, ended: ActorRef, children: list[ActorRef]
) -> list[ActorRef]:
    """The children a restart of ``ended`` takes along, in spawn order.

    Children already waiting in another batch stay with that one.
    """
    if strategy is RestartStrategy.REST_FOR_ONE:
        children = children[children.index(ended) :]
    return [child for child in children if child is ended or child._batch is None]
