"""Control loops in Python: one file is the whole loop (SPEC 2.5).

    from cadenza.loops import ActorInput, Evaluation, EvaluatorInput, ControlLoop

    loop = ControlLoop("Write a tagline for Cadenza", criteria="at most 60 characters")
    loop.check("size(result.text) <= 60", "Too long: {{ size(result.text) }} chars")

    @loop.actor
    async def write(task: ActorInput) -> str:
        return await my_model(task.objective, task.feedback)

    @loop.evaluator
    def judge(task: EvaluatorInput) -> Evaluation:
        return Evaluation(passed="fast" in task.result["text"], score=0.8)

    result = await loop.run()
    for entry in result.decision_log:
        print(entry.iteration, entry.decision, entry.reason)

A `ControlLoop` runs on the same engine as a ``control:`` step in YAML: the same
controller and the same `decide` policy, which is public here too so that its
rules can be read, tested and simulated (`decide`, `admit`, `advance`).

`ControlLoop` was called `Loop` until 0.1.0, a name it shared with the ``loop:``
section (`cadenza.workflow.Loop`) that it is not; ``cadenza.loops.Loop`` still
gives it, with a ``DeprecationWarning``, for one release.
"""

import warnings as _warnings

from cadenza.actors.control import decide as _decide
from cadenza.actors.control.decide import *  # noqa: F403  (the policy: `decide` and its types)

from ._functions import ActorInput as ActorInput
from ._functions import Evaluation as Evaluation
from ._functions import EvaluatorInput as EvaluatorInput
from ._functions import PlannerInput as PlannerInput
from ._functions import PrePlannerInput as PrePlannerInput
from ._run import DecisionEntry as DecisionEntry
from ._run import LoopError as LoopError
from ._run import LoopResult as LoopResult
from ._run import LoopRun as LoopRun
from ._sdk import ControlLoop as ControlLoop

__all__ = [  # sorted below, with the policy's names
    "ActorInput",
    "ControlLoop",
    "DecisionEntry",
    "Evaluation",
    "EvaluatorInput",
    "LoopError",
    "LoopResult",
    "LoopRun",
    "PlannerInput",
    "PrePlannerInput",
]
__all__ += _decide.__all__
__all__.sort()


def __getattr__(name: str) -> type[ControlLoop]:
    if name == "Loop":
        _warnings.warn(
            "cadenza.loops.Loop is now cadenza.loops.ControlLoop; "
            "the old name will be removed in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return ControlLoop
    raise AttributeError(f"module 'cadenza.loops' has no attribute {name!r}")
