"""``handler``: a step a Python function does (``module:function``)."""

from __future__ import annotations

from typing import Any

from cadenza.workflow._modules import module_exists
from cadenza.workflow._problems import DocPath

from ._base import Body, KindChecks, StepKind

__all__ = ["Handler"]


class Handler(StepKind):
    """A handler step: the function is found when the step runs, its module at load."""

    name = "handler"

    def check(self, body: Body, path: DocPath, depth: int, at: KindChecks) -> None:
        """A handler whose module can be found nowhere fails at load, not mid-run.

        Only the top-level package is looked up, without importing anything: user
        code never runs at load. ``pkg.missing:fn`` inside an existing ``pkg`` is
        found at run time.
        """
        reference = body.handler
        if reference is None:
            return
        module, colon, _ = reference.partition(":")
        top = module.split(".", 1)[0]
        if not colon or not top.isidentifier() or module_exists(top, at.base_dir):
            return  # a malformed reference is the schema's to report
        at.add(
            (*path, "handler"),
            f"handler {reference!r}: no module {top!r} beside the workflow ({at.base_dir}) "
            "or on the Python path",
        )

    def describe(self, body: Body) -> dict[str, Any]:
        return {} if body.handler is None else {"handler": body.handler}
