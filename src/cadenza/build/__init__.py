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
same markers); otherwise `Runtime.resume` refuses it with `RunNeedsCode`, and
leaves it as it was (``cadenza resume`` and ``cadenza supervise`` do the same).
"""

from ._builders import END as END
from ._builders import BuiltStep as BuiltStep
from ._builders import PredicateContext as PredicateContext
from ._builders import agent as agent
from ._builders import check as check
from ._builders import command as command
from ._builders import control as control
from ._builders import edge as edge
from ._builders import for_each as for_each
from ._builders import graph as graph
from ._builders import handler as handler
from ._builders import human as human
from ._builders import include as include
from ._builders import input_ as input_
from ._builders import loop as loop
from ._builders import tool as tool
from ._builders import workflow as workflow
from ._builders import workflow_loop as workflow_loop
from cadenza.errors import PredicateNotRegistered as PredicateNotRegistered
from cadenza.errors import RunNeedsCode as RunNeedsCode
from cadenza.workflow import Agent as Agent
from cadenza.workflow import ControlLimits as ControlLimits
from cadenza.workflow import LoadedWorkflow as LoadedWorkflow
from cadenza.workflow import McpServer as McpServer
from cadenza.workflow import Permissions as Permissions
from cadenza.workflow import Options as Options
from cadenza.workflow import ScriptReply as ScriptReply
from cadenza.workflow import ScriptToolCall as ScriptToolCall
from cadenza.workflow import Supervision as Supervision

__all__ = [
    "END",
    "Agent",
    "BuiltStep",
    "ControlLimits",
    "LoadedWorkflow",
    "McpServer",
    "Permissions",
    "Options",
    "PredicateContext",
    "PredicateNotRegistered",
    "RunNeedsCode",
    "ScriptReply",
    "ScriptToolCall",
    "Supervision",
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
