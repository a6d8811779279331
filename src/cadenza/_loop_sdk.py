"""The `Loop` builder: a control loop whose planner, actor and evaluator are Python functions.

A `Loop` does not run anything itself. It builds a workflow in memory: a
``control:`` step whose planner, actor, delegate and evaluator are one-step
workflows, each a ``handler`` step that calls the decorated function (plain
functions run in a worker thread, ``async`` ones on the event loop), and, with
a ``pre_planner``, a handler step before it that may rewrite the objective.
That workflow runs on the ordinary runtime, so the loop is driven by the same
`ControlController` and ruled by the same `decide` as one written in YAML.

Handler steps name a callable by ``module:attribute``; the decorated functions
are registered in `HANDLERS` under a fresh name each, and stay registered for
the life of the process.
"""

from __future__ import annotations

import inspect
import itertools
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, TypeVar

from ._api import Runtime
from ._loop_run import LoopResult, LoopRun
from .actors import StepContext
from .actors._decide import Recommendation
from .errors import CadenzaError
from .workflow import (
    Check,
    Control,
    ControlLimits,
    InputSpec,
    LoadedWorkflow,
    Step,
    Workflow,
    compile_expression,
    parse_duration,
    parse_template,
)

__all__ = [
    "HANDLERS",
    "ActorInput",
    "Evaluation",
    "EvaluatorInput",
    "Loop",
    "PlannerInput",
    "PrePlannerInput",
]

F = TypeVar("F", bound=Callable[..., Any])
_STEP_ID = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_PRE = "pre_planner"


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
    """Where handler steps find the decorated functions: ``cadenza._loop_sdk:HANDLERS.f7``."""

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


_ROLES: dict[str, tuple[Callable[[Mapping[str, Any]], Any], tuple[str, ...]]] = {
    "planner": (_planner, ("objective", "criteria", "feedback", "history")),
    "actor": (_actor, ("objective", "plan", "feedback", "iteration")),
    "delegate": (_actor, ("objective", "plan", "feedback", "iteration")),
    "evaluator": (_evaluator, ("objective", "criteria", "result")),
}


def _shape(role: str, value: Any, given: Any) -> Any:
    """The function's return value as its workflow's output map (the engine checks it)."""
    if role == _PRE:
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


def _handler(role: str, function: Callable[..., Any]) -> Callable[[StepContext], Any]:
    """A handler step body that calls ``function`` with its role's typed input."""
    build = _pre_planner if role == _PRE else _ROLES[role][0]
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


class Loop:
    """A control loop written in Python: decorate its parts, then `run` or `start` it.

    Example::

        loop = Loop("Write a tagline for Cadenza", criteria="at most 60 chars",
                    max_iterations=4)
        loop.check("size(result.text) <= 60", "Too long: {{ size(result.text) }} chars")

        @loop.actor
        def write(task: ActorInput) -> str:
            return "Cadenza: loops that stop." if task.feedback else "A" * 80

        @loop.evaluator
        def judge(task: EvaluatorInput) -> Evaluation:
            return Evaluation(passed=True, score=0.9)

        result = await loop.run()   # result.status == "succeeded"

    Args:
        objective: What the loop works towards (``PlannerInput.objective``...).
        criteria: How the evaluator should judge it.
        name: The control step's id: its address in events and results.
        max_iterations, max_tokens, max_retries, max_replans, timeout,
            no_progress_after, max_infra_retries: ``limits`` (SPEC 2.5).
        escalate: ``stop`` or ``human``.

    Raises:
        ValueError: A name that is not a step id, or a limit out of range.
    """

    def __init__(
        self,
        objective: str,
        *,
        criteria: str = "",
        name: str = "loop",
        max_iterations: int = 5,
        max_tokens: int | None = None,
        max_retries: int = 3,
        max_replans: int = 1,
        timeout: str | None = None,
        no_progress_after: int = 2,
        max_infra_retries: int = 2,
        escalate: Literal["stop", "human"] = "stop",
    ) -> None:
        if not _STEP_ID.match(name) or name == _PRE:
            raise ValueError(f"name {name!r} must be a step id (^[a-z][a-z0-9_-]{{0,63}}$)")
        for label, value, least in (
            ("max_iterations", max_iterations, 1),
            ("max_tokens", 1 if max_tokens is None else max_tokens, 1),
            ("max_retries", max_retries, 0),
            ("max_replans", max_replans, 0),
            ("no_progress_after", no_progress_after, 1),
            ("max_infra_retries", max_infra_retries, 0),
        ):
            if value < least:
                raise ValueError(f"{label} must be at least {least}, not {value}")
        if timeout is not None:
            parse_duration(timeout)
        self.objective = objective
        self.criteria = criteria
        self.name = name
        self.escalate: Literal["stop", "human"] = escalate
        self.limits = ControlLimits(
            max_iterations=max_iterations,
            max_tokens=max_tokens,
            max_retries=max_retries,
            max_replans=max_replans,
            timeout=timeout,
            no_progress_after=no_progress_after,
            max_infra_retries=max_infra_retries,
        )
        self.checks: list[Check] = []
        self._functions: dict[str, Callable[..., Any]] = {}

    def pre_planner(self, function: F) -> F:
        """Decorates the function run once before the loop; it may rewrite the objective.

        It gets a `PrePlannerInput` and returns the new objective (a string) or a
        map with ``objective`` and/or ``criteria``.
        """
        self._functions[_PRE] = function
        return function

    def planner(self, function: F) -> F:
        """Decorates the planner: `PlannerInput` -> a plan (a string, or ``{plan}``)."""
        self._functions["planner"] = function
        return function

    def actor(self, function: F) -> F:
        """Decorates the actor: `ActorInput` -> its result map (a string means ``{text}``)."""
        self._functions["actor"] = function
        return function

    def delegate(self, function: F) -> F:
        """Decorates the alternate actor that takes over when the evaluator recommends it."""
        self._functions["delegate"] = function
        return function

    def evaluator(self, function: F) -> F:
        """Decorates the evaluator: `EvaluatorInput` -> an `Evaluation` or its map."""
        self._functions["evaluator"] = function
        return function

    def check(self, expr: str, feedback: str | None = None) -> None:
        """Adds a check: CEL over ``result``; ``feedback`` (a template) when it fails.

        Raises:
            ExpressionSyntaxError: The expression or the feedback does not compile.
        """
        compile_expression(expr)
        if feedback is not None:
            parse_template(feedback)
        self.checks.append(Check(expr=expr, feedback=feedback))

    def workflow(self) -> LoadedWorkflow:
        """The workflow that runs this loop (what `start` hands the runtime).

        Raises:
            CadenzaError: No actor or no evaluator was decorated.
        """
        missing = [role for role in ("actor", "evaluator") if role not in self._functions]
        if missing:
            raise CadenzaError(f"the loop has no {' and no '.join(missing)}: decorate one")
        includes = {
            role: _child(role, function)
            for role, function in self._functions.items()
            if role != _PRE
        }
        control = Control(
            objective="{{ inputs.objective }}",
            criteria="{{ inputs.criteria }}",
            planner="planner" if "planner" in includes else None,
            actor="actor",
            delegate="delegate" if "delegate" in includes else None,
            evaluator="evaluator",
            checks=list(self.checks),
            limits=self.limits,
            escalate=self.escalate,
        )
        steps = [Step(id=self.name, control=control)]
        pre = self._functions.get(_PRE)
        if pre is not None:
            result = f"steps.{_PRE}.result"
            control = Control(
                **{
                    **{f: getattr(control, f) for f in control.__struct_fields__},
                    "objective": f"{{{{ {result}.objective }}}}",
                    "criteria": f"{{{{ {result}.criteria }}}}",
                }
            )
            steps = [
                Step(id=_PRE, handler=HANDLERS.add(_handler(_PRE, pre))),
                Step(id=self.name, control=control, depends_on=[_PRE]),
            ]
        workflow = Workflow(
            name=self.name,
            inputs={
                "objective": InputSpec(type="string"),
                "criteria": InputSpec(type="string", default=""),
            },
            steps=steps,
        )
        return LoadedWorkflow(workflow, None, Path.cwd(), MappingProxyType(includes))

    async def start(self, runtime: Runtime, *, run_id: str | None = None) -> LoopRun:
        """Starts the loop on ``runtime``; the `LoopRun` shows its decisions as they come."""
        document = self.workflow()
        pending: list[LoopRun] = []
        handle = await runtime.start(
            document,
            inputs={"objective": self.objective, "criteria": self.criteria},
            run_id=run_id,
            on_event=lambda event: pending[0]._observe(event) if pending else None,
        )
        run = LoopRun(handle, self.name)
        pending.append(run)
        return run

    async def run(self, runtime: Runtime | None = None) -> LoopResult:
        """Runs the loop to its end (on a runtime of its own unless given one).

        Raises:
            LoopError: The loop ended without a decision.
        """
        if runtime is not None:
            return await (await self.start(runtime)).result()
        async with Runtime() as own:
            return await (await self.start(own)).result()


def _child(role: str, function: Callable[..., Any]) -> LoadedWorkflow:
    """A one-step workflow that takes ``role``'s contract inputs and calls ``function``."""
    names = _ROLES[role][1]
    workflow = Workflow(
        name=role,
        inputs={name: InputSpec() for name in names},
        steps=[Step(id=role, handler=HANDLERS.add(_handler(role, function)))],
        output=f"steps.{role}.result",
    )
    return LoadedWorkflow(workflow, None, Path.cwd())
