"""Which actor runs a step: a leaf `StepActor`, or a controller for loops, graphs, includes.

Controllers spawn their children through `spawn_step` (as `RunContext.spawn_step`,
wired by the run), so a loop body, a graph state and a top-level step are started
the same way and nest freely, and no controller imports this module.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Final

from cadenza.kernel import Address

from .containers import Container, ForEachController, GraphController, LoopController, spawn_include
from .control import ControlController
from .run import INBOX_SIZE, Cancellable, Placement, ReplayedStep
from .steps import HumanStep, StepActor, leaf_work

__all__ = ["spawn_step"]

Spawn = Callable[[Placement, Address], Cancellable]


def _controller(
    make: Callable[[Placement], Container], placement: Placement, address: Address
) -> Cancellable:
    controller = make(placement)
    placement.run.supervisor.spawn(address, lambda: controller)
    return controller


_CONTAINERS: Final[dict[str, Spawn]] = {
    "graph": partial(_controller, GraphController),
    "control": partial(_controller, ControlController),
    "include": spawn_include,
}
"""The kinds that run steps of their own, by how their controller starts (a ``loop``
wraps a step of any kind: it is the step's, not a kind)."""

_ACTORS: Final[dict[str, Callable[[Placement], HumanStep]]] = {"human": HumanStep}
"""Leaf kinds with an actor of their own; any other leaf is a `StepActor`, which does
what its kind's `LeafWork` says."""


def spawn_step(placement: Placement, address: Address) -> Cancellable:
    """Spawns the actor that runs a placed step at ``address``; it reports `StepFinished`.

    A step with ``loop`` gets a loop or forEach controller, ``graph`` a graph
    controller, ``include`` an include controller, ``control`` a control-loop
    controller; ``human`` a `HumanStep`; anything else a `StepActor`. In a resumed
    run, a leaf whose address already has a final record is replayed instead
    (a `ReplayedStep` reports that record), and one that was in flight runs again
    from the next attempt number. An offline replay (`RunContext.recording`) answers
    a leaf whose calls are not journaled from the recorded run's outcome the same
    way. Returns the actor so the caller can cancel it.

    Controllers reach this function through `RunContext.spawn_step`, so that
    none of them imports the others.
    """
    step, run = placement.step, placement.run
    if step.max_cost is not None:  # the calls under this address pass its cost budget
        run.budgets.watch_step(str(address), step.max_cost, f"maxCost of step {address}")
    loop = step.loop
    if loop is not None:
        make = ForEachController if loop.is_for_each else LoopController
        return _controller(make, placement, address)
    kind = step.kind
    container = _CONTAINERS.get(kind)
    if container is not None:
        return container(placement, address)
    replay = run.journal.replay
    if replay is not None:  # a resumed run: a leaf that finished before is not run again
        record = replay.take(str(address))
        if record is not None:
            answers = run.unanswered.waiter(str(address))
            replayed = ReplayedStep(
                run.journal, placement.step_id, record, placement.report, answers
            )
            run.supervisor.spawn(address, lambda: replayed)
            return replayed
    own = _ACTORS.get(kind)
    if own is not None:
        actor = own(placement)
        run.supervisor.spawn(address, lambda: actor)
        return actor
    work = leaf_work(kind)
    if run.recording is not None and (work is None or not work.journaled):
        return _answered(placement, address, kind)
    child = StepActor(placement, kind, work)
    if replay is not None:
        child.first_attempt = max(child.first_attempt, replay.next_attempt(str(address)))
    # The coordinator delivers to the inbox of a kind that takes messages (an agent's).
    inbox = INBOX_SIZE if work is not None and work.mailbox else None
    run.supervisor.spawn(address, lambda: child, inbox_size=inbox)
    return child


def _answered(placement: Placement, address: Address, kind: str) -> Cancellable:
    """An offline replay's leaf that is not an agent: a side effect, not run again, but
    answered from the recorded run's outcome at ``address``."""
    run = placement.run
    assert run.recording is not None
    record = run.recording.answer(str(address), kind)
    answered = ReplayedStep(run.journal, placement.step_id, record, placement.report)
    run.supervisor.spawn(address, lambda: answered)
    return answered
