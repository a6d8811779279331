"""What a run does with each kind of leaf step: one module each, and their table.

The other half of each kind, what a document says of it, is in
`cadenza.workflow.kinds`; `leaf_work` finds a step's work by its kind's name.
A kind registered from outside Cadenza (`LeafKind`) is both halves in one.
"""

from __future__ import annotations

from typing import Final

from cadenza.actors.steps._leaf import LeafKind, LeafWork
from cadenza.workflow import step_kind

from ._agent import AgentWork
from ._command import CommandWork
from ._handler import HandlerWork
from ._tool import ToolWork

__all__ = ["leaf_work"]

_BUILT_IN: Final[dict[str, LeafWork]] = {
    "agent": AgentWork(),
    "command": CommandWork(),
    "handler": HandlerWork(),
    "tool": ToolWork(),
}
"""The work of Cadenza's own leaf kinds (``human`` has an actor of its own)."""


def leaf_work(kind: str) -> LeafWork | None:
    """The work of kind ``kind``'s steps, or None: it has none in this process."""
    work = _BUILT_IN.get(kind)
    if work is not None:
        return work
    registered = step_kind(kind)
    return registered if isinstance(registered, LeafKind) else None
