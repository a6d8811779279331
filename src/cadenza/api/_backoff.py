"""How long a runtime with takeover waits before it takes a failing run again.

A supervisor that takes a run over and then cannot record it (the store
failed its writes) gives the run back. Taking it again at the very next look,
every few seconds, is what a supervisor whose database keeps failing it must
not do: each attempt raises the run's fence and replays its log for nothing.
So each failure doubles the wait before the next attempt, from one look's
interval up to a cap, and the wait is jittered (between half of it and all of
it) so that supervisors failed by the same outage do not come back in step.
A run that ends in any other way starts again from no wait; so does one not
failed for a while (a run another process finished is forgotten that way).
"""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """Per-run waits that double at each failure, up to ``cap`` seconds, jittered.

    Args:
        base: The first wait, in seconds.
        cap: The longest wait, in seconds.
        chance: The jitter's source (a seeded one in tests).
    """

    def __init__(self, base: float, cap: float, *, chance: random.Random | None = None) -> None:
        self.base = base
        self.cap = max(cap, base)
        self._chance = chance or random.Random()
        self._failures: dict[str, tuple[int, float]] = {}  # run: (failures, not before)

    def ready(self, run_id: str, now: float) -> bool:
        """Whether the run may be taken at ``now`` (monotonic seconds)."""
        entry = self._failures.get(run_id)
        return entry is None or now >= entry[1]

    def failed(self, run_id: str, now: float) -> float:
        """Notes a failure of the run at ``now``; the seconds to wait before the next try."""
        failures = self._failures.get(run_id, (0, now))[0] + 1
        longest = min(self.cap, self.base * 2 ** (failures - 1))
        wait: float = longest / 2 + self._chance.uniform(0, longest / 2)
        self._failures[run_id] = (failures, now + wait)
        return wait

    def succeeded(self, run_id: str) -> None:
        """The run went on (or ended): its next failure waits the shortest again."""
        self._failures.pop(run_id, None)

    def forget_stale(self, now: float) -> None:
        """Forgets the runs whose wait ended over ``cap`` seconds ago: a quiet spell
        resets them, and the table stays as small as the runs failing lately."""
        stale = [run for run, (_, after) in self._failures.items() if now - after > self.cap]
        for run_id in stale:
            del self._failures[run_id]
