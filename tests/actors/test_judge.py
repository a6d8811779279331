"""untilAgent: the judge decides after until, sees the iteration, and fails open."""

from __future__ import annotations

from cadenza.testing import RequestMatch, ServerRule, ServerToolCall
from cadenza.testing.pytest_plugin import StartLLMServer
from tests._helpers import run_flow, run_with_events
from tests.conftest import RunYaml, WriteFlow

JUDGED = """
name: judged
agents:
  judge:
    resultSchema:
      type: object
      required: [done]
      properties:
        done: {type: boolean}
        reason: {type: string}
    script:
      - "I forgot the tool."
      - toolCalls: [{name: submit_result, arguments: {done: false, reason: "add detail"}}]
      - toolCalls: [{name: submit_result, arguments: {done: true, reason: "good now"}}]
steps:
  - id: draft
    handler: "HANDLERS:draft"
    loop:
      maxIterations: 6
      untilAgent: judge
      outputMode: cumulative
"""

DRAFT = """
def draft(ctx):
    return f"draft {ctx.iteration} (feedback: {ctx.brief.feedback})"
"""


async def test_the_judge_stops_the_loop_and_a_missing_verdict_fails_open(
    write_flow: WriteFlow,
) -> None:
    """No verdict: the loop goes on (recorded); done: false goes on; done: true stops it."""
    result, events = await run_with_events(write_flow(JUDGED, handlers=DRAFT))
    assert result.status == "completed", result.error
    loop = result.loops["draft"]
    assert (loop.iterations, loop.termination_reason) == (3, "judge")
    first = result.steps["draft.0.untilAgent"]
    assert first.status == "failed"
    assert first.error is not None
    assert first.error.type == "NoResult"
    assert result.steps["draft.1.untilAgent"].result == {"done": False, "reason": "add detail"}
    assert result.steps["draft.2.untilAgent"].status == "completed"
    verdicts = [e for e in events if e.type == "judge_verdict"]
    assert [e.step_id for e in verdicts] == [f"draft.{n}.untilAgent" for n in range(3)]
    assert [(e.data or {}).get("done") for e in verdicts] == [None, False, True]
    assert verdicts[0].error is not None


async def test_judge_feedback_reaches_the_next_iteration_and_the_cumulative_output(
    write_flow: WriteFlow,
) -> None:
    """The judge's words are revision feedback for the next iteration and part of the output."""
    result = await run_flow(write_flow(JUDGED, handlers=DRAFT))
    second = result.steps["draft.2"].content or ""
    assert second.startswith("draft 2 (feedback: draft 1")
    assert "Judge feedback: add detail" in second
    content = result.steps["draft"].content or ""
    blocks = content.split("\n\n---\n\n")
    assert len(blocks) == 3
    assert "Judge feedback: I forgot the tool." in blocks[0]
    assert "Judge feedback: add detail" in blocks[1]
    assert blocks[2].startswith("draft 2")


async def test_until_is_checked_before_the_judge(write_flow: WriteFlow) -> None:
    """When until holds, the judge is not asked at all."""
    text = JUDGED.replace("untilAgent: judge", "untilAgent: judge\n      until: iteration == 0")
    result = await run_flow(write_flow(text, handlers=DRAFT))
    assert result.loops["draft"].termination_reason == "until"
    assert "draft.0.untilAgent" not in result.steps


async def test_the_judge_reads_each_body_steps_output(
    run_yaml: RunYaml,
    model_server: StartLLMServer,
) -> None:
    """The judge's prompt holds every body step's output of the iteration, labelled."""
    server = model_server(
        [
            ServerRule(
                [
                    {"tool_calls": [ServerToolCall("submit_result", {"done": True})]},
                ],
                match=RequestMatch(system="You judge"),
                name="judge",
            )
        ]
    )
    result = await run_yaml(
        """
        name: reviewed
        agents:
          judge:
            model: "openai:judge-model"
            prompt: "You judge drafts."
            resultSchema:
              type: object
              required: [done]
              properties: {done: {type: boolean}}
        steps:
          - id: review
            loop:
              maxIterations: 3
              untilAgent: judge
              steps:
                - id: write
                  handler: "HANDLERS:write"
                - id: lint
                  dependsOn: [write]
                  handler: "HANDLERS:lint"
        """,
        handlers="""
        def write(ctx):
            return "WRITTEN-TEXT"
        def lint(ctx):
            return {"warnings": 0}
        """,
    )
    assert result.loops["review"].termination_reason == "judge", result.error
    [request] = server.requests
    prompt = "\n".join(str(m.get("content")) for m in request.messages)
    assert "### write (completed)\nWRITTEN-TEXT" in prompt
    assert '### lint (completed)\n{"warnings":0}' in prompt
    assert "review.0" in prompt
