"""The crash tests' workload: a 20-iteration loop of agent steps, a judge, a forEach.

Shared by ``tests/durability`` and ``benchmarks/soak_resume.py``. Every model
call goes to a `ScriptedLLMServer` whose replies depend only on the request, so
any number of runs get the same answers; `step_of` tells, from a logged
request, which address made the call, so a test can count repeated calls.
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cadenza import RunResult
from cadenza.testing import (
    CrashHarness,
    KillPoint,
    ProcessOutcome,
    RecordedRequest,
    RequestMatch,
    ScriptedLLMServer,
    ServerReply,
    ServerRule,
    ServerToolCall,
)
from tests._helpers import read_run

ITERATIONS = 20
ITEMS = ("alpha", "beta", "gamma", "delta")

WORKFLOW = f"""\
name: durable-drafts
agents:
  writer:
    model: "openai:gpt-test"
    prompt: "You write one part of a draft per visit."
    tools: [send_message]
    resultSchema:
      type: object
      properties: {{part: {{type: integer}}}}
      required: [part]
  judge:
    model: "openai:gpt-test"
    prompt: "You decide whether the draft is done."
    resultSchema:
      type: object
      properties: {{done: {{type: boolean}}, reason: {{type: string}}}}
      required: [done]
  reviewer:
    model: "openai:gpt-test"
    prompt: "You review."
steps:
  - id: drafts
    loop:
      maxIterations: {ITERATIONS}
      untilAgent: judge
      steps:
        - id: write
          agent: writer
          instructions: "Write part {{{{ iteration }}}}."
        - id: tally
          dependsOn: [write]
          handler: "durable_handlers:tally"
  - id: review
    dependsOn: [drafts]
    loop:
      forEach: {list(ITEMS)}
      maxConcurrency: 2
    agent: reviewer
    instructions: "Review the item."
  - id: summary
    dependsOn: [review]
    agent: reviewer
    instructions: "Summarise the reviews."
output: "steps.summary.content"
"""

HANDLERS = '''\
"""The workload's one non-model step: arithmetic over the writer's result."""


def tally(context):
    part = context.steps["write"].result["part"]
    return {"part": part, "square": part * part}
'''


def write_workload(directory: Path) -> Path:
    """Writes the workflow and its handler module into ``directory``; the workflow's path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "durable_handlers.py").write_text(textwrap.dedent(HANDLERS))
    path = directory / "drafts.yaml"
    path.write_text(WORKFLOW)
    return path


def rules() -> list[ServerRule]:
    """Replies that depend only on the request: every run gets the same ones."""
    found: list[ServerRule] = []
    for i in range(ITERATIONS):
        done = i == ITERATIONS - 1
        verdict = {"done": done, "reason": "complete" if done else f"part {i + 1} is missing"}
        found.append(
            ServerRule(
                [ServerReply(tool_calls=[ServerToolCall("submit_result", verdict)])],
                match=RequestMatch(user=f"iteration {i} of at most"),
                name=f"judge {i}",
            )
        )
        calls = [
            ServerToolCall("send_message", {"text": f"part {i} is written"}),
            ServerToolCall("submit_result", {"part": i}),
        ]
        found.append(
            ServerRule(
                [ServerReply(content=f"draft part {i}", tool_calls=calls)],
                match=RequestMatch(user=f"Write part {i}."),
                name=f"write {i}",
            )
        )
    for index, item in enumerate(ITEMS):
        found.append(
            ServerRule(
                [f"{item} reads well"],
                match=RequestMatch(user=f"## forEach Item (index: {index})"),
                name=f"review {index}",
            )
        )
    found.append(ServerRule(["all four parts reviewed"], match=RequestMatch(user="Summarise")))
    return found


_KEYS = (
    (re.compile(r"iteration (\d+) of at most"), "drafts.{}.untilAgent"),
    (re.compile(r"Write part (\d+)\."), "drafts.{}.write"),
    (re.compile(r"## forEach Item \(index: (\d+)\)"), "review[{}]"),
    (re.compile(r"(Summarise) the reviews"), "summary"),
)


def step_of(request: RecordedRequest) -> str:
    """The address whose model call ``request`` was."""
    text = "\n".join(
        str(m.get("content"))
        for m in request.messages
        if isinstance(m, dict) and m.get("role") == "user"
    )
    for pattern, address in _KEYS:
        match = pattern.search(text)
        if match is not None:
            return address.format(match.group(1))
    raise AssertionError(f"a request no step of the workload makes: {text[:200]!r}")


def calls_by_step(requests: Iterable[RecordedRequest]) -> Counter[str]:
    """How many model calls each address made.

    A request cut off by the kill (its body never arrived whole) reached no model:
    the server answered it from no rule, and it does not count.
    """
    return Counter(step_of(request) for request in requests if request.rule is not None)


@dataclass
class Tally:
    """What the kills cost, over every crashed run."""

    kills: int = 0
    repeated_completed: int = 0
    repeated_in_flight: Counter[str] = field(default_factory=Counter)
    restarts: list[float] = field(default_factory=list)
    """Seconds from each resume's launch to its first new step."""


def finished_steps(harness: CrashHarness, run_id: str) -> set[str]:
    """The addresses the store holds a final record for, read from the store."""
    return read_run(harness.store, run_id).finished


def crash_and_count(
    harness: CrashHarness, server: ScriptedLLMServer, chain: list[KillPoint], run_id: str
) -> tuple[RunResult, Tally]:
    """Runs killed at ``chain[0]``, resumes killed at the rest, resumes to the end, counting."""
    tally = Tally()
    seen = len(server.requests)
    process: ProcessOutcome = harness.run(run_id, kill=chain[0])
    for point in [*chain[1:], None]:
        if not process.killed:
            break
        tally.kills += 1
        done = finished_steps(harness, run_id)
        called_before = calls_by_step(server.requests[seen:])
        seen = len(server.requests)
        process = harness.resume(run_id, kill=point)
        restart = harness.restart_time(run_id, process)
        if restart is not None:
            tally.restarts.append(restart)
        # A call for a step that had finished is a repeat; one for a step that had
        # called before the kill but not finished is the in-flight step running again.
        for step, count in calls_by_step(server.requests[seen:]).items():
            if step in done:
                tally.repeated_completed += count
            elif step in called_before:
                tally.repeated_in_flight[f"kill {tally.kills}: {step}"] += count
        seen = len(server.requests)
    assert process.result is not None, process.stderr
    return process.result, tally
