"""Fixtures for the remote-worker tests: real worker processes.

Workers are real ``cadenza worker`` subprocesses on 127.0.0.1; nothing waits on
the wall clock: tests await a condition on the events a `Sink` collects
(tests/_helpers.py), with a generous deadline that only a hang would reach.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._helpers import CLI

WAIT_FOR_GATE = (
    # A command's wait for the test's gate file, given up after about 30 s so that a
    # failed test leaves no loop behind (the workload polls; the test never sleeps).
    'n=0; while [ ! -e "$GATE" ] && [ $n -lt 1500 ]; do sleep 0.02; n=$((n+1)); done'
)


ECHO_EACH = """
name: echo-each
inputs:
  items: {type: array}
steps:
  - id: each
    command: 'echo "$ITEM"'
    env: {ITEM: "{{ item }}"}
    loop: {forEach: "inputs.items"}
"""
"""One command step per item of the input ``items``, each echoing its item."""

SpawnWorker = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def spawn_worker(tmp_path: Path) -> Iterator[SpawnWorker]:
    """Starts ``cadenza worker`` processes; every one is gone when the test ends."""
    processes: list[subprocess.Popen[bytes]] = []

    def spawn(endpoint: str, name: str, *options: str, **kwargs: Any) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"worker-{name}.log").open("wb")
        process = subprocess.Popen(
            [*CLI, "worker", "--connect", endpoint, "--name", name, *options],
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd=tmp_path,
            **kwargs,
        )
        log.close()
        processes.append(process)
        return process

    yield spawn
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
        process.wait()


def worker_names(events: list[Any], kind: str) -> set[str]:
    """The workers named by dispatcher events of one type."""
    return {event.worker for event in events if event.type == kind and event.worker}
