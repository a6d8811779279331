"""`ControlLoop`: a control loop whose planner, actor and evaluator are Python functions.

A `ControlLoop` does not run anything itself. It builds a workflow in memory: a
``control:`` step whose planner, actor, delegate and evaluator are one-step
workflows, each a ``handler`` step that calls the decorated function (plain
functions run in a worker thread, ``async`` ones on the event loop), and, with
a ``pre_planner``, a handler step before it that may rewrite the objective.
That workflow runs on the ordinary runtime, so the loop is driven by the same
`ControlController` and ruled by the same `decide` as one written in YAML.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, TypeVar

from cadenza.api import Runtime
from cadenza.errors import CadenzaError
from cadenza.workflow import (
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

from ._functions import HANDLERS, PRE_PLANNER, ROLE_INPUTS, role_handler
from ._run import DecisionEntry, LoopResult, LoopRun, decision_sink

__all__ = ["ControlLoop"]

F = TypeVar("F", bound=Callable[..., Any])
_STEP_ID = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


class ControlLoop:
    """A control loop written in Python: decorate its parts, then `run` or `start` it.

    Example::

        from cadenza.loops import ActorInput, Evaluation, EvaluatorInput, ControlLoop

        loop = ControlLoop("Write a tagline for Cadenza", criteria="at most 60 chars",
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

    def __init__(  # noqa: PLR0913 -- a builder: its keywords are the control loop's YAML limits
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
        if not _STEP_ID.match(name) or name == PRE_PLANNER:
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
        self._handlers: dict[str, str] = {}  # role -> the handler reference calling it

    def _register(self, role: str, function: F) -> F:
        # Registered once here, not per run: a service may run one ControlLoop many times.
        self._handlers[role] = HANDLERS.add(role_handler(role, function))
        return function

    def pre_planner(self, function: F) -> F:
        """Decorates the function run once before the loop; it may rewrite the objective.

        It gets a `PrePlannerInput` and returns the new objective (a string) or a
        map with ``objective`` and/or ``criteria``.
        """
        return self._register(PRE_PLANNER, function)

    def planner(self, function: F) -> F:
        """Decorates the planner: `PlannerInput` -> a plan (a string, or ``{plan}``)."""
        return self._register("planner", function)

    def actor(self, function: F) -> F:
        """Decorates the actor: `ActorInput` -> its result map (a string means ``{text}``)."""
        return self._register("actor", function)

    def delegate(self, function: F) -> F:
        """Decorates the alternate actor that takes over when the evaluator recommends it."""
        return self._register("delegate", function)

    def evaluator(self, function: F) -> F:
        """Decorates the evaluator: `EvaluatorInput` -> an `Evaluation` or its map."""
        return self._register("evaluator", function)

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
        missing = [role for role in ("actor", "evaluator") if role not in self._handlers]
        if missing:
            raise CadenzaError(f"the loop has no {' and no '.join(missing)}: decorate one")
        includes = {
            role: _child(role, reference)
            for role, reference in self._handlers.items()
            if role != PRE_PLANNER
        }
        steps: list[Step] = []
        objective, criteria = "{{ inputs.objective }}", "{{ inputs.criteria }}"
        pre = self._handlers.get(PRE_PLANNER)
        if pre is not None:  # the loop works on what the pre-planner made of the objective
            steps.append(Step(id=PRE_PLANNER, handler=pre))
            objective = f"{{{{ steps.{PRE_PLANNER}.result.objective }}}}"
            criteria = f"{{{{ steps.{PRE_PLANNER}.result.criteria }}}}"
        control = Control(
            objective=objective,
            criteria=criteria,
            planner="planner" if "planner" in includes else None,
            actor="actor",
            delegate="delegate" if "delegate" in includes else None,
            evaluator="evaluator",
            checks=list(self.checks),
            limits=self.limits,
            escalate=self.escalate,
        )
        steps.append(Step(id=self.name, control=control, depends_on=[s.id for s in steps]))
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
        log: list[DecisionEntry] = []
        handle = await runtime.start(
            self.workflow(),
            inputs={"objective": self.objective, "criteria": self.criteria},
            run_id=run_id,
            on_event=decision_sink(self.name, log),
        )
        return LoopRun(handle, self.name, log)

    async def run(self, runtime: Runtime | None = None) -> LoopResult:
        """Runs the loop to its end (on a runtime of its own unless given one).

        Raises:
            LoopError: The loop ended without a decision.
        """
        if runtime is not None:
            return await (await self.start(runtime)).result()
        async with Runtime() as own:
            return await (await self.start(own)).result()


def _child(role: str, reference: str) -> LoadedWorkflow:
    """A one-step workflow that takes ``role``'s contract inputs and calls ``reference``."""
    names = ROLE_INPUTS[role]
    workflow = Workflow(
        name=role,
        inputs={name: InputSpec() for name in names},
        steps=[Step(id=role, handler=reference)],
        output=f"steps.{role}.result",
    )
    return LoadedWorkflow(workflow, None, Path.cwd())
