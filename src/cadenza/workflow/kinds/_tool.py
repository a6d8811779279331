"""``tool``: one call of a built-in or Python tool, without a model."""

from __future__ import annotations

from cadenza.workflow._problems import DocPath

from ._base import Body, KindChecks, StepKind

__all__ = ["Tool"]

_BASH_EXPRESSION = (
    "the command of a bash tool step cannot be a $ expression: its value (a model's "
    "output, perhaps) would become a shell line. Use a command step and pass the value "
    'through env (env: {NAME: "{{ steps.x.content }}"}, then "$NAME") or stdin; '
    "a command that starts with a shell variable can start with 'exec ' instead"
)


class Tool(StepKind):
    """A tool step: ``toolInput`` values that start with ``$`` are CEL, the rest data."""

    name = "tool"
    keys = ("tool", "toolInput")
    loopable = False

    def check(self, body: Body, path: DocPath, depth: int, at: KindChecks) -> None:
        if body.tool_input is None:
            return
        if body.tool is None:
            at.add((*path, "toolInput"), "toolInput needs tool: name the tool to run")
        for name, value in body.tool_input.items():
            if not (isinstance(value, str) and value.startswith("$")):
                continue  # data, passed to the tool as written
            where = (*path, "toolInput", name)
            if body.tool == "bash" and name == "command":
                at.add(where, _BASH_EXPRESSION)
                continue
            at.exprs.expression(where, value[1:], field=f"toolInput.{name}", want="string", shift=1)
