"""Workflow actors: step actors and the controllers that schedule them.

Controllers are actors too: a `DagController` spawns a `StepActor` per ready
step under its namespaced address and advances when each reports back.

By role, lowest first: ``run`` (what a run's actors share: context, journal,
replay, messages), ``steps`` (leaf steps, here or on a worker), ``containers``
(DAG, loop, forEach, graph and include controllers), ``control`` (the control
loop and its decide policy). Above them, in this package: ``_children`` (which
actor runs a step; wired into `RunContext.spawn_step`), ``_coordinator`` (the
actor that carries messages between agents) and ``_run`` (`execute_run`).
"""

from ._run import RunControl as RunControl
from ._run import RunSetup as RunSetup
from ._run import execute_run as execute_run
from ._run import interrupted_result as interrupted_result
from .containers import DagController as DagController
from .containers import DagOutcome as DagOutcome
from .run import EventSink as EventSink
from .run import RunContext as RunContext
from .run import RunJournal as RunJournal
from .run import Scope as Scope
from .run import StepFinished as StepFinished
from .run import ToolPolicy as ToolPolicy
from .run import ToolRequest as ToolRequest
from .steps import HandlerError as HandlerError
from .steps import StepActor as StepActor
from .steps import StepContext as StepContext
from .steps import StepOutput as StepOutput

__all__ = [
    "DagController",
    "DagOutcome",
    "EventSink",
    "HandlerError",
    "RunContext",
    "RunControl",
    "RunJournal",
    "RunSetup",
    "Scope",
    "StepActor",
    "StepContext",
    "StepFinished",
    "StepOutput",
    "ToolPolicy",
    "ToolRequest",
    "execute_run",
    "interrupted_result",
]
