"""Control loops in Python: one file is the whole loop (SPEC 2.5).

    from cadenza.loops import ActorInput, Evaluation, EvaluatorInput, Loop

    loop = Loop("Write a tagline for Cadenza", criteria="at most 60 characters")
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

A `Loop` runs on the same engine as a ``control:`` step in YAML: the same
controller and the same `decide` policy, which is public here too so that its
rules can be read, tested and simulated (`decide`, `admit`, `advance`).
"""

from ._loop_functions import ActorInput as ActorInput
from ._loop_functions import Evaluation as Evaluation
from ._loop_functions import EvaluatorInput as EvaluatorInput
from ._loop_functions import PlannerInput as PlannerInput
from ._loop_functions import PrePlannerInput as PrePlannerInput
from ._loop_run import DecisionEntry as DecisionEntry
from ._loop_run import LoopError as LoopError
from ._loop_run import LoopResult as LoopResult
from ._loop_run import LoopRun as LoopRun
from ._loop_sdk import Loop as Loop
from .actors._decide import CheckResult as CheckResult
from .actors._decide import ControlStatus as ControlStatus
from .actors._decide import Decision as Decision
from .actors._decide import History as History
from .actors._decide import InfraFailure as InfraFailure
from .actors._decide import Recommendation as Recommendation
from .actors._decide import Ruling as Ruling
from .actors._decide import Setup as Setup
from .actors._decide import Spent as Spent
from .actors._decide import Verdict as Verdict
from .actors._decide import admit as admit
from .actors._decide import advance as advance
from .actors._decide import decide as decide

__all__ = [
    "ActorInput",
    "CheckResult",
    "ControlStatus",
    "Decision",
    "DecisionEntry",
    "Evaluation",
    "EvaluatorInput",
    "History",
    "InfraFailure",
    "Loop",
    "LoopError",
    "LoopResult",
    "LoopRun",
    "PlannerInput",
    "PrePlannerInput",
    "Recommendation",
    "Ruling",
    "Setup",
    "Spent",
    "Verdict",
    "admit",
    "advance",
    "decide",
]
