"""``command``: a step that runs a program (a shell line, or an argument vector)."""

from __future__ import annotations

from typing import Any

from cadenza.workflow._problems import DocPath
from cadenza.workflow._template import has_template

from ._base import Body, KindChecks, StepKind

__all__ = ["Command"]

_TEMPLATED = (
    "command must not contain {{ }} templates, so that no value (model "
    "output least of all) is spliced into a command line: pass values "
    'through env (env: {NAME: "{{ ... }}"}, then use $NAME) or stdin'
)


class Command(StepKind):
    """A command step; ``env`` and ``stdin`` are templates, the command line never is."""

    name = "command"
    keys = ("command", "env", "cwd", "stdin")

    def check(self, body: Body, path: DocPath, depth: int, at: KindChecks) -> None:
        command = body.command
        if command is not None:
            _command_line(command, (*path, "command"), at)
        else:
            for key in ("env", "cwd", "stdin"):
                if getattr(body, key) is not None:
                    at.add((*path, key), f"{key} applies to command steps only")
        for name, value in (body.env or {}).items():
            at.exprs.template((*path, "env", name), value, field=f"env.{name}")
        if body.stdin is not None:
            at.exprs.template((*path, "stdin"), body.stdin, field="stdin")

    def describe(self, body: Body) -> dict[str, Any]:
        return {} if body.command is None else {"command": body.command}


def _command_line(command: str | list[str], path: DocPath, at: KindChecks) -> None:
    parts = (
        [(path, command)]
        if isinstance(command, str)
        else [((*path, i), part) for i, part in enumerate(command)]
    )
    if not command:
        at.add(path, "command is empty")
    for where, part in parts:
        if has_template(part):
            at.add(where, _TEMPLATED)
