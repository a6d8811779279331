"""SIGKILL at every step boundary of ``script:`` agents' runs: the resumed run equals the golden.

The built-in ``scripted`` model answers an agent from its list of replies, in
order. A replayed step does not call the model again, so a resumed run must
know which replies its finished work already had: an agent in a loop that had
used replies 1-3 before the kill goes on with reply 4, not with reply 1. Each
workflow here — a writer/critic loop, a judged loop, a forEach of one agent
(items in parallel, one making two calls), a graph of agents, and agents
talking through a coordinator agent — is killed at every step boundary (just
before and just after each step outcome is durable), in chains of kills, and
between events at some fifteen points spread over the run (inside steps,
between model calls, inside the coordinator agent's wakes).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cadenza import RunResult
from cadenza.testing import CrashHarness, KillPoint, compare_results
from tests._helpers import EXAMPLES, read_run

# About 170 processes killed and resumed, a few seconds each when other suites load the machine.
pytestmark = pytest.mark.timeout(240)


WRITER_CRITIC = """\
name: writer-critic
agents:
  writer:
    prompt: "You write."
    script: ["draft 1", "draft 2", "draft 3", "draft 4", "draft 5"]
  critic:
    prompt: "You criticise."
    script: ["REVISE: shorter", "REVISE: warmer", "REVISE: a title", "APPROVED"]
steps:
  - id: rounds
    loop:
      maxIterations: 6
      until: "steps.critic.content.contains('APPROVED')"
      steps:
        - id: writer
          agent: writer
          instructions: "Write."
        - id: critic
          dependsOn: [writer]
          agent: critic
          instructions: "Criticise."
output: "steps.rounds.content"
"""

FOR_EACH = """\
name: reviews
agents:
  reviewer:
    prompt: "You review."
    script:
      - "alpha: fine"
      - {content: "beta: needs a look", toolCalls: [{name: look, arguments: {}}]}
      - "beta: fine after all"
      - "gamma: fine"
      - "delta: weak"
      - "epsilon: fine"
      - "all reviewed"
steps:
  - id: review
    loop:
      forEach: ["alpha", "beta", "gamma", "delta", "epsilon"]
      maxConcurrency: 2
    agent: reviewer
    instructions: "Review {{ item }}."
  - id: summary
    dependsOn: [review]
    agent: reviewer
    instructions: "Summarise the reviews."
output: "steps.summary.content"
"""


FLOWS = {
    "writer-critic": WRITER_CRITIC,
    "judged-loop": (EXAMPLES / "reflection.yaml").read_text(),
    "for-each": FOR_EACH,
    "graph": (EXAMPLES / "negotiation.yaml").read_text(),
    "coordinator": (EXAMPLES / "negotiation-messages.yaml").read_text(),
}
OUTCOMES = frozenset(("step_end", "error", "step_skipped"))
"""The events a recorded step outcome gives: one per pass of ``step.*_record``."""


@pytest.fixture(scope="module", params=sorted(FLOWS))
def harness(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[CrashHarness]:
    name: str = request.param
    directory = tmp_path_factory.mktemp(name)
    path = directory / f"{name}.yaml"
    path.write_text(FLOWS[name])
    with CrashHarness(path, directory=directory / "runs") as harness:
        yield harness


@pytest.fixture(scope="module")
def golden(harness: CrashHarness) -> RunResult:
    result = harness.golden()
    assert result.status == "completed"
    return result


def differing(harness: CrashHarness, golden: RunResult, chains: list[list[KillPoint]]) -> list[str]:
    """Each chain whose resumed run differs from ``golden``, with how; every kill must land."""
    found = []
    for chain in chains:
        outcome = harness.crash(chain[0], then=chain[1:])
        assert outcome.kills == len(chain), f"{chain} was not reached"
        differences = compare_results(golden, outcome.result)
        if differences:
            found.append(f"{' '.join(map(str, chain))}: {differences[0][:300]}")
    return found


def test_a_kill_at_every_step_boundary_resumes_to_the_golden_result(
    harness: CrashHarness, golden: RunResult
) -> None:
    """Killed just before and just after each step outcome is recorded: nothing differs."""
    outcomes = sum(event.type in OUTCOMES for event in read_run(harness.store, "golden").events)
    assert outcomes >= 7
    chains = [
        [KillPoint.at(point, count)]
        for count in range(1, outcomes + 1)
        for point in ("step.before_record", "step.after_record")
    ]
    bad = differing(harness, golden, chains)
    assert not bad, f"{len(bad)} of {len(chains)} resumed runs differ:\n" + "\n".join(bad)


def test_kills_during_each_resume_still_come_back(harness: CrashHarness, golden: RunResult) -> None:
    """A run killed, its resume killed at its next boundary, and so on, ends as the golden."""
    chains = [
        [KillPoint.at("step.after_record", n) for n in (1, 1, 1, 1)],
        [KillPoint.at("step.before_record", n) for n in (2, 1, 2, 1)],
    ]
    bad = differing(harness, golden, chains)
    assert not bad, f"{len(bad)} of {len(chains)} resumed runs differ:\n" + "\n".join(bad)


def test_a_kill_between_events_resumes_to_the_golden_result(
    harness: CrashHarness, golden: RunResult
) -> None:
    """Killed after the Nth event, at points spread over the run: nothing differs."""
    events = len(read_run(harness.store, "golden").events)
    chains = [[KillPoint.after_events(n)] for n in range(4, events, max(3, events // 15))]
    bad = differing(harness, golden, chains)
    assert not bad, f"{len(bad)} of {len(chains)} resumed runs differ:\n" + "\n".join(bad)
