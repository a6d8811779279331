"""Include steps (SPEC 1, 2.4): a child workflow run as one step.

The child runs in a fresh scope: it sees its own inputs and steps, never the
parent's. Its inputs are the include step's ``inputs``, rendered in the
parent's scope when the step starts (templates in strings, at any depth; a
string that is one ``{{ placeholder }}`` keeps its value's type), checked
against the child's declared inputs and completed with their defaults.

Without a root ``loop:`` the child's steps run as a sub-DAG at ``parent.<id>``
(its controller lives at ``parent.Steps``, an address no step can take). With
one, the include step is a `LoopController` whose iterations are
``parent.N.<id>``. Either way the child's ``output`` (CEL over the child's
scope, the last iteration's for a loop) becomes the step's content, and its
result when it is a map; without ``output``, the content of the child's last
declared step that ran.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from cadenza.actors.run import Cancellable, Placement, RunContext, Scope, work_error
from cadenza.kernel import Address
from cadenza.protocols import StepRecord, StepStart
from cadenza.workflow import (
    Expression,
    LoadedWorkflow,
    State,
    Step,
    compile_expression,
    parse_template,
    resolve_inputs,
)

from ._container import Container, Outcome
from ._loop import FinishHook, LoopController

__all__ = [
    "BODY",
    "ChildWorkflow",
    "IncludeController",
    "output_hook",
    "render_value",
    "spawn_include",
]

BODY = "Steps"
"""Where an include's sub-DAG controller lives, under the include (``parent.Steps``)."""


def render_value(value: Any, names: dict[str, Any], step_ids: frozenset[str]) -> Any:
    """``value`` with its string templates rendered, recursively; other values unchanged."""
    if isinstance(value, str):
        template = parse_template(value, step_ids=step_ids)
        if template.is_static:
            return value
        if len(template.parts) == 1 and isinstance(template.parts[0], Expression):
            return _plain(template.parts[0].evaluate(names))
        return template.render(names)
    if isinstance(value, list):
        return [render_value(item, names, step_ids) for item in value]
    if isinstance(value, dict):
        return {key: render_value(item, names, step_ids) for key, item in value.items()}
    return value


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return msgspec.json.decode(msgspec.json.encode(value))


def child_scope(run: RunContext, step: Step | State, scope: Scope, child: LoadedWorkflow) -> Scope:
    """The child's fresh scope, holding its inputs.

    Raises:
        InputError: An input is unknown to the child, missing, or of the wrong type.
        ExpressionEvaluationError: A template in ``inputs`` failed.
    """
    names = scope.activation(run.inputs)
    given = render_value(step.inputs or {}, names, run.step_ids)
    return Scope(inputs=resolve_inputs(child.workflow.inputs, given))


def output_hook(run: RunContext, child: LoadedWorkflow, address: str) -> FinishHook:
    """Turns a completed child's outcome into the include step's: its ``output``."""

    async def hook(outcome: Outcome, scope: Scope | None) -> Outcome:
        source = child.workflow.output
        if outcome.status != "completed" or source is None or scope is None:
            return Outcome(outcome.status, outcome.content, None, outcome.error)
        try:
            expression = compile_expression(source, step_ids=run.step_ids)
            names = scope.activation(run.inputs)
            if expression.is_async:  # an async Python callable
                value = await expression.evaluate_async(names)
            else:
                value = expression.evaluate(names)
        except Exception as error:  # a bad output fails the include step, located
            return Outcome("failed", outcome.content, None, work_error(error, address))
        value = _plain(value)
        if isinstance(value, str):
            return Outcome("completed", value, None)
        content = "" if value is None else msgspec.json.encode(value).decode()
        return Outcome("completed", content, value if isinstance(value, dict) else None)

    return hook


class ChildWorkflow(Container):
    """Runs a child workflow (without a root loop) as a sub-DAG at ``parent.<id>``.

    An include step and a control loop's workflow call differ only in how the
    child's inputs are made (`enter`) and what ``step_start`` says.
    """

    kind = "include"

    def __init__(self, placement: Placement, child: LoadedWorkflow) -> None:
        super().__init__(placement)
        self.child = child
        self.inner = self.scope

    def enter(self) -> Scope:
        """The child's scope: its inputs. Raising fails the step, located."""
        raise NotImplementedError

    async def begin(self) -> None:
        """Makes the child's inputs and starts its steps."""
        if self.stopping is not None:
            await self.finish(Outcome("cancelled"))
            return
        try:
            self.inner = self.enter()
        except Exception as error:  # inputs the child cannot take fail the step, located
            await self.finish(Outcome("failed", error=work_error(error, self.here)))
            return
        steps = self.child.workflow.steps
        at = self.address.child(BODY)
        self.spawn_body(0, steps, self.inner, self.address, document=self.child, at=at)

    async def child_done(self, key: int, record: StepRecord) -> None:
        """Ends with the child's output."""
        if self.stopping is not None and record.status != "completed":
            await self.finish(Outcome("cancelled"))
            return
        hook = output_hook(self.run, self.child, self.here)
        outcome = Outcome(record.status, record.content, None, record.error)
        hooked = await self.park(hook(outcome, self.inner))
        await self.finish(hooked if hooked is not None else Outcome("cancelled"))


class IncludeController(ChildWorkflow):
    """An ``include`` step without a root loop in the child."""

    def __init__(self, placement: Placement) -> None:
        assert placement.step.include is not None
        super().__init__(placement, placement.document.includes[placement.step.include])

    def start_data(self, attempt: int) -> StepStart:
        """The include reference, as zenflow's ``step_start`` carries it."""
        index, total = self.position
        return StepStart(
            kind=self.kind,
            attempt=attempt,
            include=self.step.include,
            index=index,
            total=total,
        )

    def enter(self) -> Scope:
        """The include's ``inputs:``, rendered in the parent's scope."""
        return child_scope(self.run, self.step, self.scope, self.child)


def spawn_include(placement: Placement, address: Address) -> Cancellable:
    """Spawns the controller of an include step at ``address``."""
    run, step, scope = placement.run, placement.step, placement.scope
    assert step.include is not None
    child = placement.document.includes[step.include]
    loop = child.workflow.loop
    controller: Container
    if loop is None:
        controller = IncludeController(placement)
    else:
        controller = LoopController(
            dataclasses.replace(placement, document=child),
            loop=loop,
            steps=child.workflow.steps,
            prepare=lambda: child_scope(run, step, scope, child),
            hook=output_hook(run, child, str(address)),
        )
    run.supervisor.spawn(address, lambda: controller)
    return controller
