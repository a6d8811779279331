"""The models a document names, judged by rules its caller lends (``cadenza validate``).

Which providers exist, how a bare model name finds one and which variable holds
each provider's key is the ``llm`` package's knowledge, and ``llm`` sits beside
``workflow``, not below it. So the caller that knows both (the command line)
lends the validator a `ModelRules` built on ``llm``'s own table; without one,
models are checked when a run's agent first calls its model.

Two things are checked: every model spec written in the document (an agent's,
a step's), and that every agent the document runs (a step's, a judge, the
coordinator) gets a model from somewhere: its step, its agent, a ``script:``
(the ``scripted`` model), or the default the run would be given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ._problems import DocPath, Reporter
from ._spec import Agent

__all__ = ["ModelCheck", "ModelRules"]


@dataclass(frozen=True, slots=True)
class ModelRules:
    """How a caller that knows the providers judges model specs.

    Attributes:
        problem: Why a spec (``provider:model``, ``provider/model`` or a bare name)
            cannot run, or None when it can.
        warning: What a run with a spec that can run would lack here (an unset API
            key, which the process that runs it may have), or None.
        default: The model of agents that name none (``--model``, ``CADENZA_MODEL``);
            None: an agent step without a model is a problem.
        default_hint: How to give a default, for the message of that problem.
    """

    problem: Callable[[str], str | None]
    warning: Callable[[str], str | None]
    default: str | None = None
    default_hint: str = "pass --model provider:model (or set CADENZA_MODEL)"


class ModelCheck:
    """Applies `ModelRules` to one document, reporting at the places models are written."""

    def __init__(self, rules: ModelRules, reporter: Reporter, agents: Mapping[str, Agent]) -> None:
        self.rules = rules
        self.reporter = reporter
        self.agents = agents

    def spec(self, path: DocPath, spec: str) -> None:
        """The spec written at ``path``: a problem if it cannot run, else perhaps a warning."""
        problem = self.rules.problem(spec)
        if problem is not None:
            self.reporter.add_rule(path, problem)
            return
        warning = self.rules.warning(spec)
        if warning is not None:
            self.reporter.warn(path, warning)

    def runs_agent(self, path: DocPath, name: str | None, *, step: bool = True) -> None:
        """An agent (None: the default agent) runs at ``path`` with no model of the step's own.

        ``step`` is False for an agent no step runs (a judge, the coordinator).
        """
        agent = self.agents.get(name) if name is not None else None
        if name is not None and agent is None:
            return  # an unknown agent, or one whose definition is broken: reported already
        if agent is not None and (agent.model is not None or agent.script is not None):
            return  # its own model (checked where it is written), or its script
        if self.rules.default is not None:
            return
        if name is None:
            message = "no model for the default agent: give this step model: provider:model"
        elif not step:
            message = f"agent {name!r} has no model: give it model: provider:model"
        else:
            message = (
                f"agent {name!r} has no model, nor does this step: give the agent (or the "
                "step) model: provider:model"
            )
        self.reporter.add_rule(path, f"{message}, or {self.rules.default_hint}")
