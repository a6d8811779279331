"""Container steps: controllers that run other steps as their children.

`DagController` runs a list of steps in dependency order; the loop, forEach,
graph and include controllers are `Container` subclasses, each an actor at its
step's address. They spawn their children through `RunContext.spawn_step`.
"""

from ._container import Container as Container
from ._container import Outcome as Outcome
from ._dag import DagController as DagController
from ._dag import DagOutcome as DagOutcome
from ._foreach import ForEachController as ForEachController
from ._graph import GraphController as GraphController
from ._include import BODY as BODY
from ._include import ChildWorkflow as ChildWorkflow
from ._include import output_hook as output_hook
from ._include import spawn_include as spawn_include
from ._loop import SAFETY_CAP as SAFETY_CAP
from ._loop import LoopController as LoopController
from ._loop import spawn_root_loop as spawn_root_loop

__all__ = [
    "BODY",
    "SAFETY_CAP",
    "ChildWorkflow",
    "Container",
    "DagController",
    "DagOutcome",
    "ForEachController",
    "GraphController",
    "LoopController",
    "Outcome",
    "output_hook",
    "spawn_include",
    "spawn_root_loop",
]
