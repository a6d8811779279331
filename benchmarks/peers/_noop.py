"""No-op handlers for the Cadenza side of the peer benchmarks (steps that do nothing)."""

from __future__ import annotations

from typing import Any


async def noop(ctx: Any) -> None:
    """Does nothing: the step's cost is the runtime's alone."""


async def echo_item(ctx: Any) -> Any:
    """Returns the forEach item, as LangGraph's fan-out worker returns its input."""
    return {"i": ctx.item}
