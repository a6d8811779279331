"""Leaf steps: the actors that do a step's work, here or on a remote worker.

`StepActor` runs a leaf step with retries and a timeout; what it runs is its
kind's `LeafWork`, one module each in ``kinds/`` (command, handler, tool, agent),
found by `leaf_work`. ``_agent`` is the tool-calling loop of an agent; ``_human``
waits for a person; ``_remote`` and ``_work_order`` are the supervisor's and the
worker's halves of a step run elsewhere. A kind of leaf step from outside
Cadenza is a `LeafKind`: both halves of a kind, what a document says and what a
run does, in one class.
"""

from cadenza.actors.run import DispatchSink as DispatchSink
from cadenza.actors.run import StepDispatcher as StepDispatcher

from ._agent import AgentVisit as AgentVisit
from ._agent import run_agent as run_agent
from ._calls import cut_off as cut_off
from ._handler import HandlerError as HandlerError
from ._handler import StepContext as StepContext
from ._handler import StepOutput as StepOutput
from ._handler import StepsView as StepsView
from ._handler import resolve_handler as resolve_handler
from ._human import HumanStep as HumanStep
from ._human import ask_person as ask_person
from ._human import waiting_for as waiting_for
from ._leaf import LeafKind as LeafKind
from ._leaf import LeafStep as LeafStep
from ._leaf import LeafWork as LeafWork
from ._leaf import WorkerSite as WorkerSite
from ._leaf import WorkSite as WorkSite
from ._step import StepActor as StepActor
from ._tools import Tool as Tool
from ._tools import ToolError as ToolError
from ._tools import schema_errors as schema_errors
from ._work_order import Confirmations as Confirmations
from ._work_order import run_work_order as run_work_order
from .kinds import leaf_work as leaf_work

__all__ = [
    "AgentVisit",
    "Confirmations",
    "DispatchSink",
    "HandlerError",
    "HumanStep",
    "LeafKind",
    "LeafStep",
    "LeafWork",
    "StepActor",
    "StepContext",
    "StepDispatcher",
    "StepOutput",
    "StepsView",
    "Tool",
    "ToolError",
    "WorkSite",
    "WorkerSite",
    "ask_person",
    "cut_off",
    "leaf_work",
    "resolve_handler",
    "run_agent",
    "run_work_order",
    "schema_errors",
    "waiting_for",
]
