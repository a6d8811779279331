"""Which actor runs a step: a leaf `StepActor`, or a controller for loops and graphs.

Controllers spawn their children through `spawn_step`, so a loop body, a graph
state and a top-level step are started the same way and nest freely.
"""

from __future__ import annotations

from cadenza.runtime import Address
from cadenza.workflow import LoadedWorkflow, State, Step

from ._context import NO_BRIEF, Brief, Cancellable, RunContext, Scope
from ._coordinator import INBOX_SIZE
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

    Returns the actor so the caller can cancel it.
    """
    child = StepActor(run, document, step_id, step, scope, report, brief)
    # An agent's inbox is where the coordinator delivers: it gets the larger bound.
    inbox = INBOX_SIZE if step.kind == "agent" else None
    run.supervisor.spawn(address, lambda: child, inbox_size=inbox)
    return child
