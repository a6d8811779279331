"""The decide policy of a control loop (SPEC 2.5): deterministic, no LLM, no I/O.

After each iteration the controller hands `decide` what the iteration produced
(the evaluator's `Verdict`, or an `InfraFailure`), the `CheckResult` of every
check, the loop's `History`, its limits, what it has `Spent`, and its `Setup`.
It answers with a `Ruling`: the decision, why, the terminal status when the
loop ends, and the feedback the next attempt hears. Rules, first match wins:

==  ==========================================================  ==========  ========================
#   when                                                        decision    status
==  ==========================================================  ==========  ========================
1   infrastructure failure beyond ``maxInfraRetries``           stop        stopped_infra_failure
2   every check passed and the evaluator passed it              accept      succeeded
3   tokens spent >= ``maxTokens``                               stop        stopped_budget
4   time spent >= ``timeout``                                   stop        stopped_budget
5   this was iteration ``maxIterations``                        stop        stopped_max_iterations
6   infrastructure failure (within ``maxInfraRetries``)         retry
7   the evaluator recommends ``escalate``                       escalate    escalated
8   it recommends ``delegate``, a delegate exists, not yet used  delegate
9   no progress for ``noProgressAfter`` iterations, can replan  replan
10  no progress for ``noProgressAfter`` iterations              stop        stopped_no_progress
11  it recommends ``replan`` and the loop can replan            replan
12  fewer than ``maxRetries`` retries since the last plan       retry
13  the loop can replan (retries are spent)                     replan
14  otherwise (retries and replans are spent)                   escalate    escalated
==  ==========================================================  ==========  ========================

An escalation ends the loop ``escalated`` under ``escalate: stop``. Under
``escalate: human`` it has no status: the loop goes on to a person, whose
answer (`PERSON_SCHEMA`) `heed` turns into the ruling that settles the
iteration: ``accept`` (``succeeded``), ``retry`` with their feedback, which
starts afresh like a plan change, or ``stop`` (``escalated``).

Evidence wins over the judge: a failing check fails the iteration whatever the
evaluator said, and caps the iteration's score at the share of checks that
passed; its feedback goes first, verbatim, into what the next attempt hears.
"The loop can replan" means it has a planner and fewer than ``maxReplans``
replans. A replan or a delegation starts a new plan: its retries and its
progress window start afresh. Infrastructure failures are counted apart and
never count as retries or as scores.

`admit` is the budget gate before each call: it stops the loop when the tokens
already spent plus the reserve for the next call (the most a call of that role
has cost so far) would pass ``maxTokens``, or when ``timeout`` has passed. A
call is made only while ``spent <= maxTokens``, so the budget is never overshot
by more than that one call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cadenza.workflow import ControlLimits, parse_duration

# The policy as `cadenza.loops` offers it; the controller also imports the helpers
# (`PERSON_SCHEMA`, `RECOMMENDATIONS`, `effective_score`, `heed`, `stalled`) by name.
__all__ = [
    "CheckResult",
    "ControlStatus",
    "Decision",
    "History",
    "InfraFailure",
    "Recommendation",
    "Ruling",
    "Setup",
    "Spent",
    "Verdict",
    "admit",
    "advance",
    "decide",
]

Decision = Literal["accept", "retry", "replan", "delegate", "escalate", "stop"]
ControlStatus = Literal[
    "succeeded",
    "stopped_no_progress",
    "stopped_budget",
    "stopped_max_iterations",
    "stopped_infra_failure",
    "escalated",
]
Recommendation = Literal["retry", "replan", "delegate", "escalate"]
RECOMMENDATIONS: frozenset[str] = frozenset(("retry", "replan", "delegate", "escalate"))
"""What an evaluator may put in ``recommend``."""

PERSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"enum": ["accept", "retry", "stop"]},
        "feedback": {"type": "string"},
    },
    "required": ["decision"],
    "additionalProperties": False,
}
"""What a person may answer an ``escalate: human`` with (``cadenza signal --data``)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The evaluator's output: ``{passed, score, feedback, recommend?}``."""

    passed: bool
    score: float
    feedback: str = ""
    recommend: Recommendation | None = None


@dataclass(frozen=True, slots=True)
class InfraFailure:
    """A planner, actor, delegate or evaluator failed or returned the wrong shape."""

    role: str
    message: str


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check over the actor's result; ``feedback`` is rendered when it failed."""

    expr: str
    passed: bool
    feedback: str = ""


@dataclass(frozen=True, slots=True)
class Spent:
    """What the loop has used so far: tokens of its children and wall-clock seconds."""

    tokens: int = 0
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Setup:
    """What the loop has to work with: a planner, a delegate, and how it escalates."""

    has_planner: bool = False
    has_delegate: bool = False
    escalate: Literal["stop", "human"] = "stop"


@dataclass(frozen=True, slots=True)
class History:
    """What happened before this iteration (`advance` folds each ruling in).

    Attributes:
        iterations: Iterations finished so far.
        scores: Scores since the last plan change (replan or delegation).
        retries: Quality retries since the last plan change.
        replans: Replans so far.
        infra_failures: Infrastructure failures so far.
        delegated: True once the delegate acts instead of the actor.
    """

    iterations: int = 0
    scores: tuple[float, ...] = ()
    retries: int = 0
    replans: int = 0
    infra_failures: int = 0
    delegated: bool = False


@dataclass(frozen=True, slots=True)
class Ruling:
    """A decision and its reason; ``status`` is set when the loop ends.

    Attributes:
        decision: accept, retry, replan, delegate, escalate or stop.
        reason: Why, in words, with the numbers that decided it.
        status: The loop's terminal status, or None when it goes on.
        feedback: What the next attempt hears (failing checks' feedback first).
        score: The iteration's score, capped by failing checks; None without a verdict.
        infra: True when the iteration ended in an infrastructure failure.
        person: True when a person made it, answering an escalation (`heed`).
    """

    decision: Decision
    reason: str
    status: ControlStatus | None = None
    feedback: str = ""
    score: float | None = None
    infra: bool = False
    person: bool = False


def effective_score(verdict: Verdict, checks: Sequence[CheckResult]) -> float:
    """The evaluator's score, capped at the share of checks passed when one failed."""
    passed = sum(check.passed for check in checks)
    if passed == len(checks):
        return verdict.score
    return min(verdict.score, passed / len(checks))


def stalled(scores: Sequence[float], after: int) -> bool:
    """True when the best score is ``after`` or more iterations old (ties do not count)."""
    if len(scores) <= after:  # too few to have gone `after` iterations without a better one
        return False
    best = scores.index(max(scores))
    return len(scores) - 1 - best >= after


def admit(role: str, reserve: int, limits: ControlLimits, spent: Spent) -> Ruling | None:
    """The budget gate before a call of ``role``: None to go ahead, else a stop ruling."""
    budget = limits.max_tokens
    if budget is not None and (spent.tokens >= budget or spent.tokens + reserve > budget):
        reason = f"token budget: {spent.tokens} of maxTokens {budget} spent"
        if spent.tokens < budget:
            reason += f", and the {role} is reserved {reserve} (the most one call of it took)"
        return Ruling("stop", reason, "stopped_budget")
    return _timed_out(limits, spent)


def decide(
    verdict: Verdict | InfraFailure,
    checks: Sequence[CheckResult],
    history: History,
    limits: ControlLimits,
    spent: Spent,
    setup: Setup = Setup(),
) -> Ruling:
    """The decision after one iteration (the rules are in the module docstring)."""
    last = history.iterations + 1 >= limits.max_iterations
    if isinstance(verdict, InfraFailure):
        count = history.infra_failures + 1
        what = f"the {verdict.role} failed: {verdict.message}"
        if count > limits.max_infra_retries:
            allowed = limits.max_infra_retries
            reason = f"{what} ({count} infrastructure failures, maxInfraRetries is {allowed})"
            return Ruling("stop", reason, "stopped_infra_failure", infra=True)
        retry = Ruling("retry", f"infrastructure failure {count} of {limits.max_infra_retries}")
        ruling = _limits(limits, spent, last) or retry
        return dataclasses.replace(ruling, reason=f"{what}; {ruling.reason}", infra=True)
    score = effective_score(verdict, checks)
    failed = [check for check in checks if not check.passed]
    parts = [check.feedback for check in failed]
    if verdict.feedback:
        parts.append(verdict.feedback)
    feedback = "\n".join(parts)
    if not failed and verdict.passed:
        reason = f"the evaluator passed it (score {score:g})"
        if checks:
            reason = f"every check passed and {reason}"
        return Ruling("accept", reason, "succeeded", feedback, score)
    if failed:
        what = f"check{'s' * (len(failed) > 1)} failed: " + ", ".join(c.expr for c in failed)
        if verdict.passed:
            what += " (the evaluator passed it; the checks win)"
    else:
        what = f"the evaluator did not pass it (score {score:g})"
    ruling = _limits(limits, spent, last) or _quality(verdict, score, history, limits, setup)
    return dataclasses.replace(
        ruling, reason=f"{what}; {ruling.reason}", feedback=feedback, score=score
    )


def heed(answer: Mapping[str, Any], escalation: Ruling, where: str) -> Ruling:
    """The ruling a person's ``answer`` (`PERSON_SCHEMA`) at ``where`` makes of an escalation.

    ``accept`` takes the iteration's result (``succeeded``), ``stop`` ends the loop
    ``escalated``, ``retry`` goes on: the next attempt hears the person's
    feedback first, then the iteration's own.
    """
    decision = answer.get("decision")
    words = answer.get("feedback")
    note = words.strip() if isinstance(words, str) else ""
    said = f": {note}" if note else ""
    if decision == "accept":
        reason = f"a person accepted the result at {where}{said}"
        return Ruling("accept", reason, "succeeded", note, escalation.score, person=True)
    if decision == "retry":
        feedback = "\n".join(part for part in (note, escalation.feedback) if part)
        reason = f"a person asked for another attempt at {where}{said}"
        return Ruling("retry", reason, None, feedback, escalation.score, person=True)
    reason = f"a person stopped the loop at {where}{said}"
    return Ruling("stop", reason, "escalated", note, escalation.score, person=True)


def advance(history: History, ruling: Ruling) -> History:
    """The history after ``ruling``: counts, scores and plan changes folded in.

    A person's ruling settles the iteration the escalation was made on: it is
    not another iteration, and their ``retry`` starts afresh like a plan change.
    """
    if ruling.person:
        if ruling.decision == "retry":
            return dataclasses.replace(history, scores=(), retries=0)
        return history
    scores = history.scores
    if ruling.score is not None:
        scores = (*scores, ruling.score)
    after = dataclasses.replace(
        history,
        iterations=history.iterations + 1,
        scores=scores,
        infra_failures=history.infra_failures + ruling.infra,
    )
    if ruling.decision == "retry" and not ruling.infra:
        return dataclasses.replace(after, retries=after.retries + 1)
    if ruling.decision == "replan":
        return dataclasses.replace(after, scores=(), retries=0, replans=after.replans + 1)
    if ruling.decision == "delegate":
        return dataclasses.replace(after, scores=(), retries=0, delegated=True)
    return after


def _limits(limits: ControlLimits, spent: Spent, last: bool) -> Ruling | None:
    budget = limits.max_tokens
    if budget is not None and spent.tokens >= budget:
        reason = f"token budget: {spent.tokens} of maxTokens {budget} spent"
        return Ruling("stop", reason, "stopped_budget")
    timed_out = _timed_out(limits, spent)
    if timed_out is not None:
        return timed_out
    if last:
        reason = f"reached maxIterations ({limits.max_iterations})"
        return Ruling("stop", reason, "stopped_max_iterations")
    return None


def _timed_out(limits: ControlLimits, spent: Spent) -> Ruling | None:
    if limits.timeout is not None and spent.seconds >= parse_duration(limits.timeout):
        reason = f"wall-clock timeout: {spent.seconds:g}s spent, limits.timeout is {limits.timeout}"
        return Ruling("stop", reason, "stopped_budget")
    return None


def _quality(
    verdict: Verdict, score: float, history: History, limits: ControlLimits, setup: Setup
) -> Ruling:
    """Rules 7-14: what to do about an iteration whose work was not good enough."""
    can_replan = setup.has_planner and history.replans < limits.max_replans
    replan = f"replan {history.replans + 1} of {limits.max_replans}"
    if verdict.recommend == "escalate":
        return _escalate("the evaluator recommends escalating", setup)
    if verdict.recommend == "delegate" and setup.has_delegate and not history.delegated:
        return Ruling("delegate", "the evaluator recommends the delegate")
    if stalled((*history.scores, score), limits.no_progress_after):
        stuck = f"no progress for {limits.no_progress_after} iterations"
        if can_replan:
            return Ruling("replan", f"{stuck}: {replan}")
        return Ruling("stop", stuck, "stopped_no_progress")
    if verdict.recommend == "replan" and can_replan:
        return Ruling("replan", f"the evaluator recommends replanning: {replan}")
    if history.retries < limits.max_retries:
        return Ruling("retry", f"retry {history.retries + 1} of {limits.max_retries}")
    if can_replan:
        return Ruling("replan", f"retries are spent: {replan}")
    return _escalate("retries and replans are spent", setup)


def _escalate(reason: str, setup: Setup) -> Ruling:
    if setup.escalate == "human":  # the loop goes on, to a person
        return Ruling("escalate", f"{reason}; escalate: human asks a person")
    return Ruling("escalate", reason, "escalated")
