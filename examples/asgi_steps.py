"""Handlers for asgi_flow.yaml, the workflow examples/asgi_service.py serves.

A ticket is taken in, triaged, then answered: a scripted writer drafts a reply
and ``review`` checks it, until a review approves (the second one does).

``GATE`` holds ``review`` steps while it is closed: this is how the service's
acceptance test (tests/embedding/test_asgi_service.py) keeps runs in flight for
as long as it needs, without guessing at delays. It is open unless someone
closes it, so the service on its own runs tickets straight through.
``EXECUTIONS`` counts what each handler really executed, per run and address
(a replayed step is not executed again).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from cadenza import StepContext

__all__ = ["EXECUTIONS", "GATE", "Gate", "intake", "review", "triage"]

URGENT = ("outage", "down", "security", "data loss")


class Gate:
    """Holds steps that wait on it, per key (a run id), until the key is released or it opens.

    Lives on the event loop: use it from that loop only.
    """

    def __init__(self, *, closed: bool = False) -> None:
        self.closed = closed
        self._released: set[str] = set()
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}
        self._watchers: list[tuple[int, asyncio.Future[None]]] = []

    @property
    def parked(self) -> int:
        """How many steps wait at the gate now."""
        return sum(len(futures) for futures in self._waiting.values())

    def release(self, key: str) -> None:
        """Lets the steps waiting on ``key`` through, now and from now on."""
        self._released.add(key)
        for future in self._waiting.pop(key, []):
            if not future.done():
                future.set_result(None)
        self._notify()

    def open(self) -> None:
        """Lets everything through, now and from now on."""
        self.closed = False
        for key in list(self._waiting):
            self.release(key)

    async def wait(self, key: str) -> None:
        """Returns once ``key`` may pass: at once while the gate is open."""
        if not self.closed or key in self._released:
            return
        future = asyncio.get_running_loop().create_future()
        waiting = self._waiting.setdefault(key, [])
        waiting.append(future)
        self._notify()
        try:
            await future
        finally:
            if future in waiting:  # cancelled while parked
                waiting.remove(future)
                self._notify()

    async def until_parked(self, count: int) -> None:
        """Returns once at least ``count`` steps wait at the gate."""
        while self.parked < count:
            future = asyncio.get_running_loop().create_future()
            self._watchers.append((count, future))
            await future

    def _notify(self) -> None:
        parked = self.parked
        ready = [(n, f) for n, f in self._watchers if parked >= n]
        for entry in ready:
            self._watchers.remove(entry)
            if not entry[1].done():
                entry[1].set_result(None)


GATE = Gate()
EXECUTIONS: collections.Counter[tuple[str, str]] = collections.Counter()


def _executed(context: StepContext) -> None:
    EXECUTIONS[(context.run_id, context.address)] += 1


async def intake(context: StepContext) -> dict[str, Any]:
    """Normalises the ticket text."""
    _executed(context)
    text = " ".join(str(context.inputs["ticket"]).split())
    return {"text": text, "words": len(text.split())}


async def triage(context: StepContext) -> dict[str, Any]:
    """Urgent if the ticket names an outage, a security problem or lost data."""
    _executed(context)
    text = str(context.steps["intake"].result["text"]).lower()
    urgent = any(word in text for word in URGENT)
    return {"priority": "urgent" if urgent else "normal", "queue": "on-call" if urgent else "desk"}


async def review(context: StepContext) -> dict[str, Any]:
    """Approves the second draft: the first always needs another pass."""
    _executed(context)
    await GATE.wait(context.run_id)
    draft = context.steps["draft"].content or ""
    approved = (context.iteration or 0) >= 1
    return {"approved": approved, "reply": draft, "notes": "ok" if approved else "be specific"}
