"""Comparing a resumed run with a golden one, and timing a restart.

`compare_results` (from ``cadenza.api``, where ``cadenza replay`` uses it too)
says how two runs' results differ as a user would see it; `restart_to_step`
reads a resume's restart time from the run's events.
"""

from __future__ import annotations

from datetime import datetime

from cadenza.api import compare_results
from cadenza.protocols import Event, EventType

__all__ = ["compare_results", "restart_to_step"]


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def restart_to_step(events: list[Event], launched: float) -> float | None:
    """Seconds from a resume's launch to its first new step, from the run's events.

    The first ``step_start`` after that resume's ``run_resumed`` is new work: a
    replay re-states nothing in the log. None when the resume started no step.
    """
    resumed = False
    for event in events:
        if not resumed:
            # Timestamps have millisecond precision: allow for the rounding.
            resumed = (
                event.type == EventType.RUN_RESUMED and _epoch(event.timestamp) >= launched - 0.002
            )
        elif event.type == EventType.STEP_START:
            return max(0.0, _epoch(event.timestamp) - launched)
    return None
