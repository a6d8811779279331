"""What a `ControlLoop`'s functions receive and return, and the handler steps that call them.

Each decorated function gets one typed, frozen input (`PlannerInput`,
`ActorInput`, `EvaluatorInput`, `PrePlannerInput`) built from its workflow's
contract inputs, and may return plain values: a planner a string (the plan),
an actor a string (``{"text": ...}``), an evaluator an `Evaluation`. Anything
else is passed on as it is, and the engine judges its shape, exactly as for a
workflow written in YAML.

Handler steps name a callable by ``module:attribute``; the functions are
registered in `HANDLERS` under a fresh name each (``cadenza.loops._functions:
HANDLERS.f7``), and stay registered for the life of the process.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cadenza.actors import StepContext
from cadenza.actors.control.decide import Recommendation

__all__ = [
    "HANDLERS",
    "PRE_PLANNER",
    "ROLE_INPUTS",
    "ActorInput",
    "Evaluation",
    "EvaluatorInput",
    "PlannerInput",
    "PrePlannerInput",
    "role_handler",
]

PRE_PLANNER = "pre_planner"
"""The role (and step id) of the function run once before the loop."""


@dataclass(frozen=True, slots=True)
class PrePlannerInput:
    """What a ``pre_planner`` gets, once, before the first iteration."""

    objective: str
    criteria: str


@dataclass(frozen=True, slots=True)
class PlannerInput:
    """What a ``planner`` gets: on the first iteration and after each replan."""

    objective: str
    criteria: str
    feedback: str
    history: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ActorInput:
    """What an ``actor`` (or ``delegate``) gets on every iteration (``plan`` is "" unplanned)."""

    objective: str
    plan: Any
    feedback: str
    iteration: int


@dataclass(frozen=True, slots=True)
class EvaluatorInput:
    """What an ``evaluator`` gets: the actor's result map."""

    objective: str
    criteria: str
    result: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Evaluation:
    """An evaluator's verdict; a plain ``{passed, score, feedback}`` dict works too."""

    passed: bool
    score: float
    feedback: str = ""
    recommend: Recommendation | None = None


class _Registry:
    """Where handler steps find the decorated functions: ``HANDLERS.f7`` of this module."""

    def __init__(self) -> None:
        self._functions: dict[str, Callable[[StepContext], Any]] = {}
        self._names = itertools.count(1)

    def add(self, handler: Callable[[StepContext], Any]) -> str:
        name = f"f{next(self._names)}"
        self._functions[name] = handler
        return f"{__name__}:HANDLERS.{name}"

    def __getattr__(self, name: str) -> Callable[[StepContext], Any]:
        try:
            return self._functions[name]
        except KeyError:
            raise AttributeError(name) from None


HANDLERS = _Registry()
"""The registry of loop functions that handler steps call."""


def _pre_planner(inputs: Mapping[str, Any]) -> PrePlannerInput:
    return PrePlannerInput(str(inputs["objective"]), str(inputs["criteria"]))


def _planner(inputs: Mapping[str, Any]) -> PlannerInput:
    return PlannerInput(
        str(inputs["objective"]),
        str(inputs["criteria"]),
        str(inputs["feedback"]),
        list(inputs["history"]),
    )


def _actor(inputs: Mapping[str, Any]) -> ActorInput:
    return ActorInput(
        str(inputs["objective"]), inputs["plan"], str(inputs["feedback"]), int(inputs["iteration"])
    )


def _evaluator(inputs: Mapping[str, Any]) -> EvaluatorInput:
    return EvaluatorInput(str(inputs["objective"]), str(inputs["criteria"]), inputs["result"])


_BUILDERS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    PRE_PLANNER: _pre_planner,
    "planner": _planner,
    "actor": _actor,
    "delegate": _actor,
    "evaluator": _evaluator,
}

ROLE_INPUTS: dict[str, tuple[str, ...]] = {
    "planner": ("objective", "criteria", "feedback", "history"),
    "actor": ("objective", "plan", "feedback", "iteration"),
    "delegate": ("objective", "plan", "feedback", "iteration"),
    "evaluator": ("objective", "criteria", "result"),
}
"""The contract inputs (SPEC 2.5) each role's workflow declares."""


def _shape(role: str, value: Any, given: Any) -> Any:
    """The function's return value as its workflow's output map (the engine checks it)."""
    if role == PRE_PLANNER:
        if isinstance(value, str):
            return {"objective": value, "criteria": given.criteria}
        if isinstance(value, Mapping):
            return {
                "objective": str(value.get("objective", given.objective)),
                "criteria": str(value.get("criteria", given.criteria)),
            }
    if isinstance(value, str) and role in ("planner", "actor", "delegate"):
        return {"plan": value} if role == "planner" else {"text": value}
    if isinstance(value, Evaluation):
        verdict = {"passed": value.passed, "score": value.score, "feedback": value.feedback}
        return verdict | ({"recommend": value.recommend} if value.recommend else {})
    if isinstance(value, Mapping):
        return dict(value)
    return value


def role_handler(role: str, function: Callable[..., Any]) -> Callable[[StepContext], Any]:
    """A handler step body that calls ``function`` with its role's typed input."""
    build = _BUILDERS[role]
    if inspect.iscoroutinefunction(function):

        async def call_async(context: StepContext) -> Any:
            given = build(context.inputs)
            return _shape(role, await function(given), given)

        return call_async

    async def finish(pending: Awaitable[Any], given: Any) -> Any:
        return _shape(role, await pending, given)

    def call(context: StepContext) -> Any:
        given = build(context.inputs)
        value = function(given)
        if inspect.isawaitable(value):  # a sync callable that hands back a coroutine
            return finish(value, given)
        return _shape(role, value, given)

    return call
