"""Running a ``command`` step: an async subprocess in its own process group.

A string runs under ``/bin/sh -c``; a list is exec'd as is. Values reach the
process only through the environment and stdin, never spliced into the command
line (the validator rejects templates inside ``command``). The process gets its
own session, so a timeout or cancellation kills the whole group, grandchildren
included, not just the shell.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, Process

from cadenza.actors.run import StepFailure
from cadenza.protocols import ErrorInfo

__all__ = ["CommandOutcome", "command_result", "run_command"]

OUTPUT_CAP = 10 * 1024 * 1024
"""Bytes of stdout (and of stderr) kept per command; the rest is counted, not stored."""

_KILL_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL when a command is stopped."""


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    """What a finished command produced."""

    exit_code: int
    stdout: str
    stderr: str


async def _collect(stream: ByteReceiveStream | None, sink: bytearray) -> None:
    if stream is None:
        return
    dropped = 0
    async for chunk in stream:
        room = OUTPUT_CAP - len(sink)
        if room > 0:
            sink += chunk[:room]
        dropped += max(0, len(chunk) - max(room, 0))
    if dropped:
        sink += f"\n[... {dropped} more bytes not kept]".encode()


def _kill_group(process: Process, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


async def _stop(process: Process) -> None:
    """Terminates the process group, then kills it if it does not go in time."""
    _kill_group(process, signal.SIGTERM)
    with anyio.move_on_after(_KILL_GRACE):
        await process.wait()
    # Whatever of the group outlived the grace period (or ignored SIGTERM) goes now.
    _kill_group(process, signal.SIGKILL)
    await process.wait()


async def run_command(
    command: str | list[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    stdin: str | None,
) -> CommandOutcome:
    """Runs a command to completion and returns its exit code and output.

    On cancellation (a timeout, an aborted run) the whole process group is
    terminated and reaped before the cancellation propagates.

    Raises:
        OSError: The program cannot be started (not found, not executable, bad cwd).
    """
    argv: str | list[str] = command if isinstance(command, list) else ["/bin/sh", "-c", command]
    process = await anyio.open_process(
        argv,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=dict(env),
        start_new_session=True,
    )
    stdout, stderr = bytearray(), bytearray()
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_collect, process.stdout, stdout)
            group.start_soon(_collect, process.stderr, stderr)
            if process.stdin is not None and stdin is not None:
                # The command may exit without reading all of its input.
                async with process.stdin:
                    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                        await process.stdin.send(stdin.encode())
            await process.wait()
            # A background grandchild may still hold the pipes open: the step is over when
            # its main process is, so the rest of the group goes too (no orphans).
            _kill_group(process, signal.SIGKILL)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await _stop(process)
            await process.aclose()  # close the pipes now, not when the collector finds them
        raise
    await process.aclose()
    return CommandOutcome(
        exit_code=process.returncode if process.returncode is not None else -1,
        stdout=stdout.decode(errors="replace"),
        stderr=stderr.decode(errors="replace"),
    )


def command_result(outcome: CommandOutcome, address: str) -> tuple[str, Any]:
    """A finished command as ``(content, result)``, as an in-process step records it.

    Raises:
        StepFailure: The exit code was not 0.
    """
    result = {"exitCode": outcome.exit_code, "stdout": outcome.stdout, "stderr": outcome.stderr}
    if outcome.exit_code != 0:
        tail = outcome.stderr.strip().splitlines()[-1:] or [""]
        message = f"exit code {outcome.exit_code}" + (f": {tail[0][:500]}" if tail[0] else "")
        raise StepFailure(
            ErrorInfo(type="CommandFailed", message=message, address=address),
            content=outcome.stdout,
            result=result,
        )
    return outcome.stdout, result
