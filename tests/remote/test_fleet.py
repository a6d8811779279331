"""A forEach over a fleet of worker processes that loses two of them mid-run."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

from cadenza import Runtime
from cadenza.protocols import Event, EventType
from cadenza.remote import Dispatcher, WorkerEvent
from tests._helpers import Sink

from .conftest import WAIT_FOR_GATE, SpawnWorker, worker_names

FLEET = """
name: fleet
options: {maxConcurrency: 16}
inputs:
  items: {type: array}
  gate: {type: string}
  log: {type: string}
steps:
  - id: each
    command: 'wait_for_gate; echo "$ITEM" >> "$LOG"; echo "$ITEM"'
    env:
      ITEM: "{{ item }}"
      GATE: "{{ inputs.gate }}"
      LOG: "{{ inputs.log }}"
    loop:
      forEach: "inputs.items"
      maxConcurrency: 16
"""

FLEET = FLEET.replace("wait_for_gate", WAIT_FOR_GATE)
ITEMS = 200
CONCURRENCY = 4


def _dispatched(events: list[Event]) -> Counter[str]:
    dispatched = (e for e in events if e.type == EventType.STEP_DISPATCHED)
    return Counter(e.data["worker"] for e in dispatched if e.data)


async def test_each_item_completes_once_when_workers_are_killed_and_stopped(
    tmp_path: Path, spawn_worker: SpawnWorker
) -> None:
    """SIGKILL one worker and SIGSTOP/SIGCONT another mid-run: every item completes exactly
    once, only the steps the lost workers held run again, and the late results are refused."""
    flow = tmp_path / "fleet.yaml"
    flow.write_text(FLEET)
    gate, log = tmp_path / "gate", tmp_path / "executions.log"
    dispatcher = Dispatcher("tcp://127.0.0.1:*", heartbeat=0.1, liveness=5)
    workers: Sink[WorkerEvent] = Sink()
    dispatcher.subscribe(workers)
    run_events: Sink[Event] = Sink()
    async with Runtime(workers=dispatcher) as runtime:
        names = ("killed", "stopped", "steady")
        processes = {
            name: spawn_worker(dispatcher.endpoint, name, "--concurrency", str(CONCURRENCY))
            for name in names
        }
        await workers.until(lambda e: worker_names(e, "worker_connected") == set(names))
        handle = await runtime.start(
            flow,
            inputs={"items": list(range(ITEMS)), "gate": str(gate), "log": str(log)},
            on_event=run_events,
        )
        # Every worker holds a full load of steps, all waiting behind the gate.
        await run_events.until(lambda e: _dispatched(e) == dict.fromkeys(names, CONCURRENCY))
        os.kill(processes["killed"].pid, signal.SIGKILL)
        os.kill(processes["stopped"].pid, signal.SIGSTOP)
        await workers.until(lambda e: worker_names(e, "worker_lost") == {"killed", "stopped"})
        losses = [e for e in workers.items if e.type == "worker_lost"]
        lost = {e.worker: e.data["inFlight"] for e in losses if e.data}
        gate.touch()
        os.kill(processes["stopped"].pid, signal.SIGCONT)
        result = await handle.result()
        # The stopped worker's results for the steps it lost arrive late, and are refused.
        await workers.until(
            lambda e: sum(x.type == "result_rejected" for x in e) >= lost["stopped"]
        )
        statistics = dispatcher.statistics()

    assert result.status == "completed", result.error
    assert lost == {"killed": CONCURRENCY, "stopped": CONCURRENCY}
    for index in range(ITEMS):
        record = result.steps[f"each[{index}]"]
        assert record.status == "completed"
        assert record.content == f"{index}\n"
        assert record.worker in ("stopped", "steady")
    ends = Counter(e.step_id for e in run_events.items if e.type == EventType.STEP_END)
    assert all(ends[f"each[{index}]"] == 1 for index in range(ITEMS))
    requeued = [e for e in run_events.items if e.type == EventType.STEP_REQUEUED]
    assert len(requeued) == sum(lost.values())
    assert {e.data["dispatch"] for e in requeued if e.data} == {2}
    executions = log.read_text().split()
    assert set(executions) == {str(index) for index in range(ITEMS)}
    assert len(executions) - ITEMS <= sum(lost.values())
    assert statistics.redispatched == sum(lost.values())
    assert statistics.rejected_results >= lost["stopped"]
    rejected = [e for e in workers.items if e.type == "result_rejected"]
    assert {e.worker for e in rejected} == {"stopped"}
    assert all(e.data is not None and e.data["attempt"] == 1 for e in rejected)
