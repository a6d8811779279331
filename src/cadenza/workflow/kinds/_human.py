"""``human``: a step that waits for a person's answer (SPEC 2.6)."""

from __future__ import annotations

from cadenza.workflow._problems import DocPath
from cadenza.workflow._references import check_json_schema

from ._base import Body, KindChecks, StepKind

__all__ = ["Human"]


class Human(StepKind):
    """A human step: its prompt is a template; its answer may have to fit a schema."""

    name = "human"
    loopable = False

    def check(self, body: Body, path: DocPath, depth: int, at: KindChecks) -> None:
        human = body.human
        if human is None:
            return
        at.exprs.template((*path, "human", "prompt"), human.prompt, field="prompt")
        if human.schema is not None:
            check_json_schema(at.reporter, (*path, "human", "schema"), human.schema)
