"""Writer -> critic reflection built in Python: a Python predicate decides when to stop.

The workflow of ``reflection.yaml``, built with `cadenza.build` instead of YAML:
the same steps, the same loop, and the same run, except that ``until`` is a
Python function given a `PredicateContext` rather than a CEL string. Runs
offline on the built-in scripted model.

    python examples/reflection_python.py
"""

from __future__ import annotations

import asyncio

from cadenza import LoadedWorkflow, RunResult, Runtime
from cadenza import build as b

DRAFTS = [
    "Actors are objects with inboxes.",
    "Actors are objects with inboxes; Erlang/OTP supervises them.",
    "Actors own their state and talk only by messages: an Erlang process handles one "
    "message at a time, so it needs no locks.",
]
CRITIQUES = [
    "Too vague: name a concrete runtime.",
    "Better. Now say why that matters for concurrency.",
    "APPROVED",
]


def approved(context: b.PredicateContext) -> bool:
    """The loop's ``until``: true once the critic approved this iteration's draft."""
    critique = context.steps["critique"].content or ""
    return critique.startswith("APPROVED")


def build() -> LoadedWorkflow:
    """The reflection workflow: a loop of write -> critique, until `approved`."""
    return b.workflow(
        "reflection-python",
        description="A writer drafts, a critic reviews, until the critic approves.",
        inputs={"topic": b.input_("string", default="actor runtimes")},
        steps=[
            b.loop(
                "reflection",
                max_iterations=5,
                until=approved,
                output_mode="cumulative",  # the output: every iteration's critique, in order
                steps=[
                    b.agent(
                        "write",
                        "Write about {{ inputs.topic }}.",
                        name="writer",
                        prompt="You are a writer. Write one short paragraph.",
                        script=DRAFTS,
                    ),
                    b.agent(
                        "critique",
                        "Review the draft.",
                        depends_on=["write"],
                        name="critic",
                        prompt="You are a critic. Reply APPROVED when the draft is good, "
                        "else say what to fix.",
                        script=CRITIQUES,
                    ),
                ],
            )
        ],
        output="steps.reflection.content",
    )


async def main() -> RunResult:
    """Runs the workflow on a runtime of its own."""
    async with Runtime() as runtime:
        return await runtime.run(build())


if __name__ == "__main__":
    result = asyncio.run(main())
    summary = result.loops["reflection"]
    print(f"{result.status} after {summary.iterations} iterations ({summary.termination_reason})")
    print(result.output)
