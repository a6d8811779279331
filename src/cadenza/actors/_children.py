"""Which actor runs a step: a leaf `StepActor`, or a controller for loops, graphs, includes.

Controllers spawn their children through `spawn_step` (as `RunContext.spawn_step`,
wired by the run), so a loop body, a graph state and a top-level step are started
the same way and nest freely, and no controller imports this module.
"""

from __future__ import annotations

from cadenza.kernel import Address

from .containers import Container, ForEachController, GraphController, LoopController, spawn_include
from .control import ControlController
from .run import INBOX_SIZE, Cancellable, Placement, ReplayedStep
from .steps import HumanStep, StepActor

__all__ = ["spawn_step"]


def spawn_step(placement: Placement, address: Address) -> Cancellable:
    """Spawns the actor that runs a placed step at ``address``; it reports `StepFinished`.

    A step with ``loop`` gets a loop or forEach controller, ``graph`` a graph
    controller, ``include`` an include controller, ``control`` a control-loop
    controller; ``human`` a `HumanStep`; anything else a `StepActor`. In a resumed
    run, a leaf whose address already has a final record is replayed instead
    (a `ReplayedStep` reports that record), and one that was in flight runs again
    from the next attempt number. Returns the actor so the caller can cancel it.

    Controllers reach this function through `RunContext.spawn_step`, so that
    none of them imports the others.
    """
    step, run = placement.step, placement.run
    if (
        step.loop is not None
        or step.graph is not None
        or step.include is not None
        or step.control is not None
    ):
        return _spawn_container(placement, address)
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
    if step.human is not None:
        human = HumanStep(placement)
        run.supervisor.spawn(address, lambda: human)
        return human
    child = StepActor(placement)
    if replay is not None:
        child.first_attempt = max(child.first_attempt, replay.next_attempt(str(address)))
    # An agent's inbox is where the coordinator delivers: it gets the larger bound.
    inbox = INBOX_SIZE if child.kind == "agent" else None
    run.supervisor.spawn(address, lambda: child, inbox_size=inbox)
    return child


def _spawn_container(placement: Placement, address: Address) -> Cancellable:
    step = placement.step
    controller: Container
    if step.loop is not None and step.loop.is_for_each:
        controller = ForEachController(placement)
    elif step.loop is not None:
        controller = LoopController(placement)
    elif step.graph is not None:
        controller = GraphController(placement)
    elif step.control is not None:
        controller = ControlController(placement)
    else:
        return spawn_include(placement, address)
    placement.run.supervisor.spawn(address, lambda: controller)
    return controller
