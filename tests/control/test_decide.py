"""The decide policy, rule by rule: a table of situations and the ruling each gets."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from cadenza.actors.control.decide import PERSON_SCHEMA, heed
from cadenza.loops import (
    CheckResult,
    ControlStatus,
    Decision,
    History,
    InfraFailure,
    Recommendation,
    Ruling,
    Setup,
    Spent,
    Verdict,
    admit,
    advance,
    decide,
)
from cadenza.workflow import ControlLimits

LIMITS = ControlLimits(
    max_iterations=5,
    max_tokens=1000,
    max_retries=2,
    max_replans=1,
    timeout="1m",
    no_progress_after=2,
    max_infra_retries=1,
)
PLANNED = Setup(has_planner=True, has_delegate=True)
BARE = Setup()
PASS = CheckResult("size(result.text) <= 120", True)
FAIL = CheckResult("size(result.text) <= 120", False, "Too long: 240 chars, limit 120")
FAIL2 = CheckResult("result.text.contains('fast')", False, "Mention speed")
BROKEN = InfraFailure("actor", "no such workflow")


def good(score: float = 0.9, recommend: Recommendation | None = None) -> Verdict:
    return Verdict(True, score, "I love it", recommend)


def bad(score: float = 0.3, recommend: Recommendation | None = None) -> Verdict:
    return Verdict(False, score, "Not yet", recommend)


@dataclass(frozen=True)
class Case:
    verdict: Verdict | InfraFailure
    decision: Decision
    status: ControlStatus | None
    says: str
    checks: tuple[CheckResult, ...] = ()
    history: History = field(default_factory=History)
    spent: Spent = field(default_factory=Spent)
    setup: Setup = PLANNED
    limits: ControlLimits = LIMITS


CASES = {
    # 1: infrastructure failures beyond maxInfraRetries stop the loop
    "infra beyond the allowance stops": Case(
        BROKEN,
        "stop",
        "stopped_infra_failure",
        "2 infrastructure failures, maxInfraRetries is 1",
        history=History(infra_failures=1),
    ),
    # 2: accept needs every check and the evaluator
    "evaluator and checks pass: accept": Case(
        good(),
        "accept",
        "succeeded",
        "every check passed and the evaluator passed it",
        checks=(PASS,),
    ),
    "evaluator passes, no checks: accept": Case(
        good(),
        "accept",
        "succeeded",
        "the evaluator passed it (score 0.9)",
    ),
    "accepted on the last iteration over budget": Case(
        good(),
        "accept",
        "succeeded",
        "the evaluator passed it",
        history=History(iterations=4),
        spent=Spent(tokens=5000, seconds=3600),
    ),
    # 3-5: budget, time and the iteration cap
    "tokens spent: stop": Case(
        bad(),
        "stop",
        "stopped_budget",
        "token budget: 1000 of maxTokens 1000 spent",
        spent=Spent(tokens=1000),
    ),
    "infra within the allowance but tokens spent: stop": Case(
        BROKEN,
        "stop",
        "stopped_budget",
        "the actor failed: no such workflow; token budget",
        spent=Spent(tokens=1200),
    ),
    "wall clock spent: stop": Case(
        bad(),
        "stop",
        "stopped_budget",
        "wall-clock timeout: 60s spent, limits.timeout is 1m",
        spent=Spent(seconds=60),
    ),
    "last iteration: stop": Case(
        bad(),
        "stop",
        "stopped_max_iterations",
        "reached maxIterations (5)",
        history=History(iterations=4),
    ),
    "no budget and no timeout set: only the cap": Case(
        bad(),
        "stop",
        "stopped_max_iterations",
        "reached maxIterations (1)",
        spent=Spent(tokens=10**9, seconds=10**6),
        limits=ControlLimits(max_iterations=1),
    ),
    # 6: infrastructure failures within the allowance are retried, counted apart
    "infra within the allowance: retry": Case(
        BROKEN,
        "retry",
        None,
        "the actor failed: no such workflow; infrastructure failure 1 of 1",
        history=History(retries=2, replans=1),
    ),
    # 7: the evaluator may ask for a person
    "evaluator recommends escalating": Case(
        bad(recommend="escalate"),
        "escalate",
        "escalated",
        "the evaluator recommends escalating",
    ),
    "escalate: human goes on, to a person": Case(
        bad(recommend="escalate"),
        "escalate",
        None,
        "the evaluator recommends escalating; escalate: human asks a person",
        setup=Setup(escalate="human"),
    ),
    # 8: delegation, once, to a delegate that exists
    "evaluator recommends the delegate": Case(
        bad(recommend="delegate"),
        "delegate",
        None,
        "the evaluator recommends the delegate",
    ),
    "delegate recommended but there is none: retry": Case(
        bad(recommend="delegate"),
        "retry",
        None,
        "retry 1 of 2",
        setup=BARE,
    ),
    "delegate recommended but already delegated: retry": Case(
        bad(recommend="delegate"),
        "retry",
        None,
        "retry 1 of 2",
        history=History(delegated=True),
    ),
    # 9-10: no progress
    "no progress with a replan left: replan": Case(
        bad(0.5),
        "replan",
        None,
        "no progress for 2 iterations: replan 1 of 1",
        history=History(iterations=2, scores=(0.5, 0.5)),
    ),
    "no progress and no planner: stop": Case(
        bad(0.5),
        "stop",
        "stopped_no_progress",
        "no progress for 2 iterations",
        history=History(iterations=2, scores=(0.5, 0.4)),
        setup=BARE,
    ),
    "no progress and the replans spent: stop": Case(
        bad(0.5),
        "stop",
        "stopped_no_progress",
        "no progress for 2 iterations",
        history=History(iterations=3, scores=(0.5, 0.5), replans=1),
    ),
    "a better score is progress: retry": Case(
        bad(0.6),
        "retry",
        None,
        "retry 1 of 2",
        history=History(iterations=2, scores=(0.4, 0.5)),
    ),
    # 11: the evaluator may ask for a new plan
    "evaluator recommends replanning": Case(
        bad(recommend="replan"),
        "replan",
        None,
        "the evaluator recommends replanning: replan 1",
    ),
    "replan recommended without a planner: retry": Case(
        bad(recommend="replan"),
        "retry",
        None,
        "retry 1 of 2",
        setup=BARE,
    ),
    # 12-14: retries, then a replan, then escalation
    "quality failure with retries left: retry": Case(
        bad(),
        "retry",
        None,
        "the evaluator did not pass it (score 0.3); retry 2 of 2",
        history=History(iterations=1, retries=1, scores=(0.2,)),
    ),
    "retries spent, a replan left: replan": Case(
        bad(),
        "replan",
        None,
        "retries are spent: replan 1 of 1",
        history=History(iterations=2, retries=2, scores=(0.1, 0.2)),
    ),
    "retries and replans spent: escalate": Case(
        bad(),
        "escalate",
        "escalated",
        "retries and replans are spent",
        history=History(iterations=2, retries=2, replans=1, scores=(0.1, 0.2)),
    ),
    "retries spent without a planner: escalate": Case(
        bad(),
        "escalate",
        "escalated",
        "retries and replans are spent",
        history=History(iterations=2, retries=2, scores=(0.1, 0.2)),
        setup=BARE,
    ),
    # Evidence wins over the judge
    "a failing check beats a passing evaluator": Case(
        good(0.97),
        "retry",
        None,
        "check failed: size(result.text) <= 120 (the evaluator passed it; the checks win)",
        checks=(FAIL,),
    ),
    "two failing checks are both named": Case(
        bad(),
        "retry",
        None,
        "checks failed: size(result.text) <= 120, result.text.contains",
        checks=(FAIL, FAIL2),
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_decide_rules(case: Case) -> None:
    """Each situation gets the decision, terminal status and reason of its rule."""
    ruling = decide(case.verdict, case.checks, case.history, case.limits, case.spent, case.setup)
    assert (ruling.decision, ruling.status) == (case.decision, case.status)
    assert case.says in ruling.reason
    assert ruling.infra == isinstance(case.verdict, InfraFailure)


def test_check_feedback_goes_first_and_verbatim() -> None:
    """The next attempt hears the failing checks' feedback, as written, then the evaluator."""
    ruling = decide(good(0.97), (FAIL, PASS, FAIL2), History(), LIMITS, Spent(), PLANNED)
    assert ruling.feedback == "Too long: 240 chars, limit 120\nMention speed\nI love it"


def test_a_failing_check_caps_the_score_at_the_share_of_checks_passed() -> None:
    """0.97 from the judge with one of two checks failing counts as 0.5 for progress."""
    assert decide(good(0.97), (FAIL, PASS), History(), LIMITS, Spent()).score == 0.5
    assert decide(bad(0.3), (FAIL, PASS), History(), LIMITS, Spent()).score == 0.3
    assert decide(bad(0.3), (), History(), LIMITS, Spent()).score == 0.3
    silent = decide(Verdict(False, 0.2), (), History(), LIMITS, Spent())
    assert silent.feedback == ""


def test_an_infrastructure_failure_has_no_score_and_no_feedback() -> None:
    """Nothing was judged: the ruling carries neither."""
    ruling = decide(BROKEN, (), History(), LIMITS, Spent())
    assert (ruling.score, ruling.feedback) == (None, "")


ADMIT = {
    "within budget": (Spent(tokens=500), 400, None, ""),
    "the reserve would pass the budget": (
        Spent(tokens=700),
        400,
        "stopped_budget",
        "and the actor is reserved 400",
    ),
    "the budget is spent": (Spent(tokens=1000), 0, "stopped_budget", "1000 of maxTokens 1000"),
    "the time is spent": (Spent(seconds=61), 0, "stopped_budget", "wall-clock timeout"),
}


@pytest.mark.parametrize(("spent", "reserve", "status", "says"), ADMIT.values(), ids=ADMIT.keys())
def test_admit_reserves_the_next_call_before_it_is_made(
    spent: Spent, reserve: int, status: ControlStatus | None, says: str
) -> None:
    """A call goes ahead only if what is spent plus its reserve fits the budget and time."""
    ruling = admit("actor", reserve, LIMITS, spent)
    assert (ruling.status if ruling else None) == status
    assert ruling is None or says in ruling.reason


def test_admit_without_limits_always_lets_the_call_go() -> None:
    """No maxTokens and no timeout: nothing to reserve."""
    assert admit("actor", 10**9, ControlLimits(), Spent(10**9, 10**9)) is None


ADVANCE = {
    "a quality retry": (
        Ruling("retry", "r", score=0.4),
        History(iterations=1, scores=(0.4,), retries=1),
    ),
    "an infrastructure retry": (
        Ruling("retry", "r", infra=True),
        History(iterations=1, infra_failures=1),
    ),
    "a replan starts a new plan": (
        Ruling("replan", "r", score=0.4),
        History(iterations=1, replans=1),
    ),
    "a delegation starts a new plan": (
        Ruling("delegate", "r", score=0.4),
        History(iterations=1, delegated=True),
    ),
    "a stop": (Ruling("stop", "r", "stopped_budget"), History(iterations=1)),
}


@pytest.mark.parametrize(("ruling", "after"), ADVANCE.values(), ids=ADVANCE.keys())
def test_advance_folds_a_ruling_into_the_history(ruling: Ruling, after: History) -> None:
    """Retries, replans, delegation and infrastructure failures are each counted apart."""
    assert advance(History(), ruling) == after


def test_a_replan_resets_retries_and_the_progress_window() -> None:
    """After a replan the new plan gets its own retries and its own scores."""
    history = History(iterations=3, scores=(0.2, 0.2, 0.2), retries=2)
    after = advance(history, Ruling("replan", "r", score=0.2))
    assert (after.retries, after.scores, after.replans, after.iterations) == (0, (), 1, 4)


ESCALATION = Ruling("escalate", "retries and replans are spent", None, "Too long", 0.4)
HEED = {
    "accept": ({"decision": "accept"}, "accept", "succeeded", "", "a person accepted"),
    "retry with feedback": (
        {"decision": "retry", "feedback": " Shorter, please "},
        "retry",
        None,
        "Shorter, please\nToo long",
        "a person asked for another attempt at task.3.human: Shorter, please",
    ),
    "retry without feedback": ({"decision": "retry"}, "retry", None, "Too long", "another"),
    "stop": ({"decision": "stop", "feedback": "not worth it"}, "stop", "escalated", "", "stopped"),
}


@pytest.mark.parametrize(
    ("answer", "decision", "status", "feedback", "says"), HEED.values(), ids=HEED.keys()
)
def test_heed_turns_a_persons_answer_into_the_ruling(
    answer: dict[str, str],
    decision: Decision,
    status: ControlStatus | None,
    feedback: str,
    says: str,
) -> None:
    """The person's word settles the escalated iteration; their feedback is heard first."""
    ruling = heed(answer, ESCALATION, "task.3.human")
    assert (ruling.decision, ruling.status, ruling.person) == (decision, status, True)
    assert ruling.score == 0.4
    assert says in ruling.reason
    if decision == "retry":
        assert ruling.feedback == feedback


def test_the_answer_schema_offers_accept_retry_and_stop() -> None:
    """What `cadenza signal` checks an answer to an escalation against."""
    assert PERSON_SCHEMA["properties"]["decision"] == {"enum": ["accept", "retry", "stop"]}
    assert PERSON_SCHEMA["required"] == ["decision"]


def test_a_persons_retry_settles_the_iteration_and_starts_afresh() -> None:
    """No extra iteration is counted; retries and the progress window reset; replans stay."""
    history = History(iterations=4, scores=(0.2, 0.3), retries=2, replans=1, delegated=True)
    retry = advance(history, heed({"decision": "retry"}, ESCALATION, "t.3.human"))
    assert retry == History(iterations=4, scores=(), retries=0, replans=1, delegated=True)
    assert advance(history, heed({"decision": "stop"}, ESCALATION, "t.3.human")) == history
