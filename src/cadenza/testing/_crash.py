"""``CrashHarness``: kill a real ``cadenza`` process with SIGKILL, resume it, compare.

Durability claims are only as good as the crashes they survive, so this
harness makes real ones: it runs ``cadenza run`` in a child process with a
failpoint armed (``cadenza.kernel`` failpoints: after N events, in the store's
transaction, at step boundaries), lets the process kill itself with SIGKILL
there, runs ``cadenza resume`` (optionally killed again), and compares the
final result with a golden, uninterrupted run::

    harness = CrashHarness("flow.yaml", directory=tmp_path, environ=server.environ())
    golden = harness.golden()
    outcome = harness.crash(KillPoint.after_events(40))
    assert outcome.killed and not compare_results(golden, outcome.result)

Children are forked from a zygote process that has imported Cadenza once
(``launcher="fork"``, a few milliseconds a start; see ``_zygote.py``), or
started as ``python -m cadenza`` with ``CADENZA_FAILPOINT`` in their
environment (``launcher="exec"``, the way a user runs it, about 0.5 s). Use the
harness as a context manager (or call `CrashHarness.close`) to stop the zygote.
It is synchronous: call it from plain tests or a worker thread, not from inside
a running event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

import msgspec

from cadenza.protocols import Event, RunResult

from ._crash_compare import compare_results, restart_to_step

__all__ = ["CrashHarness", "CrashOutcome", "KillPoint", "ProcessOutcome", "compare_results"]

_decode_result = msgspec.json.Decoder(RunResult).decode


@dataclass(frozen=True, slots=True)
class KillPoint:
    """Where a child process kills itself: a failpoint and how many passes it waits.

    Attributes:
        failpoint: ``NAME:COUNT`` as ``CADENZA_FAILPOINT`` takes it (``event:40``).
    """

    failpoint: str

    @classmethod
    def after_events(cls, count: int) -> KillPoint:
        """Right after the process emits its ``count``-th event (before it is durable)."""
        return cls(f"event:{count}")

    @classmethod
    def at(cls, name: str, count: int = 1) -> KillPoint:
        """At the ``count``-th pass of the failpoint ``name`` (``store.after_commit``...)."""
        return cls(f"{name}:{count}")

    def __str__(self) -> str:
        return self.failpoint


@dataclass(frozen=True, slots=True)
class ProcessOutcome:
    """How one ``cadenza`` process ended.

    Attributes:
        exit_code: Its exit code; ``-9`` when SIGKILL ended it.
        result: The result JSON it printed, when it finished.
        stderr: What it wrote to stderr.
        started: When it was launched (epoch seconds).
    """

    exit_code: int
    result: RunResult | None
    stderr: str
    started: float

    @property
    def killed(self) -> bool:
        """Whether SIGKILL ended it."""
        return self.exit_code == -signal.SIGKILL


@dataclass(frozen=True, slots=True)
class CrashOutcome:
    """One crash test: the kills, the final result, and how the restarts went.

    Attributes:
        run_id: The run's id in the harness's store.
        kills: How many of the processes were killed (the failpoint may not be reached).
        result: The result of the last ``resume`` (or of the run, if never killed).
        restarts: Per resume that ran: seconds from its launch to its first new step
            (None when it had no step left to start).
        processes: Every process, in order.
    """

    run_id: str
    kills: int
    result: RunResult
    restarts: list[float | None] = field(default_factory=list)
    processes: list[ProcessOutcome] = field(default_factory=list)


class _Zygote:
    """The harness's end of a ``_zygote`` process (started on first use)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None

    def launch(self, request: dict[str, Any], timeout: float) -> int:
        """Forks one child for ``request``; its exit status (-9: SIGKILL).

        Raises:
            AssertionError: It ran longer than ``timeout`` (it is killed).
        """
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cadenza.testing._zygote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        process = self.process
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        pid = json.loads(process.stdout.readline())["pid"]
        ready, _, _ = select.select([process.stdout], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            process.stdout.readline()
            raise AssertionError(f"cadenza {' '.join(request['argv'])} took over {timeout} s")
        return int(json.loads(process.stdout.readline())["status"])

    def close(self) -> None:
        """Ends the zygote (closing its stdin is its signal to exit)."""
        if self.process is not None:
            assert self.process.stdin is not None
            assert self.process.stdout is not None
            self.process.stdin.close()
            self.process.wait()
            self.process.stdout.close()
            self.process = None


class CrashHarness:
    """Runs, kills and resumes one workflow in child processes, against one store.

    Args:
        workflow: The workflow file.
        directory: Where the processes' output files go, and the store unless ``store``.
        environ: Extra environment for the children (a model server's URL...).
        inputs: The run's inputs (``--input k=JSON``).
        launcher: ``fork`` (fast) or ``exec`` (``python -m cadenza``).
        timeout: Seconds a child may take before it is killed and the test fails.
        store: The run store (``--store``): a SQLite path or a ``postgresql://``
            URL; default ``directory/runs.db``.
    """

    def __init__(
        self,
        workflow: str | os.PathLike[str],
        *,
        directory: str | os.PathLike[str],
        environ: Mapping[str, str] | None = None,
        inputs: Mapping[str, Any] | None = None,
        launcher: Literal["fork", "exec"] = "fork",
        timeout: float = 60.0,
        store: str | os.PathLike[str] | None = None,
    ) -> None:
        self.workflow = Path(workflow).resolve()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        from cadenza.store import is_postgres_url

        self.store: Path | str = self.directory / "runs.db"
        if store is not None:
            self.store = store if isinstance(store, str) and is_postgres_url(store) else Path(store)
        self.environ = dict(environ or {})
        self.inputs = dict(inputs or {})
        self.launcher = launcher
        self.timeout = timeout
        self._serial = 0
        self._zygote = _Zygote()

    def close(self) -> None:
        """Stops the process children are forked from."""
        self._zygote.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run(self, run_id: str, *, kill: KillPoint | None = None) -> ProcessOutcome:
        """``cadenza run`` under ``run_id``, killed at ``kill`` if it gets there."""
        inputs = [f"--input={k}={msgspec.json.encode(v).decode()}" for k, v in self.inputs.items()]
        argv = ["run", str(self.workflow), "--run-id", run_id, *inputs]
        return self._launch(argv, kill)

    def resume(self, run_id: str, *, kill: KillPoint | None = None) -> ProcessOutcome:
        """``cadenza resume run_id``, killed at ``kill`` if it gets there."""
        return self._launch(["resume", run_id], kill)

    def golden(self, run_id: str = "golden") -> RunResult:
        """An uninterrupted run: what every crashed run must come back to.

        Raises:
            AssertionError: It did not finish.
        """
        outcome = self.run(run_id)
        assert outcome.result is not None, f"the golden run did not finish: {outcome.stderr}"
        return outcome.result

    def crash(self, kill: KillPoint, *, then: Sequence[KillPoint] = ()) -> CrashOutcome:
        """Runs killed at ``kill``, resumes killed at each of ``then``, resumes to the end.

        Raises:
            AssertionError: A process failed in another way, or the last resume did
                not finish.
        """
        self._serial += 1
        run_id = f"crash-{self._serial}"
        processes = [self.run(run_id, kill=kill)]
        restarts: list[float | None] = []
        for point in [*then, None]:
            if not processes[-1].killed:
                break
            processes.append(self.resume(run_id, kill=point))
            restarts.append(self.restart_time(run_id, processes[-1]))
        for process in processes:
            assert process.killed or process.result is not None, process.stderr
        last = processes[-1].result
        assert last is not None, f"run {run_id} did not finish: {processes[-1].stderr}"
        kills = sum(process.killed for process in processes)
        return CrashOutcome(run_id, kills, last, restarts, processes)

    def restart_time(self, run_id: str, resumed: ProcessOutcome) -> float | None:
        """Seconds from launching ``resumed`` (a resume of ``run_id``) to its first new step.

        None when that resume started no step (it was killed first, or had none left).
        """
        return restart_to_step(self._events(run_id), resumed.started)

    def _events(self, run_id: str) -> list[Event]:
        from cadenza.store import make_store

        async def read() -> list[Event]:
            store = make_store(self.store)
            await store.open()
            try:
                return await store.events(run_id)
            finally:
                await store.close()

        return asyncio.run(read())

    def _launch(self, argv: list[str], kill: KillPoint | None) -> ProcessOutcome:
        argv = [*argv, "--store", str(self.store), "--json"]
        self._serial += 1
        out = str(self.directory / f"process-{self._serial}")
        started = time.time()
        if self.launcher == "fork":
            request = {
                "argv": argv,
                "environ": self.environ,
                "failpoint": kill.failpoint if kill is not None else None,
                "out": out,
            }
            code = self._zygote.launch(request, self.timeout)
        else:
            environ = {**os.environ, **self.environ}
            environ.pop("CADENZA_FAILPOINT", None)
            if kill is not None:
                environ["CADENZA_FAILPOINT"] = kill.failpoint
            with open(out + ".out", "wb") as stdout, open(out + ".err", "wb") as stderr:
                done = subprocess.run(
                    [sys.executable, "-m", "cadenza", *argv],
                    stdout=stdout,
                    stderr=stderr,
                    env=environ,
                    timeout=self.timeout,
                    check=False,
                )
            code = done.returncode
        text = Path(out + ".out").read_bytes().strip()
        result = _decode_result(text.splitlines()[-1]) if text and code in (0, 1, 3) else None
        return ProcessOutcome(code, result, Path(out + ".err").read_text(), started)
