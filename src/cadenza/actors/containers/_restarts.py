"""``options.supervisor``: OTP's restart rules for the steps of one list.

The run's actors live under one kernel `Supervisor`, whose restarts are for
actors that crash. A step that fails does not crash: it records its failure and
reports it. So each list of steps (the workflow's, a loop iteration's, a forEach
item's, an include's) is supervised by its own `DagController`, with the rules
an Erlang or Akka programmer expects:

* ``one_for_one``: the failed step runs again from its start;
* ``one_for_all``: every other step of the list that is running is stopped and
  runs again with it;
* ``rest_for_one``: those of them that started after the failed one.

A restart comes after the step's own ``retries`` (which re-run it in place,
touching nothing else) are spent, and never for a step whose failure is
tolerated (``onError: continue``). Steps that have finished keep their records
(their dependents may have read them) and steps that have not started are left
alone. The kernel's `Intensity` counts the list's restarts: more than
``maxRestarts`` within ``within`` (absent: in the list's whole life) and the
supervisor gives up, as OTP's escalates: what is running in the list is
cancelled, nothing new starts, and the list fails with a ``SupervisorEscalation``
error naming the step and the count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from cadenza.kernel import Intensity
from cadenza.protocols import ErrorInfo, StepRecord, StepRestart
from cadenza.workflow import Supervision, parse_duration

__all__ = ["Restarts"]


class Restarts:
    """The restart policy of one list of steps, and what it has done so far."""

    __slots__ = ("_intensity", "_started", "count", "spec", "stopping", "within")

    def __init__(self, spec: Supervision) -> None:
        self.spec = spec
        self.within = parse_duration(spec.within) if spec.within else math.inf
        self._intensity = Intensity(spec.max_restarts, self.within)
        self._started: dict[str, int] = {}
        self.count = 0
        """Restarts so far (each failure that was restarted counts once, as in OTP)."""
        self.stopping: dict[str, str] = {}
        """A step stopped to run again -> the step whose failure stopped it."""

    def started(self, step_id: str) -> None:
        """Notes the order steps first started in (a restarted one keeps its place)."""
        self._started.setdefault(step_id, len(self._started))

    def admit(self, now: float) -> int | None:
        """Counts a restart at ``now``: None if it may go ahead, else the restarts it would
        make in the window, one too many (the supervisor gives up)."""
        refused = self._intensity.admit(now)
        if refused is None:
            self.count += 1
        return refused

    def taken_along(self, failed: str, running: Iterable[str]) -> list[str]:
        """The running steps a restart of ``failed`` stops and runs again, by the strategy."""
        strategy = self.spec.strategy
        if strategy == "one_for_one":
            return []
        first = self._started.get(failed, -1)
        return [
            step_id
            for step_id in running
            if step_id != failed
            and step_id not in self.stopping
            and (strategy == "one_for_all" or self._started.get(step_id, -1) > first)
        ]

    def event(self, cause: str) -> StepRestart:
        """The data of the ``step_restart`` event of a step run again because ``cause`` failed."""
        return StepRestart(
            strategy=self.spec.strategy,
            cause=cause,
            restart=self.count,
            max_restarts=self.spec.max_restarts,
        )

    def escalation(
        self, step_id: str, address: str, record: StepRecord, restarts: int
    ) -> ErrorInfo:
        """The error a list fails with when its supervisor gives up on ``step_id``.

        ``restarts`` is what `admit` refused: the count the restart would have made.
        """
        window = f"within {self.spec.within}" if self.spec.within else "in this list of steps"
        cause = f" ({record.error.type}: {record.error.message})" if record.error else ""
        return ErrorInfo(
            type="SupervisorEscalation",
            message=(
                f"step {step_id!r} failed{cause}; restarting it would make {restarts} restarts"
                f" {window}, more than maxRestarts={self.spec.max_restarts}, so the supervisor"
                " gave up"
            ),
            address=address,
        )
