"""What a run does with a ``tool`` step: one call, here or on a worker.

``$`` arguments are evaluated where the run's state is, and a call whose
arguments the run chose (a model's output, perhaps) asks the run's permission
policy first, as a model's call does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cadenza.actors.run import RunContext, StepFailure, ToolRequest
from cadenza.actors.steps._leaf import LeafStep, LeafWork, WorkerSite, directory, order_head
from cadenza.actors.steps._tool_step import CallSite, call_tool, tool_arguments
from cadenza.protocols import ErrorInfo, EventType, ToolOrder, ToolPermission, WorkOrder

__all__ = ["ToolWork"]


class ToolWork(LeafWork):
    """A tool step's content is what the tool returned; its result is null."""

    isolated = True

    async def work(self, actor: LeafStep, address: str, attempt: int) -> tuple[str, Any]:
        """Raises ``ExpressionEvaluationError`` for a ``$`` value that failed, and what
        `call_tool` raises."""
        step = actor.step
        run = actor.run
        assert step.tool is not None
        activation = actor.scope.activation(run.inputs)
        arguments = tool_arguments(step.tool_input, activation, run.step_ids)
        if any(isinstance(v, str) and v.startswith("$") for v in (step.tool_input or {}).values()):
            request = ToolRequest(run.run_id, address, None, step.tool, arguments)
            await _permitted(run, request, actor.document.base_dir, f"{address}:{attempt}")
        site = CallSite(actor.document.base_dir, run.run_id, address, attempt, run.clock)
        return await call_tool(step.tool, arguments, site, run.journal)

    def order(
        self, actor: LeafStep, address: str, attempt: int, seconds: float | None
    ) -> WorkOrder:
        step = actor.step
        run = actor.run
        assert step.tool is not None
        activation = actor.scope.activation(run.inputs)
        return ToolOrder(
            **order_head(actor, address, attempt, seconds),
            tool=step.tool,
            arguments=tool_arguments(step.tool_input, activation, run.step_ids),
        )

    async def run_order(self, order: WorkOrder, site: WorkerSite) -> tuple[str, Any]:
        assert isinstance(order, ToolOrder)
        call = CallSite(
            directory(order.base_dir), order.run_id, order.address, order.attempt, site.clock
        )
        return await call_tool(
            order.tool, order.arguments, call, site.journal(order.run_id, "remote")
        )


async def _permitted(run: RunContext, request: ToolRequest, directory: Path, call_id: str) -> None:
    """Asks the run's permission policy about a call whose arguments the run chose.

    Raises:
        StepFailure: The policy refused the call (``PermissionDenied``).
    """
    policy = run.permissions
    if not policy.active:
        return
    decision = await policy.decide(request, directory=directory)
    if decision is None:
        return
    tool, address = request.tool, request.step
    data = ToolPermission(
        tool_name=tool,
        tool_call_id=call_id,
        allowed=decision.allowed,
        by=decision.by,
        reason=decision.reason,
    )
    run.journal.emit(EventType.TOOL_PERMISSION, step_id=address, data=data)
    if not decision.allowed:
        message = f"{tool}: permission denied: {decision.reason}"
        raise StepFailure(ErrorInfo(type="PermissionDenied", message=message, address=address))
