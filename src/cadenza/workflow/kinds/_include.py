"""``include``: a step that runs another workflow, with ``inputs``."""

from __future__ import annotations

from typing import Any

from cadenza.workflow._problems import DocPath
from cadenza.workflow._references import check_include_contract
from cadenza.workflow._spec import Step

from ._base import Body, KindChecks, StepKind, short

__all__ = ["Include"]


class Include(StepKind):
    """An include step: what it gives must be what the included workflow declares."""

    name = "include"
    keys = ("include", "inputs")
    leaf = False

    def check(self, body: Body, path: DocPath, depth: int, at: KindChecks) -> None:
        reference = body.include
        if reference is None:
            if body.inputs is not None:
                at.add((*path, "inputs"), "inputs are given to include steps only")
            return
        for key, present in (
            ("condition", isinstance(body, Step) and body.condition is not None),
            ("contextFiles", bool(body.context_files)),
            ("model", body.model is not None),
        ):
            if present:
                at.add(
                    (*path, key),
                    f"an include step cannot have {key} (zenflow section 7): "
                    "set it inside the included workflow",
                )
        given = body.inputs or {}
        for name, value in given.items():
            _templates_in(at, (*path, "inputs", name), value, f"inputs.{name}")
        child = at.load_include((*path, "include"), reference)
        if child is not None:
            agents = at.workflow.agents
            check_include_contract(at.reporter, path, reference, given, child, agents)

    def label(self, body: Body) -> str:
        return f"include {short(body.include or '')}"

    def describe(self, body: Body) -> dict[str, Any]:
        return {} if body.include is None else {"include": body.include}


def _templates_in(at: KindChecks, path: DocPath, value: Any, field: str) -> None:
    if isinstance(value, str):
        at.exprs.template(path, value, field=field)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _templates_in(at, (*path, index), item, f"{field}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            _templates_in(at, (*path, key), item, f"{field}.{key}")
