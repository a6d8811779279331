"""A control loop's planner, actor, delegate and evaluator: workflows called like functions.

Each call runs a child workflow exactly as an include runs one (a fresh scope,
its steps at ``<call>.<id>``, its sub-DAG controller at ``<call>.Steps``, a
root ``loop:`` honoured, its ``output`` as its result), except that its inputs
are the values of the SPEC 2.5 contract, passed as data: they are never
rendered as templates, so a model's text cannot inject one. The child receives
the contract inputs it declares, and no others.

A reference (``actor: "{{ inputs.actor }}.yaml"``) may be a template rendered
in the control step's scope when the loop needs it; a workflow the loader did
not load with the document is loaded then, relative to the document's
directory. Whatever goes wrong (no such file, a bad document, inputs that do
not fit, an output of the wrong shape) is an infrastructure failure of the
call, which the decide policy bounds with ``maxInfraRetries``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from cadenza.actors.containers import ChildWorkflow, Container, LoopController, output_hook
from cadenza.actors.run import Cancellable, Placement, Position, Report, RunContext, Scope
from cadenza.kernel import Address
from cadenza.protocols import StepStart
from cadenza.workflow import (
    LoadedWorkflow,
    Step,
    has_template,
    load_workflow,
    parse_template,
    resolve_inputs,
)

__all__ = [
    "WorkflowCall",
    "call_workflow",
    "contract_scope",
    "load_reference",
    "render_reference",
]


def render_reference(run: RunContext, reference: str, scope: Scope) -> str:
    """The workflow reference with its template rendered in ``scope``.

    Raises:
        ExpressionEvaluationError: The template failed.
    """
    if not has_template(reference):
        return reference
    template = parse_template(reference, step_ids=run.step_ids)
    return template.render(scope.activation(run.inputs)).strip()


async def load_reference(document: LoadedWorkflow, reference: str) -> LoadedWorkflow:
    """The workflow ``reference`` names: loaded with ``document``, or loaded now.

    Raises:
        WorkflowError: The file is missing or not a valid workflow.
    """
    loaded = document.includes.get(reference)
    if loaded is not None:
        return loaded
    path = document.base_dir / document.workflow.includes.get(reference, reference)
    # Reading and validating a file blocks; a thread keeps every other actor going.
    return await anyio.to_thread.run_sync(load_workflow, path)


class WorkflowCall(ChildWorkflow):
    """Runs one child workflow (without a root loop) with contract inputs, as an include."""

    def __init__(
        self,
        run: RunContext,
        child: LoadedWorkflow,
        role: str,
        inputs: Mapping[str, Any],
        report: Report,
        position: Position,
    ) -> None:
        placement = Placement(run, child, role, Step(id=role), Scope(), report, position)
        super().__init__(placement, child)
        self.inputs = inputs

    def start_data(self, attempt: int) -> StepStart:
        """The child workflow's name, in the ``step_start`` event."""
        name = self.child.workflow.name
        index, total = self.position
        return StepStart(
            kind=self.kind,
            attempt=attempt,
            include=name,
            role=self.step_id,
            index=index,
            total=total,
        )

    def enter(self) -> Scope:
        """The contract inputs the child declares (`contract_scope`)."""
        return contract_scope(self.child, self.inputs)


def contract_scope(child: LoadedWorkflow, inputs: Mapping[str, Any]) -> Scope:
    """A fresh scope holding the contract inputs ``child`` declares.

    Raises:
        InputError: The child requires an input the contract does not give, or
            one has the wrong type.
    """
    declared = child.workflow.inputs
    given = {name: value for name, value in inputs.items() if name in declared}
    return Scope(inputs=resolve_inputs(declared, given))


def call_workflow(
    run: RunContext,
    child: LoadedWorkflow,
    role: str,
    address: Address,
    inputs: Mapping[str, Any],
    report: Report,
    position: Position,
) -> Cancellable:
    """Spawns the call of ``child`` at ``address``; its record arrives through ``report``.

    ``position`` is the control step's: a call is not a step anyone declared.
    """
    controller: Container
    loop = child.workflow.loop
    if loop is None:
        controller = WorkflowCall(run, child, role, inputs, report, position)
    else:
        controller = LoopController(
            Placement(run, child, role, Step(id=role), Scope(), report, position),
            loop=loop,
            steps=child.workflow.steps,
            prepare=lambda: contract_scope(child, inputs),
            hook=output_hook(run, child, str(address)),
        )
    run.supervisor.spawn(address, lambda: controller)
    return controller
