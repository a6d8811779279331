"""What a run does with a ``handler`` step: the Python function, here or on a worker."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import msgspec

from cadenza.actors.run import NO_BRIEF, Brief
from cadenza.actors.steps._handler import StepContext, StepsView, call_handler, resolve_handler
from cadenza.actors.steps._leaf import LeafStep, LeafWork, WorkerSite, directory, order_head
from cadenza.protocols import HandlerOrder, WorkOrder

__all__ = ["HandlerWork"]


class HandlerWork(LeafWork):
    """A handler gets a `StepContext`: the run's inputs, the steps it sees, its brief."""

    def work(self, actor: LeafStep, address: str, attempt: int) -> Awaitable[tuple[str, Any]]:
        # Not a coroutine function of its own: the step awaits `call_handler` directly,
        # one frame fewer on the commonest step there is.
        run = actor.run
        reference = actor.step.handler
        assert reference is not None
        handler = resolve_handler(reference, actor.document.base_dir)
        variables = actor.scope.activation(run.inputs)
        context = StepContext(
            run_id=run.run_id,
            address=address,
            attempt=attempt,
            idempotency_key=f"{run.run_id}:{address}:{attempt}",
            inputs=variables["inputs"],
            steps=StepsView(variables["steps"]),
            workflow_dir=actor.document.base_dir,
            item=variables.get("item"),
            index=variables.get("index"),
            iteration=variables.get("iteration"),
            brief=actor.brief,
        )
        return call_handler(handler, context)

    def order(
        self, actor: LeafStep, address: str, attempt: int, seconds: float | None
    ) -> WorkOrder:
        assert actor.step.handler is not None
        variables = actor.scope.activation(actor.run.inputs)
        brief = actor.brief
        return HandlerOrder(
            **order_head(actor, address, attempt, seconds),
            handler=actor.step.handler,
            inputs=variables["inputs"],
            steps=variables["steps"],
            item=variables.get("item"),
            index=variables.get("index"),
            iteration=variables.get("iteration"),
            brief={} if brief is NO_BRIEF else msgspec.to_builtins(brief),
        )

    def run_order(self, order: WorkOrder, site: WorkerSite) -> Awaitable[tuple[str, Any]]:
        assert isinstance(order, HandlerOrder)
        workflow_dir = directory(order.base_dir)
        handler = resolve_handler(order.handler, workflow_dir)
        brief = NO_BRIEF if not order.brief else msgspec.convert(order.brief, Brief)
        context = StepContext(
            run_id=order.run_id,
            address=order.address,
            attempt=order.attempt,
            idempotency_key=order.idempotency_key,
            inputs=order.inputs,
            steps=StepsView(order.steps),
            workflow_dir=workflow_dir,
            item=order.item,
            index=order.index,
            iteration=order.iteration,
            brief=brief,
        )
        return call_handler(handler, context)
