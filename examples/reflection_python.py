"""Writer -> critic reflection built in Python: a Python function picks the output.

The workflow of ``reflection.yaml``, built with `cadenza.build` instead of YAML:
the same agents, the same loop (the critic judges each draft), and the same run,
except that the workflow's ``output`` is a Python function given a
`PredicateContext` rather than a CEL string. Runs offline on the built-in
scripted model.

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
VERDICTS = [
    {"done": False, "reason": "Too vague: name a concrete runtime."},
    {"done": False, "reason": "Better. Now say why that matters for concurrency."},
    {"done": True, "reason": "Approved."},
]
CRITIC = b.Agent(
    prompt="You are a critic. Approve the draft (done: true) when it is good, "
    "else say what to fix.",
    result_schema={
        "type": "object",
        "required": ["done"],
        "properties": {"done": {"type": "boolean"}, "reason": {"type": "string"}},
    },
    script=[
        b.ScriptReply(tool_calls=[b.ScriptToolCall("submit_result", verdict)])
        for verdict in VERDICTS
    ],
)


def accepted_draft(context: b.PredicateContext) -> str:
    """The workflow's output: the loop's last draft, the one the critic approved."""
    return context.steps["reflection"].content or ""


def build() -> LoadedWorkflow:
    """The reflection workflow: the writer repeated until the critic approves."""
    return b.workflow(
        "reflection-python",
        description="A writer drafts, a critic judges each draft, until the critic approves one.",
        inputs={"topic": b.input_("string", default="actor runtimes")},
        agents={"critic": CRITIC},
        steps=[
            b.loop(
                "reflection",
                max_iterations=5,
                until_agent="critic",  # its reason is the next draft's revision feedback
                step=b.agent(
                    "write",
                    "Write about {{ inputs.topic }}.",
                    name="writer",
                    prompt="You are a writer. Write one short paragraph; revise it as the "
                    "critic asks.",
                    script=DRAFTS,
                ),
            )
        ],
        output=accepted_draft,
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
