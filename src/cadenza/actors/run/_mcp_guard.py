"""Runs an MCP server so that it dies with its run, even a run killed with ``kill -9``.

Not imported: the run starts it as a script of its own,
``python -I -S _mcp_guard.py PARENT_PID COMMAND [ARG...]``, as the leader of a
new process group, and speaks to ``COMMAND``, which inherits the guard's stdin,
stdout and stderr. The guard asks Linux for SIGHUP when its parent dies
(``prctl(PR_SET_PDEATHSIG)``), starts the server as its child and waits for it;
on that SIGHUP it SIGKILLs its whole process group: the server, whatever the
server started (``npx`` and ``uvx`` run the real server as a child), and
itself. A server that hangs, ignores SIGTERM and ignores its stdin closing
still cannot outlive the run.

Why a guard process rather than ``exec`` after the request: the request would
cover the server's process only, not its children. Why not ``preexec_fn``:
unsafe in a process with threads, and the MCP SDK has no such hook.

The guard ignores SIGTERM (the server does not): stopping the group, the run
reaches the server, and the guard ends when the server does, with its exit
status. Linux sends the signal when the *thread* that forked the guard ends: the
run forks from its event loop's thread, which outlives its servers. Elsewhere
there is no such request; the stdin rule of MCP's stdio transport remains.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from types import FrameType
from typing import NoReturn

_PR_SET_PDEATHSIG = 1
"""From <linux/prctl.h>."""

_RESTORED = (signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ)
"""What the guard (or Python) ignores and the server must not inherit ignored."""


def main(argv: list[str]) -> None:
    """Arms the parent-death signal, starts the server, waits, and exits as it did."""
    parent, command = int(argv[1]), argv[2:]
    if os.getpgrp() != os.getpid():  # started without a group of its own: the one killed is ours
        os.setsid()

    def orphaned(signum: int, frame: FrameType | None) -> None:
        if os.getppid() != parent:  # the run is gone (not a stray SIGHUP)
            os.killpg(0, signal.SIGKILL)

    signal.signal(signal.SIGHUP, orphaned)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGHUP) != 0:
            _fail(f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")
    if os.getppid() != parent:  # the run died before the request was made
        _fail("the run that started this MCP server is gone")
    child = os.fork()
    if child == 0:
        _become(command)
    # The server holds the pipes; the guard lets go of them, so that the run
    # sees the server's stdout end when the server does.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # killed by a signal: end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code  # what a shell says, should the signal not end the guard
    os._exit(code)


def _become(command: list[str]) -> NoReturn:
    for restored in _RESTORED:
        signal.signal(restored, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        os.execv(command[0], command)
    except OSError as error:
        _fail(f"cannot run {command[0]}: {error.strerror}")


def _fail(message: str) -> NoReturn:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(127)


if __name__ == "__main__":
    main(sys.argv)
