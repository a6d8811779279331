"""A supervisor's figures as OpenTelemetry metrics: the same ``cadenza fleet`` shows.

A real supervisor (`Runtime` with ``capacity`` and remote workers) on a SQLite
file, a real ``cadenza worker`` process, and the SDK's in-memory metric reader:
the test reads what an exporter would be given.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from cadenza import Runtime
from cadenza.store import QueueDepth, SupervisorRow, WorkerLoad
from cadenza.telemetry import OpenTelemetry
from tests._helpers import CLI, eventually
from tests.conftest import WriteFlow

pytestmark = pytest.mark.timeout(180)

GATED = """
name: gated
steps:
  - id: wait
    command: 'n=0; while [ ! -e "$GATE" ] && [ $n -lt 1500 ]; do sleep 0.02; n=$((n+1)); done'
    env: {{GATE: "{gate}"}}
"""
"""One command step that waits for the test's gate file (given up after about 30 s)."""

Points = dict[str, dict[frozenset[tuple[str, Any]], float]]
"""Each metric's points: its value under each set of attributes."""


class Metrics:
    """A meter provider whose metrics the test reads back, as an exporter would."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider([self.reader])
        self.telemetry = OpenTelemetry(meter_provider=self.provider)

    def points(self) -> Points:
        data = self.reader.get_metrics_data()
        found: Points = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = {
                        frozenset((point.attributes or {}).items()): point.value  # type: ignore[union-attr]
                        for point in metric.data.data_points
                    }
        return found


def _spawn(
    cwd: Path, *argv: str, stderr: IO[bytes] | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``cadenza ARGV`` in ``cwd``; its stderr discarded unless given where."""
    where = subprocess.DEVNULL if stderr is None else stderr
    return subprocess.Popen(
        [*CLI, *argv], cwd=cwd, stdout=subprocess.DEVNULL, stderr=where, env=env
    )


@pytest.fixture
def metrics() -> Iterator[Metrics]:
    made = Metrics()
    yield made
    made.provider.shutdown()


async def test_a_supervisor_gives_its_load_its_workers_and_the_queue_as_metrics(
    tmp_path: Path, write_flow: WriteFlow, metrics: Metrics
) -> None:
    """Capacity 1, three runs submitted (priorities 5, 0, 0), one worker: the metrics
    show the supervisor's capacity and one run, one step on the worker named w1 out
    of its 2 credits, two runs queued by priority and their age; once the gate
    opens, all finish and the queue reads 0 at every priority it had."""
    gate = tmp_path / "gate"
    flow = write_flow(GATED.format(gate=gate))
    store = tmp_path / "runs.db"
    worker: subprocess.Popen[bytes] | None = None
    try:
        async with Runtime(
            store=store,
            capacity=1,
            workers="tcp://127.0.0.1:*",
            telemetry=metrics.telemetry,
            lease_ttl=3.0,
        ) as supervisor:
            assert supervisor.workers is not None
            endpoint = supervisor.workers.endpoint
            worker = _spawn(
                tmp_path, "worker", "--connect", endpoint, "--name", "w1", "--concurrency", "2"
            )
            for run_id, priority in (("first", 5), ("second", 0), ("third", None)):
                await supervisor.submit(flow, run_id=run_id, priority=priority)

            def ours(points: Points) -> frozenset[tuple[str, Any]]:
                [attributes] = points["cadenza.supervisor.runs"]
                return attributes

            async def busy() -> bool:
                points = metrics.points()
                if not points.get("cadenza.supervisor.runs"):
                    return False
                attributes = ours(points)
                worker_point = attributes | {("cadenza.worker.name", "w1")}
                return (
                    points["cadenza.supervisor.runs"][attributes] == 1
                    and points.get("cadenza.worker.in_flight", {}).get(worker_point) == 1
                    and sum(points["cadenza.queue.depth"].values()) == 2
                )

            await eventually("the supervisor's figures with a step on w1", busy)
            points = metrics.points()
            attributes = ours(points)
            [(key, supervisor_id)] = attributes
            assert key == "cadenza.supervisor.id"
            assert points["cadenza.supervisor.capacity"] == {attributes: 1}
            assert points["cadenza.supervisor.steps.running"] == {attributes: 1}
            assert points["cadenza.supervisor.steps.waiting"] == {attributes: 0}
            on_w1 = attributes | {("cadenza.worker.name", "w1")}
            assert points["cadenza.worker.capacity"] == {on_w1: 2}
            # The highest priority went first: the two of priority 0 wait (5 reads 0 if
            # the queue was counted before the supervisor took its run).
            depth = points["cadenza.queue.depth"]
            assert depth[frozenset({("cadenza.queue.priority", 0)})] == 2
            assert depth.get(frozenset({("cadenza.queue.priority", 5)}), 0) == 0
            [age] = points["cadenza.queue.oldest_age"].values()
            assert age > 0

            gate.touch()

            async def drained() -> bool:
                points = metrics.points()
                return (
                    all(value == 0 for value in points["cadenza.queue.depth"].values())
                    and points["cadenza.supervisor.runs"].get(attributes) == 0
                )

            await eventually("every run to finish and the queue to empty", drained)
            points = metrics.points()
            assert points["cadenza.queue.oldest_age"] == {frozenset(): 0}
            assert str(supervisor_id).startswith(f"{socket.gethostname()}-{os.getpid()}-")
            for run_id in ("first", "second", "third"):
                row = await supervisor.store.get_run(run_id)
                assert row is not None
                assert row.status == "completed"
        # It left: its series end with it.
        assert metrics.points().get("cadenza.supervisor.runs", {}) == {}
    finally:
        if worker is not None:
            worker.kill()
            worker.wait(timeout=30)


def test_the_gauges_follow_what_they_are_given(metrics: Metrics) -> None:
    """A priority that empties reads 0 (its series does not stop at its last count); an
    empty queue reads 0; a supervisor without capacity gives none; workers are per
    supervisor; a forgotten supervisor's series end."""
    fleet = metrics.telemetry.fleet_metrics()
    assert fleet is metrics.telemetry.fleet_metrics()  # one set of instruments
    assert metrics.points() == {}  # nothing observed: nothing said
    pool = (WorkerLoad("w1", 4, 3), WorkerLoad("w2", 2, 0))
    fleet.observe_supervisor(SupervisorRow("a", "h", 1, "tcp://h:1", 10, 3, 1, 3, pool=pool))
    fleet.observe_supervisor(SupervisorRow("b", "h", 2, None, None, 1))
    fleet.observe_queue(QueueDepth(3, {7: 1, 0: 2}, 100.0, 12.5))
    points = metrics.points()
    a, b = ({("cadenza.supervisor.id", name)} for name in "ab")
    assert points["cadenza.supervisor.capacity"] == {frozenset(a): 10}
    assert points["cadenza.supervisor.runs"] == {frozenset(a): 3, frozenset(b): 1}
    assert points["cadenza.worker.in_flight"] == {
        frozenset(a | {("cadenza.worker.name", "w1")}): 3,
        frozenset(a | {("cadenza.worker.name", "w2")}): 0,
    }
    assert points["cadenza.queue.oldest_age"] == {frozenset(): 12.5}
    fleet.observe_queue(QueueDepth(1, {0: 1}, 100.0, 13.0))
    fleet.forget_supervisor("a")
    points = metrics.points()
    assert points["cadenza.queue.depth"] == {
        frozenset({("cadenza.queue.priority", 7)}): 0,
        frozenset({("cadenza.queue.priority", 0)}): 1,
    }
    assert points["cadenza.supervisor.runs"] == {frozenset(b): 1}
    assert points.get("cadenza.worker.in_flight", {}) == {}
    fleet.observe_queue(QueueDepth())
    fleet.forget_supervisor("b")
    points = metrics.points()
    assert set(points["cadenza.queue.depth"].values()) == {0}
    assert points["cadenza.queue.oldest_age"] == {frozenset(): 0}


async def test_cadenza_otel_exports_a_supervisors_metrics(tmp_path: Path) -> None:
    """``CADENZA_OTEL=1`` with the console exporter: ``cadenza supervise`` prints its
    figures on stderr every export interval (the metrics exporter follows the traces')."""
    log = tmp_path / "supervisor.log"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CADENZA_", "OTEL_"))}
    environ |= {
        "CADENZA_OTEL": "1",
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
    }
    command = ["supervise", "--store", str(tmp_path / "runs.db"), "--capacity", "4"]
    with log.open("wb") as stderr:
        process = _spawn(tmp_path, *command, stderr=stderr, env=environ)
    try:

        async def exported() -> bool:
            text = log.read_text()
            return '"cadenza.supervisor.capacity"' in text and '"cadenza.queue.depth"' in text

        await eventually("the supervisor's metrics on stderr", exported)
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert process.returncode == 0, log.read_text()[-2000:]
    assert '"service.name": "cadenza"' in log.read_text()
