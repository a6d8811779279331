"""What a run does with a ``command`` step: the program, here or on a worker."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cadenza.actors.steps._command import command_result, run_command
from cadenza.actors.steps._leaf import LeafStep, LeafWork, WorkerSite, order_head
from cadenza.protocols import CommandOrder, WorkOrder

__all__ = ["CommandWork"]


class CommandWork(LeafWork):
    """A command runs with the step's rendered ``env`` and ``stdin``, and ``CADENZA_*``."""

    isolated = True

    async def work(self, actor: LeafStep, address: str, attempt: int) -> tuple[str, Any]:
        step = actor.step
        assert step.command is not None
        env = dict(os.environ)
        env.update(_variables(actor, address, attempt))
        stdin = actor.render(step.stdin) if step.stdin is not None else None
        # In a worktree the step's own directory stands for the process's.
        base_dir = actor.document.base_dir
        default = base_dir if actor.run.worktrees is not None else Path.cwd()
        cwd = base_dir / step.cwd if step.cwd else default
        outcome = await run_command(step.command, env=env, cwd=cwd, stdin=stdin)
        return command_result(outcome, address)

    def order(
        self, actor: LeafStep, address: str, attempt: int, seconds: float | None
    ) -> WorkOrder:
        step = actor.step
        assert step.command is not None
        head = order_head(actor, address, attempt, seconds)
        return CommandOrder(
            **head,
            command=step.command,
            env=_variables(actor, address, attempt),
            cwd=os.fspath(actor.document.base_dir.absolute() / step.cwd) if step.cwd else None,
            stdin=actor.render(step.stdin) if step.stdin is not None else None,
        )

    async def run_order(self, order: WorkOrder, site: WorkerSite) -> tuple[str, Any]:
        assert isinstance(order, CommandOrder)
        env = dict(os.environ)
        env.update(order.env)
        cwd = Path(order.cwd) if order.cwd else Path.cwd()
        outcome = await run_command(order.command, env=env, cwd=cwd, stdin=order.stdin)
        return command_result(outcome, order.address)


def _variables(actor: LeafStep, address: str, attempt: int) -> dict[str, str]:
    """The step's own ``env``, rendered, and the ``CADENZA_*`` variables of the attempt."""
    run_id = actor.run.run_id
    env = {name: actor.render(value) for name, value in (actor.step.env or {}).items()}
    env["CADENZA_RUN_ID"] = run_id
    env["CADENZA_STEP_ADDRESS"] = address
    env["CADENZA_ATTEMPT"] = str(attempt)
    env["CADENZA_IDEMPOTENCY_KEY"] = f"{run_id}:{address}:{attempt}"
    return env
