"""Streamed model text, coalesced into zenflow's ``output`` events.

A model streams its reply in fragments of a few characters; one event per
fragment would flood every observer. `Deltas` gathers the fragments and shows
them as one event when 100 ms have passed since the last, when 1,024
characters are waiting, or when the reply is complete: at most ten events a
second per agent, plus one per 1,024 characters of text. The last one of a
reply says ``done`` (zenflow's end of a stream), so that an observer knows
where one turn's text ends and the next one's begins.

A reasoning model's reasoning is streamed the same way, apart: its events say
``reasoning: true`` (zenflow's mark). `Streams` keeps the two from mixing:
when the answer begins the reasoning ends (``done``), and the other way round.
"""

from __future__ import annotations

from typing import Final

from cadenza.actors.run import RunContext

__all__ = ["Deltas", "Streams"]

INTERVAL: Final = 0.1
"""Seconds between two events of one agent's stream, at least (but for a full buffer)."""

MAX_WAITING: Final = 1024
"""Characters gathered before an event goes out whatever the time."""


class Deltas:
    """The ``on_delta`` hook of one model call; `finish` shows what is left, ``done``."""

    __slots__ = (
        "_agent",
        "_attempt",
        "_last",
        "_parts",
        "_reasoning",
        "_run",
        "_shown",
        "_size",
        "_step",
    )

    def __init__(
        self, run: RunContext, step: str, agent: str | None, *, reasoning: bool = False
    ) -> None:
        self._run = run
        self._step = step
        self._agent = agent
        self._reasoning = reasoning
        self._attempt = 1
        self._parts: list[str] = []
        self._size = 0
        self._shown = False  # text of this reply went out, and no ``done`` yet
        self._last = run.clock.now()

    def __call__(self, text: str, attempt: int) -> None:
        if attempt != self._attempt:  # a retried stream starts over: the text so far ends
            self.finish()
            self._attempt = attempt
        self._parts.append(text)
        self._size += len(text)
        if self._size >= MAX_WAITING or self._run.clock.now() - self._last >= INTERVAL:
            self._show(done=False)

    def finish(self) -> None:
        """Ends the reply's text: what waits goes out with ``done`` (if it streamed any)."""
        if self._parts or self._shown:
            self._show(done=True)

    def _show(self, *, done: bool) -> None:
        text = "".join(self._parts)
        self._parts.clear()
        self._size = 0
        self._last = self._run.clock.now()
        self._shown = not done
        self._run.journal.output(self._step, self._agent, text, done, reasoning=self._reasoning)


class Streams:
    """The hooks of one model call: its answer (`on_delta`) and its reasoning
    (`on_reasoning`), each coalesced by its own `Deltas`."""

    __slots__ = ("_answer", "_reasoning")

    def __init__(self, run: RunContext, step: str, agent: str | None) -> None:
        self._answer = Deltas(run, step, agent)
        self._reasoning = Deltas(run, step, agent, reasoning=True)

    def on_delta(self, text: str, attempt: int) -> None:
        self._reasoning.finish()
        self._answer(text, attempt)

    def on_reasoning(self, text: str, attempt: int) -> None:
        self._answer.finish()
        self._reasoning(text, attempt)

    def finish(self) -> None:
        """Ends what is streaming; see `Deltas.finish`."""
        self._reasoning.finish()
        self._answer.finish()
