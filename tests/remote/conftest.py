"""Fixtures for the remote-worker tests: real worker processes, and waiting on events.

Workers are real ``cadenza worker`` subprocesses on 127.0.0.1; nothing waits on
the wall clock: tests await a condition on the events they collect, with a
generous deadline that only a hang would reach.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

import anyio
import pytest

T = TypeVar("T")

CLI = (sys.executable, "-m", "cadenza")

WAIT_FOR_GATE = (
    # A command's wait for the test's gate file, given up after about 30 s so that a
    # failed test leaves no loop behind (the workload polls; the test never sleeps).
    'n=0; while [ ! -e "$GATE" ] && [ $n -lt 1500 ]; do sleep 0.02; n=$((n+1)); done'
)

DEADLINE = 30.0
"""Seconds a condition may take before the test fails as hung."""


class Watch(Generic[T]):
    """Collects what a sink is given; `wait_for` waits until the collection satisfies a test."""

    def __init__(self) -> None:
        self.items: list[T] = []
        self._waiters: list[asyncio.Future[None]] = []

    def __call__(self, item: T) -> None:
        self.items.append(item)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_for(self, condition: Callable[[list[T]], bool], what: str = "") -> None:
        """Returns once ``condition(items)`` holds; fails the test after `DEADLINE`."""
        with anyio.fail_after(DEADLINE):
            while not condition(self.items):
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                await waiter


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
