"""Streamed model text, coalesced into ``agent_delta`` events.

A model streams its reply in fragments of a few characters; one event per
fragment would flood every observer. `Deltas` gathers the fragments and shows
them as one event when 100 ms have passed since the last, when 1,024
characters are waiting, or when the reply is complete: at most ten events a
second per agent, plus one per 1,024 characters of text.
"""

from __future__ import annotations

from typing import Final

from cadenza.actors.run import RunContext
from cadenza.protocols import AgentDelta, EventType

__all__ = ["Deltas"]

INTERVAL: Final = 0.1
"""Seconds between two events of one agent's stream, at least (but for a full buffer)."""

MAX_WAITING: Final = 1024
"""Characters gathered before an event goes out whatever the time."""


class Deltas:
    """The ``on_delta`` hook of one agent turn; `flush` shows what is left."""

    __slots__ = ("_agent", "_attempt", "_last", "_parts", "_run", "_size", "_step", "_turn")

    def __init__(self, run: RunContext, step: str, agent: str | None, turn: int) -> None:
        self._run = run
        self._step = step
        self._agent = agent
        self._turn = turn
        self._attempt = 1
        self._parts: list[str] = []
        self._size = 0
        self._last = run.clock.now()

    def __call__(self, text: str, attempt: int) -> None:
        if attempt != self._attempt:  # a retried stream starts over: what is waiting was shown
            self.flush()
            self._attempt = attempt
        self._parts.append(text)
        self._size += len(text)
        if self._size >= MAX_WAITING or self._run.clock.now() - self._last >= INTERVAL:
            self.flush()

    def flush(self) -> None:
        """Shows the text waiting, if any, as one event."""
        if not self._parts:
            return
        text = "".join(self._parts)
        self._parts.clear()
        self._size = 0
        self._last = self._run.clock.now()
        data = AgentDelta(turn=self._turn, attempt=self._attempt, text=text)
        self._run.journal.broadcast(
            EventType.AGENT_DELTA, step_id=self._step, agent=self._agent, data=data
        )
