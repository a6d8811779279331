"""Workflow actors: step actors and the controllers that schedule them.

Controllers are actors too: a `DagController` spawns a `StepActor` per ready
step under its namespaced address and advances when each reports back.
"""

from ._context import RunContext as RunContext
from ._context import Scope as Scope
from ._dag import DagController as DagController
from ._dag import DagOutcome as DagOutcome
from ._handler import HandlerError as HandlerError
from ._handler import StepContext as StepContext
from ._handler import StepOutput as StepOutput
from ._journal import EventSink as EventSink
from ._journal import RunJournal as RunJournal
from ._outcome import StepFinished as StepFinished
from ._run import RunControl as RunControl
from ._run import execute_run as execute_run
from ._step import StepActor as StepActor

__all__ = [
    "DagController",
    "DagOutcome",
    "EventSink",
    "HandlerError",
    "RunContext",
    "RunControl",
    "RunJournal",
    "Scope",
    "StepActor",
    "StepContext",
    "StepFinished",
    "StepOutput",
    "execute_run",
]
