"""Handlers for examples/build-test-ship.yaml: plain Python functions.

A handler takes a `cadenza.StepContext` and returns a string (the step's
content) or a dict (its result, with the JSON as content).
"""

from __future__ import annotations

import asyncio

from cadenza import StepContext


def lint(context: StepContext) -> dict[str, object]:
    """A sync handler: runs in a worker thread, never blocking the event loop."""
    built = context.steps["build"].content or ""
    return {"problems": 0, "checked": built.strip()}


async def release_notes(context: StepContext) -> str:
    """An async handler: awaited on the event loop."""
    await asyncio.sleep(0)
    return f"Release {context.inputs['version']}: faster loops, clearer errors."


def ship(context: StepContext) -> str:
    """Ships when the workflow's condition let it run; uses the idempotency key."""
    notes = context.steps["notes"].content
    return f"shipped {context.inputs['version']} ({notes}) [key {context.idempotency_key}]"
