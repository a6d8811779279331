"""Build workflows in Python: the same model as YAML, a second front end.

Builders return the very Structs a YAML document loads into (`cadenza.workflow`),
checked by the same validator, so a workflow built here runs, validates, stores
and resumes exactly as its YAML twin. Predicates (``until``, ``when``, edge
``when``, forEach ``items``, ``output``) are CEL text or Python callables, plain
or ``async``, given a `PredicateContext`; handlers are plain Python functions::

    from cadenza import Runtime
    from cadenza import build as b

    def approved(ctx: b.PredicateContext) -> bool:
        return "APPROVED" in (ctx.steps["critique"].content or "")

    flow = b.workflow(
        "reflection",
        steps=[
            b.loop(
                "reflect",
                max_iterations=5,
                until=approved,
                steps=[
                    b.agent("write", "Write about actors.", prompt="You write.", model="scripted"),
                    b.agent("critique", "Review the draft.", depends_on=["write"],
                            prompt="You review; say APPROVED when it is good.",
                            model="scripted"),
                ],
            )
        ],
    )
    async with Runtime() as runtime:
        result = await runtime.run(flow)

A Python predicate lives in the process that built the workflow: the stored
document holds a ``@python:module:name`` marker for it. To resume such a run in a
new process, build the workflow there again first (the same code registers the
same markers); otherwise the run fails with `PredicateNotRegistered`.
"""

from ._build import END as END
from ._build import BuiltStep as BuiltStep
from ._build import PredicateContext as PredicateContext
from ._build import agent as agent
from ._build import check as check
from ._build import command as command
from ._build import control as control
from ._build import edge as edge
from ._build import for_each as for_each
from ._build import graph as graph
from ._build import handler as handler
from ._build import human as human
from ._build import include as include
from ._build import input_ as input_
from ._build import loop as loop
from ._build import tool as tool
from ._build import workflow as workflow
from ._build import workflow_loop as workflow_loop
from .errors import PredicateNotRegistered as PredicateNotRegistered
from .workflow import Agent as Agent
from .workflow import ControlLimits as ControlLimits
from .workflow import LoadedWorkflow as LoadedWorkflow
from .workflow import Options as Options
from .workflow import ScriptReply as ScriptReply

__all__ = [
    "END",
    "Agent",
    "BuiltStep",
    "ControlLimits",
    "LoadedWorkflow",
    "Options",
    "PredicateContext",
    "PredicateNotRegistered",
    "ScriptReply",
    "agent",
    "check",
    "command",
    "control",
    "edge",
    "for_each",
    "graph",
    "handler",
    "human",
    "include",
    "input_",
    "loop",
    "tool",
    "workflow",
    "workflow_loop",
]
