"""A workflow of zenflow's full-featured shape, every agent on ``bedrock/...``, run by the CLI.

Several agents on ``bedrock/anthropic.claude-sonnet-4-6`` with tools, a prompt
file, an included sub-workflow, conditions, retries and a structured result,
against a local server that speaks Converse and verifies every SigV4
signature; the AWS variables are dummies and the endpoint is overridden as the
AWS SDKs allow (``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cadenza.testing import (
    RequestMatch,
    ScriptedLLMServer,
    ServerReply,
    ServerRule,
    ServerToolCall,
)
from tests._helpers import cadenza

SECRET = "dummy-aws-secret-access-key-4ZpQ"
TOKEN = "dummy-aws-session-token-Hq83vX"
MODEL = "bedrock/anthropic.claude-sonnet-4-6"

FLOW = f"""
name: bedrock-release
agents:
  planner:
    prompt: "@prompts/planner.md"
    model: "{MODEL}"
    tools: [read, glob]
    maxTurns: 5
  writer:
    prompt: "You write files."
    model: "{MODEL}"
    tools: [read, write]
    maxTurns: 5
  reviewer:
    model: "{MODEL}"
    tools: [read]
    resultSchema:
      type: object
      properties: {{approved: {{type: boolean}}}}
      required: [approved]
includes:
  ship: "workflows/ship.yaml"
steps:
  - id: plan
    agent: planner
    instructions: "Plan the release notes from notes.md."
  - id: write
    agent: writer
    instructions: "Write the release notes."
    dependsOn: [plan]
    retries: 2
  - id: review
    agent: reviewer
    instructions: "Review the release notes and give your verdict."
    dependsOn: [write]
    condition: "steps.write.status == 'completed'"
  - id: rework
    agent: writer
    instructions: "Rework the release notes."
    dependsOn: [review]
    condition: "steps.review.content.contains('CHANGES_REQUESTED')"
  - id: publish
    include: ship
    dependsOn: [review]
    retries: 1
options:
  maxConcurrency: 4
  onStepFailure: skip-dependents
"""

SHIP = f"""
name: ship
agents:
  shipper: {{model: "{MODEL}"}}
steps:
  - id: tag
    agent: shipper
    instructions: "Tag the release."
"""


def _rules() -> list[ServerRule]:
    def on(text: str, role: str, *replies: ServerReply | str, name: str) -> ServerRule:
        return ServerRule(list(replies), match=RequestMatch(user=text, last_role=role), name=name)

    return [
        on(
            "Plan the release",
            "user",
            ServerReply(tool_calls=[ServerToolCall("read", {"path": "notes.md"})]),
            name="plan-read",
        ),
        on("Plan the release", "tool", "Plan: one line per change.", name="plan-done"),
        on(
            "Write the release notes",
            "user",
            ServerReply(status=503),  # retried: the second attempt is signed afresh
            ServerReply(
                tool_calls=[ServerToolCall("write", {"path": "RELEASE.md", "content": "# 1.0\n"})]
            ),
            name="write-file",
        ),
        on("Write the release notes", "tool", "Wrote RELEASE.md.", name="write-done"),
        on(
            "Review the release notes",
            "user",
            ServerReply(tool_calls=[ServerToolCall("submit_result", {"approved": True})]),
            name="review",
        ),
        on("Tag the release", "user", "tagged v1.0", name="tag"),
    ]


def test_a_full_featured_workflow_runs_on_bedrock(tmp_path: Path) -> None:
    (tmp_path / "flow.yaml").write_text(FLOW)
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "planner.md").write_text("You plan releases.")
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "ship.yaml").write_text(SHIP)
    (tmp_path / "notes.md").write_text("- Bedrock's Converse wire\n")
    with ScriptedLLMServer(_rules(), wire="bedrock", api_key=SECRET) as server:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        environ |= server.environ() | {"AWS_SESSION_TOKEN": TOKEN}
        proc = cadenza(
            "run", "flow.yaml", "--json", "--store", "runs.db",
            "--allow", "read", "--allow", "write",
            cwd=tmp_path, env=environ,
        )  # fmt: skip
        requests = server.requests
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    steps = result["steps"]
    assert result["status"] == "completed"
    assert {name: steps[name]["status"] for name in steps} == {
        "plan": "completed",
        "write": "completed",
        "review": "completed",
        "rework": "skipped",
        "publish": "completed",
        "publish.tag": "completed",
    }
    assert steps["plan"]["content"] == "Plan: one line per change."
    assert steps["review"]["result"] == {"approved": True}
    assert result["output"] == "tagged v1.0"
    assert (tmp_path / "RELEASE.md").read_text() == "# 1.0\n"
    # Every call went to Converse, signed; the 503 too, and its retry was accepted.
    assert [r.rule for r in requests] == [
        "plan-read",
        "plan-done",
        "write-file",
        "write-file",
        "write-done",
        "review",
        "tag",
    ]
    assert {r.model for r in requests} == {"anthropic.claude-sonnet-4-6"}
    assert all(r.headers["authorization"].startswith("AWS4-HMAC-SHA256 ") for r in requests)
    # The tool's output went back to the model as a toolResult.
    answered = requests[1].body["messages"][-1]["content"][0]["toolResult"]
    assert "Bedrock's Converse wire" in answered["content"][0]["text"]
    assert result["usage"]["llmCalls"] == 6  # the 503 is no call
    # Neither the secret key nor the session token was kept or printed.
    kept = b"".join(p.read_bytes() for p in tmp_path.glob("runs.db*"))
    for secret in (SECRET, TOKEN):
        assert secret.encode() not in kept
        assert secret not in proc.stdout + proc.stderr
