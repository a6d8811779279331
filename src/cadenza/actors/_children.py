"""Which actor runs a step: a leaf `StepActor`, or a controller for loops, graphs, includes.

Controllers spawn their children through `spawn_step`, so a loop body, a graph
state and a top-level step are started the same way and nest freely.
"""

from __future__ import annotations

from cadenza.runtime import Address
from cadenza.workflow import LoadedWorkflow, State, Step

from ._context import NO_BRIEF, Brief, Cancellable, RunContext, Scope
from ._coordinator import INBOX_SIZE
from ._human import HumanStep
from ._replay import ReplayedStep
from ._step import Report, StepActor

__all__ = ["spawn_step"]


def spawn_step(
    run: RunContext,
    document: LoadedWorkflow,
    step_id: str,
    step: Step | State,
    scope: Scope,
    address: Address,
    report: Report,
    brief: Brief = NO_BRIEF,
) -> Cancellable:
    """Spawns the actor that runs ``step`` at ``address``; it reports `StepFinished`.

    A step with ``loop`` gets a loop or forEach controller, ``graph`` a graph
    controller, ``include`` an include controller, ``control`` a control-loop
    controller; ``human`` a `HumanStep`; anything else a `StepActor`. In a resumed
    run, a leaf whose address already has a final record is replayed instead
    (a `ReplayedStep` reports that record), and one that was in flight runs again
    from the next attempt number. Returns the actor so the caller can cancel it.
    """
    if (
        step.loop is not None
        or step.graph is not None
        or step.include is not None
        or step.control is not None
    ):
        return _spawn_container(run, document, step_id, step, scope, address, report, brief)
    replay = run.journal.replay
    if replay is not None:  # a resumed run: a leaf that finished before is not run again
        record = replay.take(str(address))
        if record is not None:
            replayed = ReplayedStep(run.journal, step_id, record, report)
            run.supervisor.spawn(address, lambda: replayed)
            return replayed
    if step.human is not None:
        human = HumanStep(run, document, step_id, step, scope, report, brief)
        run.supervisor.spawn(address, lambda: human)
        return human
    child = StepActor(run, document, step_id, step, scope, report, brief)
    if replay is not None:
        child.first_attempt = replay.next_attempt(str(address))
    # An agent's inbox is where the coordinator delivers: it gets the larger bound.
    inbox = INBOX_SIZE if step.kind == "agent" else None
    run.supervisor.spawn(address, lambda: child, inbox_size=inbox)
    return child


def _spawn_container(
    run: RunContext,
    document: LoadedWorkflow,
    step_id: str,
    step: Step | State,
    scope: Scope,
    address: Address,
    report: Report,
    brief: Brief,
) -> Cancellable:
    # Imported here: the controllers spawn their own children through this module.
    from ._container import Container
    from ._control import ControlController
    from ._foreach import ForEachController
    from ._graph import GraphController
    from ._include import spawn_include
    from ._loop import LoopController

    controller: Container
    if step.loop is not None and step.loop.is_for_each:
        controller = ForEachController(run, document, step_id, step, scope, report, brief)
    elif step.loop is not None:
        controller = LoopController(run, document, step_id, step, scope, report, brief)
    elif step.graph is not None:
        controller = GraphController(run, document, step_id, step, scope, report, brief)
    elif step.control is not None:
        controller = ControlController(run, document, step_id, step, scope, report, brief)
    else:
        return spawn_include(run, document, step_id, step, scope, address, report, brief)
    run.supervisor.spawn(address, lambda: controller)
    return controller
