"""The fleet's figures as OpenTelemetry metrics (see `cadenza.telemetry.FleetMetrics`).

The figures are those ``cadenza fleet`` shows: a supervisor's capacity, runs and
steps (waiting for a worker, on workers), each connected worker's capacity and
load, and the queue's depth and the age of its oldest run. They are
asynchronous instruments: a supervisor's beat (``api/_roll.py``, every second at
most) hands over its row and the queue it read; the SDK's reader asks for them
when it exports, and is given the last ones handed over, without waiting on the
store.

This module imports ``opentelemetry``; `cadenza.telemetry` imports it only when
telemetry is switched on, so the core package never needs the extra.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from cadenza.store import QueueDepth, SupervisorRow

__all__ = ["METRICS", "PRIORITIES_KEPT", "FleetMetrics"]

METRICS: Final = {
    "cadenza.queue.depth": ("{run}", "Queued runs, by priority (cadenza.queue.priority)"),
    "cadenza.queue.oldest_age": ("s", "Seconds the oldest queued run has waited"),
    "cadenza.supervisor.capacity": ("{run}", "Runs a supervisor drives at most"),
    "cadenza.supervisor.runs": ("{run}", "Runs a supervisor drives now"),
    "cadenza.supervisor.steps.waiting": ("{step}", "A supervisor's steps waiting for a worker"),
    "cadenza.supervisor.steps.running": ("{step}", "A supervisor's steps on workers now"),
    "cadenza.worker.capacity": ("{step}", "Steps a worker takes at once from a supervisor"),
    "cadenza.worker.in_flight": ("{step}", "A supervisor's steps on a worker now"),
}
"""Each metric's name, with its unit and description (docs/deploying.md lists them)."""

PRIORITIES_KEPT: Final = 64
"""Priorities remembered to report as 0 once their last run leaves the queue: a
series that stops at its last count would say those runs still wait."""

_SUPERVISOR: Final = "cadenza.supervisor.id"
_WORKER: Final = "cadenza.worker.name"
_PRIORITY: Final = "cadenza.queue.priority"

Figures = Callable[[], Iterable[Observation]]


class FleetMetrics:
    """The fleet's gauges on one meter; fed by the supervisors of this process.

    Made by `cadenza.telemetry.OpenTelemetry.fleet_metrics`, once per telemetry
    object; `cadenza.Runtime` feeds it when it supervises.
    """

    def __init__(self, meter: Meter) -> None:
        self._supervisors: dict[str, SupervisorRow] = {}
        self._queue: QueueDepth | None = None
        self._priorities: dict[int, None] = {}  # in the order seen, oldest forgotten first
        sources: dict[str, Figures] = {
            "cadenza.queue.depth": self._depth,
            "cadenza.queue.oldest_age": self._age,
            "cadenza.supervisor.capacity": lambda: self._each(lambda row: row.capacity),
            "cadenza.supervisor.runs": lambda: self._each(lambda row: row.runs),
            "cadenza.supervisor.steps.waiting": lambda: self._each(lambda row: row.waiting),
            "cadenza.supervisor.steps.running": lambda: self._each(lambda row: row.running),
            "cadenza.worker.capacity": lambda: self._workers(in_flight=False),
            "cadenza.worker.in_flight": lambda: self._workers(in_flight=True),
        }
        for name, figures in sources.items():
            unit, description = METRICS[name]
            callbacks = [_callback(figures)]
            if name == "cadenza.queue.oldest_age":  # an age does not add up across series
                meter.create_observable_gauge(name, callbacks, unit, description)
            else:  # counts of things: summed across supervisors, workers, priorities
                meter.create_observable_up_down_counter(name, callbacks, unit, description)

    def observe_supervisor(self, row: SupervisorRow) -> None:
        """Keeps ``row`` as its supervisor's figures until the next."""
        self._supervisors[row.supervisor_id] = row

    def forget_supervisor(self, supervisor_id: str) -> None:
        """Drops a supervisor that left: its series end."""
        self._supervisors.pop(supervisor_id, None)

    def observe_queue(self, queue: QueueDepth) -> None:
        """Keeps ``queue`` as the queue's figures until the next."""
        self._queue = queue
        for priority in queue.by_priority:
            self._priorities.pop(priority, None)
            self._priorities[priority] = None
        while len(self._priorities) > PRIORITIES_KEPT:
            del self._priorities[next(iter(self._priorities))]

    def _depth(self) -> Iterable[Observation]:
        if self._queue is None:
            return []
        counts = dict.fromkeys(self._priorities, 0) | self._queue.by_priority
        if not counts:
            counts = {0: 0}  # an empty queue is a depth of 0, not no figure
        return [Observation(runs, {_PRIORITY: priority}) for priority, runs in counts.items()]

    def _age(self) -> Iterable[Observation]:
        return [] if self._queue is None else [Observation(self._queue.oldest_age)]

    def _each(self, figure: Callable[[SupervisorRow], int | None]) -> Iterable[Observation]:
        return [
            Observation(value, {_SUPERVISOR: row.supervisor_id})
            for row in self._supervisors.values()
            if (value := figure(row)) is not None
        ]

    def _workers(self, *, in_flight: bool) -> Iterable[Observation]:
        return [
            Observation(
                worker.in_flight if in_flight else worker.capacity,
                {_SUPERVISOR: row.supervisor_id, _WORKER: worker.name},
            )
            for row in self._supervisors.values()
            for worker in row.pool
        ]


def _callback(figures: Figures) -> Callable[[CallbackOptions], Iterable[Observation]]:
    """The SDK's callback for ``figures`` (it passes options they do not need)."""

    def callback(options: CallbackOptions) -> Iterable[Observation]:
        return figures()

    return callback
