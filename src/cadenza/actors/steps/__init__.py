"""Leaf steps: the actors that do a step's work, here or on a remote worker.

`StepActor` runs a ``command``, ``handler``, ``tool`` or agent step with retries
and a timeout; ``_agent`` is the tool-calling loop of an agent; ``_human`` waits
for a person; ``_remote`` and ``_work_order`` are the supervisor's and the
worker's halves of a step run elsewhere.
"""

from ._agent import AgentVisit as AgentVisit
from ._agent import run_agent as run_agent
from ._handler import HandlerError as HandlerError
from ._handler import StepContext as StepContext
from ._handler import StepOutput as StepOutput
from ._handler import StepsView as StepsView
from ._handler import resolve_handler as resolve_handler
from ._human import HumanStep as HumanStep
from ._human import ask_person as ask_person
from ._human import waiting_for as waiting_for
from ._remote import DispatchSink as DispatchSink
from ._remote import StepDispatcher as StepDispatcher
from ._step import StepActor as StepActor
from ._tools import Tool as Tool
from ._tools import ToolError as ToolError
from ._tools import schema_errors as schema_errors
from ._work_order import run_work_order as run_work_order

__all__ = [
    "AgentVisit",
    "DispatchSink",
    "HandlerError",
    "HumanStep",
    "StepActor",
    "StepContext",
    "StepDispatcher",
    "StepOutput",
    "StepsView",
    "Tool",
    "ToolError",
    "ask_person",
    "resolve_handler",
    "run_agent",
    "run_work_order",
    "schema_errors",
    "waiting_for",
]
