"""A worker's life: steps wait for it, it drains on SIGTERM, its steps time out and cancel."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio

from cadenza import Runtime
from cadenza.protocols import Event, EventType
from cadenza.remote import Dispatcher, WorkerEvent
from tests._helpers import Sink

from .conftest import WAIT_FOR_GATE, SpawnWorker, worker_names

GATED = """
name: gated
options: {maxConcurrency: 8}
inputs:
  items: {type: array}
  gate: {type: string}
steps:
  - id: each
    command: 'wait_for_gate; echo "$ITEM"'
    env: {ITEM: "{{ item }}", GATE: "{{ inputs.gate }}"}
    loop: {forEach: "inputs.items", maxConcurrency: 8}
""".replace("wait_for_gate", WAIT_FOR_GATE)

ANNOUNCED = """
name: announced
options: {maxConcurrency: 8}
inputs:
  items: {type: array}
  gate: {type: string}
  started: {type: string}
steps:
  - id: each
    command: 'echo "$ITEM" > "$STARTED"; wait_for_gate; echo "$ITEM"'
    env: {ITEM: "{{ item }}", GATE: "{{ inputs.gate }}", STARTED: "{{ inputs.started }}"}
    loop: {forEach: "inputs.items", maxConcurrency: 8}
""".replace("wait_for_gate", WAIT_FOR_GATE)
"""GATED, and each command says on the FIFO ``started`` that it runs: a test can wait
until a worker has taken its jobs (a dispatch only says the supervisor sent them)."""


def read_lines(descriptor: int, count: int) -> list[str]:
    """Blocks until ``count`` lines have come through the FIFO open at ``descriptor``."""
    data = b""
    while data.count(b"\n") < count:
        data += os.read(descriptor, 4096)
    return data.decode().splitlines()


async def test_steps_wait_for_a_worker_and_say_so(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    """With no worker connected a step is queued, not failed, with a step_queued event."""
    flow = tmp_path / "flow.yaml"
    flow.write_text("name: patient\nsteps:\n  - id: one\n    command: 'echo late'\n")
    events: Sink[Event] = Sink()
    async with Runtime(workers=Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)) as runtime:
        assert runtime.workers is not None
        handle = await runtime.start(flow, on_event=events)
        await events.until(lambda e: any(x.type == EventType.STEP_QUEUED for x in e))
        spawn_worker(runtime.workers.endpoint, "late-comer")
        result = await handle.result()
    assert result.status == "completed", result.error
    assert result.steps["one"].content == "late\n"
    assert result.steps["one"].worker == "late-comer"
    end = next(e for e in events.items if e.type == EventType.STEP_END)
    assert end.data == {"worker": "late-comer"}


async def test_sigterm_drains_the_worker(tmp_path: Path, spawn_worker: SpawnWorker) -> None:
    """SIGTERM: the worker takes no more steps, finishes those it holds, leaves, exits 0."""
    flow, gate, started = tmp_path / "flow.yaml", tmp_path / "gate", tmp_path / "started"
    flow.write_text(ANNOUNCED)
    os.mkfifo(started)
    # Open read-write for the whole test: writers come and go without an end of file,
    # and a later step's write never blocks for want of a reader.
    announcements = os.open(started, os.O_RDWR)
    # A generous heartbeat: on a loaded machine a short liveness window could declare
    # the draining worker lost and re-dispatch its steps, which this test forbids.
    dispatcher = Dispatcher("tcp://127.0.0.1:*", heartbeat=1.0)
    workers: Sink[WorkerEvent] = Sink()
    dispatcher.subscribe(workers)
    run_events: Sink[Event] = Sink()
    try:
        async with Runtime(workers=dispatcher) as runtime:
            first = spawn_worker(dispatcher.endpoint, "first", "--concurrency", "2")
            await workers.until(lambda e: "first" in worker_names(e, "worker_connected"))
            inputs = {"items": [0, 1, 2, 3], "gate": str(gate), "started": str(started)}
            handle = await runtime.start(flow, inputs=inputs, on_event=run_events)
            # Not just dispatched: both commands run on the worker, waiting for the gate.
            await anyio.to_thread.run_sync(read_lines, announcements, 2)
            first.send_signal(signal.SIGTERM)
            await workers.until(lambda e: any(x.type == "ready" for x in e))
            gate.touch()
            await workers.until(lambda e: "first" in worker_names(e, "worker_left"))
            spawn_worker(dispatcher.endpoint, "second", "--concurrency", "2")
            result = await handle.result()
            exit_code = first.wait()
            statistics = dispatcher.statistics()
    finally:
        os.close(announcements)

    assert result.status == "completed", result.error
    ran = {address: record.worker for address, record in result.steps.items() if "[" in address}
    assert sorted(str(worker) for worker in ran.values()) == ["first", "first", "second", "second"]
    assert exit_code == 0
    assert statistics.redispatched == 0
    assert statistics.accepted == 4


async def test_a_remote_step_times_out_on_its_worker(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    """A step's timeout runs on the worker: the command is stopped and the step fails as Timeout;
    the worker gets its credit back and runs the next step."""
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "name: slow\noptions: {onStepFailure: skip-dependents}\nsteps:\n"
        "  - id: slow\n    command: 'sleep 30'\n    timeout: 1s\n    onError: continue\n"
        "  - id: next\n    dependsOn: [slow]\n    command: 'echo next'\n"
    )
    async with Runtime(workers=Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)) as runtime:
        assert runtime.workers is not None
        spawn_worker(runtime.workers.endpoint, "only", "--concurrency", "1")
        result = await runtime.run(flow)
        statistics = runtime.workers.statistics()
    slow = result.steps["slow"]
    assert slow.status == "failed"
    assert slow.error is not None
    assert (slow.error.type, slow.error.message) == ("Timeout", "timed out after 1s")
    assert result.steps["next"].content == "next\n"
    assert statistics.in_flight == 0


async def test_cancelling_a_run_cancels_its_remote_steps(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    """A cancelled run records its remote step as cancelled; the worker frees the slot."""
    flow, quick = tmp_path / "flow.yaml", tmp_path / "quick.yaml"
    flow.write_text("name: long\nsteps:\n  - id: long\n    command: 'sleep 30'\n")
    quick.write_text("name: quick\nsteps:\n  - id: quick\n    command: ':'\n")
    events: Sink[Event] = Sink()
    async with Runtime(workers=Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)) as runtime:
        assert runtime.workers is not None
        spawn_worker(runtime.workers.endpoint, "only", "--concurrency", "1")
        handle = await runtime.start(flow, on_event=events)
        await events.until(lambda e: any(x.type == EventType.STEP_DISPATCHED for x in e))
        handle.cancel("enough")
        result = await handle.result()
        after = await runtime.run(quick)  # one slot: it is free again
    assert result.status == "cancelled"
    assert result.steps["long"].status == "cancelled"
    assert after.steps["quick"].worker == "only"


async def test_a_worker_stopped_at_once_hands_its_steps_back(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    """SIGINT: the worker cancels what it holds and leaves; those steps go to another worker."""
    flow, gate = tmp_path / "flow.yaml", tmp_path / "gate"
    flow.write_text(GATED)
    dispatcher = Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)
    workers: Sink[WorkerEvent] = Sink()
    dispatcher.subscribe(workers)
    run_events: Sink[Event] = Sink()
    async with Runtime(workers=dispatcher) as runtime:
        quitter = spawn_worker(dispatcher.endpoint, "quitter", "--concurrency", "2")
        await workers.until(lambda e: "quitter" in worker_names(e, "worker_connected"))
        handle = await runtime.start(
            flow, inputs={"items": [0, 1], "gate": str(gate)}, on_event=run_events
        )
        await run_events.until(lambda e: sum(x.type == EventType.STEP_DISPATCHED for x in e) == 2)
        quitter.send_signal(signal.SIGINT)
        await workers.until(lambda e: "quitter" in worker_names(e, "worker_left"))
        gate.touch()
        spawn_worker(dispatcher.endpoint, "stayer")
        result = await handle.result()
    assert result.status == "completed", result.error
    assert {r.worker for a, r in result.steps.items() if "[" in a} == {"stayer"}
    left = next(e for e in workers.items if e.type == "worker_left")
    assert left.data == {"inFlight": 2}
    assert quitter.wait() == 0
