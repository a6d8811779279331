"""``agent`` / ``instructions``: a step an LLM agent does, with its tools."""

from __future__ import annotations

from typing import Any

from cadenza.workflow._problems import DocPath

from ._base import Body, KindChecks, StepKind, short

__all__ = ["Agent"]


class Agent(StepKind):
    """An agent step: a named agent (``agent``) or the default one (``instructions`` alone)."""

    name = "agent"
    names = ("agent", "instructions")

    def named_by(self, body: Body) -> str | None:
        if body.agent is not None:
            return "agent"
        return "instructions" if body.instructions is not None else None

    def check(self, body: Body, path: DocPath, depth: int, at: KindChecks) -> None:
        if body.agent is not None:
            at.agent((*path, "agent"), body.agent)
        if at.models is not None and (body.agent is not None or body.instructions is not None):
            if body.model is not None:
                at.models.spec((*path, "model"), body.model)
            elif body.agent is not None and body.agent in at.agent_names:
                at.models.runs_agent((*path, "agent"), body.agent)
            elif body.agent is None:
                at.models.runs_agent((*path, "instructions"), None)
        if body.instructions is not None:
            at.text((*path, "instructions"), body.instructions, "instructions")

    def label(self, body: Body) -> str:
        return f"agent {short(body.agent)}" if body.agent else "agent"

    def describe(self, body: Body) -> dict[str, Any]:
        return {} if body.agent is None else {"agent": body.agent}
