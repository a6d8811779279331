"""The result JSON of a run (SPEC section 8) as msgspec Structs."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

__all__ = [
    "FINISHED",
    "AgentUsage",
    "ErrorInfo",
    "GraphSummary",
    "LoopSummary",
    "MessageRecord",
    "RunResult",
    "RunStatus",
    "StepRecord",
    "StepStatus",
    "Usage",
]

StepStatus = Literal["pending", "running", "completed", "failed", "skipped", "cancelled", "waiting"]
RunStatus = Literal["queued", "running", "completed", "failed", "cancelled", "waiting"]

FINISHED: frozenset[RunStatus] = frozenset(("completed", "failed", "cancelled"))
"""The statuses of a run that has ended for good: its result never changes again."""


class _Record(msgspec.Struct, frozen=True, rename="camel"):
    """Base: immutable, camelCase on the wire."""


class ErrorInfo(_Record, frozen=True):
    """Why something failed: the error's type name, a message, and where."""

    type: str
    message: str
    address: str | None = None


# gc=False, as for `Event`: a run keeps a record per address, and a record holds a
# step's plain output, which cannot refer back to the record.
class StepRecord(_Record, frozen=True, gc=False):
    """The outcome of one executed address (a step, iteration or container).

    ``content`` is the step's text; ``result`` its structured value (a command's
    ``{exitCode, stdout, stderr}``, a handler's returned dict, an agent's
    ``submit_result`` arguments) or None. ``worker`` names the remote worker
    that ran it (None: run in the supervisor's process).
    """

    status: StepStatus
    content: str | None = None
    result: Any = None
    attempts: int = 0
    duration_ms: int = 0
    error: ErrorInfo | None = None
    worker: str | None = None


class LoopSummary(_Record, frozen=True):
    """How a loop ended."""

    iterations: int
    termination_reason: str
    flagged: bool = False


class GraphSummary(_Record, frozen=True):
    """The states a graph visited and why it stopped."""

    path: list[str]
    termination_reason: str


class MessageRecord(_Record, frozen=True):
    """A message carried between agents by the coordinator."""

    from_: str = msgspec.field(name="from")
    to: str
    text: str
    kind: str | None = None


class AgentUsage(_Record, frozen=True):
    """Token usage, LLM calls and their cost of one agent over a whole run."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    cost: float = 0.0


class Usage(_Record, frozen=True):
    """Token usage and LLM calls of a whole run, and what they cost.

    ``cost`` is in USD, from the run's price table (docs/prices.md); a call to a
    model with no price adds nothing to it and is counted in ``unpriced_calls``.
    ``by_agent`` is the same per agent name (steps of the default agent, which
    has none, count in the run's totals only).
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    cost: float = 0.0
    unpriced_calls: int = 0
    by_agent: dict[str, AgentUsage] = {}


class RunResult(_Record, frozen=True):
    """The result JSON printed by ``cadenza run --json`` and ``cadenza runs show``."""

    run_id: str
    workflow: str
    status: RunStatus
    output: Any = None
    steps: dict[str, StepRecord] = {}
    loops: dict[str, LoopSummary] = {}
    graphs: dict[str, GraphSummary] = {}
    messages: list[MessageRecord] = []
    """The newest 1,000 messages the run carried, oldest first."""
    messages_omitted: int = 0
    """Older messages left out of ``messages`` (a flood is counted, not kept)."""
    undelivered: list[MessageRecord] = []
    """Messages no instance of their target step ever took (at most 1,000, the newest)."""
    usage: Usage = Usage()
    error: ErrorInfo | None = None
