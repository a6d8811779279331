"""A control loop in one Python file: plain functions as planner, actor and evaluator.

The loop runs on the same engine as a ``control:`` step in YAML (the same
controller, the same decide policy), and prints each decision as it is made:
a draft too long for the check, a draft the evaluator rejects, a replan, and
an accepted tagline. Deterministic: no model is called.

    python examples/control_sdk.py
"""

from __future__ import annotations

import asyncio

from cadenza import Runtime
from cadenza.loops import (
    ActorInput,
    ControlLoop,
    Evaluation,
    EvaluatorInput,
    LoopResult,
    PlannerInput,
)

loop = ControlLoop(
    "Write a tagline for Cadenza",
    criteria="At most 60 characters, and it mentions loops",
    name="tagline",
    max_iterations=5,
    max_retries=1,
    max_replans=1,
)
loop.check("size(result.text) <= 60", "Too long: {{ size(result.text) }} chars, limit 60")

FIRST_PLAN = "Lead with the benefit"
SECOND_PLAN = "Say it in five words"
DRAFTS = [
    "Cadenza runs your agent workflows as actors: durable, bounded, observable",
    "Cadenza: durable, bounded agent workflows",
]


@loop.planner
def plan(task: PlannerInput) -> str:
    """The first plan, then, when the loop replans, a terser one."""
    return SECOND_PLAN if task.history else FIRST_PLAN


@loop.actor
def write(task: ActorInput) -> str:
    """A stand-in for a model: one draft per attempt of the first plan."""
    if task.plan == SECOND_PLAN:
        return "Cadenza: agent loops that stop."
    return DRAFTS[min(task.iteration, len(DRAFTS) - 1)]


@loop.evaluator
async def judge(task: EvaluatorInput) -> Evaluation:
    """Passes a tagline that mentions loops (the length is the check's business)."""
    text = str(task.result["text"])
    if "loop" not in text:
        return Evaluation(passed=False, score=0.5, feedback="Mention loops.")
    return Evaluation(passed=True, score=0.9, feedback="Clear and short.")


async def main() -> LoopResult:
    """Runs the loop, printing the decision log as it grows."""
    async with Runtime() as runtime:
        run = await loop.start(runtime)
        async for entry in run.decisions():
            print(f"iteration {entry.iteration}: {entry.decision} ({entry.reason})")
        return await run.result()


if __name__ == "__main__":
    outcome = asyncio.run(main())
    print(f"{outcome.status}: {outcome.result['text']!r} after {outcome.iterations} iterations")
