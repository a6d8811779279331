"""``control``: a planner -> actor -> evaluator -> decide loop (SPEC 2.5)."""

from __future__ import annotations

from cadenza.workflow._problems import DocPath
from cadenza.workflow._template import has_template

from ._base import Body, KindChecks, StepKind

__all__ = ["Control"]


class Control(StepKind):
    """A control step: its roles are workflows, loaded now unless named by a template."""

    name = "control"
    loopable = False
    leaf = False

    def check(self, body: Body, path: DocPath, depth: int, at: KindChecks) -> None:
        control = body.control
        if control is None:
            return
        path = (*path, "control")
        with at.unscoped():
            at.nesting(path, depth + 1)
            at.exprs.template((*path, "objective"), control.objective, field="objective")
            if control.criteria is not None:
                at.exprs.template((*path, "criteria"), control.criteria, field="criteria")
            for index, check in enumerate(control.checks):
                where = (*path, "checks", index)
                at.exprs.expression((*where, "expr"), check.expr, field="check expr", want="bool")
                if check.feedback is not None:
                    feedback = check.feedback
                    at.exprs.template((*where, "feedback"), feedback, field="check feedback")
            for key in ("planner", "actor", "delegate", "evaluator"):
                ref = getattr(control, key)
                if ref is not None and has_template(ref):  # resolved and loaded when it runs
                    at.exprs.template((*path, key), ref, field=key)
                elif ref is not None:
                    at.load_include((*path, key), ref)
