"""What an iteration of a control loop produced, read strictly: checks and the verdict.

Checks are the deterministic evidence (SPEC 2.5): CEL over the actor's
``result`` (and the step's scope), each with templated feedback. A check that
cannot even be evaluated (the result lacks the field it reads, a non-boolean
value) fails, and the error is its feedback, so the next attempt learns what
was missing. The verdict is the evaluator's output map, which must fit
``{passed, score, feedback?, recommend?}``; anything else is an infrastructure
failure of the evaluator, bounded like any other.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from cadenza.workflow import Check, compile_expression, parse_template

from .decide import RECOMMENDATIONS, CheckResult, InfraFailure, Verdict

__all__ = ["read_verdict", "run_checks"]


def run_checks(
    checks: Sequence[Check], names: dict[str, Any], step_ids: frozenset[str]
) -> list[CheckResult]:
    """Evaluates every check over ``names`` (which hold ``result``), in order."""
    results = []
    for check in checks:
        try:
            expression = compile_expression(check.expr, step_ids=step_ids)
            passed = expression.evaluate_bool(names, what="check")
        except Exception as error:  # a result the check cannot read fails the check
            results.append(CheckResult(check.expr, False, f"check {check.expr!r}: {error}"))
            continue
        feedback = ""
        if not passed:
            feedback = f"check failed: {check.expr}"
            if check.feedback is not None:
                try:
                    feedback = parse_template(check.feedback, step_ids=step_ids).render(names)
                except Exception as error:  # keep the verdict, say what went wrong
                    feedback += f" (its feedback could not be rendered: {error})"
        results.append(CheckResult(check.expr, passed, feedback))
    return results


def read_verdict(output: Mapping[str, Any]) -> Verdict | InfraFailure:
    """The evaluator's output as a `Verdict`, or why it does not fit the contract."""
    passed: Any = output.get("passed")
    score: Any = output.get("score")
    feedback: Any = output.get("feedback") or ""
    recommend: Any = output.get("recommend")
    problems = []
    if not isinstance(passed, bool):
        problems.append("'passed' must be true or false")
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        problems.append("'score' must be a number")
    if not isinstance(feedback, str):
        problems.append("'feedback' must be a string")
    if recommend is not None and recommend not in RECOMMENDATIONS:
        allowed = ", ".join(sorted(RECOMMENDATIONS))
        problems.append(f"'recommend' must be one of {allowed} or null, not {recommend!r}")
    if problems:
        what = "its output does not fit {passed, score, feedback, recommend?}: "
        return InfraFailure("evaluator", what + "; ".join(problems))
    return Verdict(passed, float(score), feedback, recommend)
