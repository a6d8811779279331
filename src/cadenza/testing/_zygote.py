"""A zygote: a process that imports Cadenza once, then forks a ``cadenza`` per request.

Starting ``python -m cadenza`` costs about half a second of imports; a crash
test that kills and resumes dozens of runs would spend most of its time there.
The zygote pays for the imports once. It is single-threaded, so forking it is
safe (unlike forking a test process with a model server thread in it), and it
runs no user code itself, so its children start clean.

Protocol, one JSON line each way per request, on the zygote's stdin/stdout:
``{"argv", "environ", "failpoint", "out"}`` in; ``{"pid"}`` when the child is
running, then ``{"status"}`` when it has ended (negative: killed by that signal).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

__all__ = ["answer_forks"]


def _child(request: dict[str, Any]) -> None:
    """In the forked child: files for stdio, the failpoint armed, the command line run."""
    from cadenza._failpoints import arm
    from cadenza.cli import main

    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, suffix in ((1, ".out"), (2, ".err")):
        target = os.open(request["out"] + suffix, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin = open(0)  # noqa: SIM115  (the process's own stdio, never closed)
    sys.stdout = open(1, "w")  # noqa: SIM115
    sys.stderr = open(2, "w")  # noqa: SIM115
    os.environ.update(request["environ"])
    code = 2
    try:
        arm(request["failpoint"])
        code = main(request["argv"])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


# Imported on first use by a run; loading them here saves every child the time.
_WARM = ("anyio._backends._asyncio", "httpcore", "h11", "certifi", "jsonschema")


def _warm_up() -> None:
    import importlib

    import cadenza.cli  # noqa: F401  (the point of a zygote: import once, before forking)
    from cadenza.workflow import compile_expression

    for name in _WARM:
        importlib.import_module(name)
    compile_expression("1 == 1")  # loads the CEL engine


def answer_forks() -> None:
    """Answers fork requests until stdin closes."""
    _warm_up()
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        sys.stdout.write(json.dumps({"status": code}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    answer_forks()
