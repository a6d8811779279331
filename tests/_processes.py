"""Whether a process a test started (or made a step start) is still alive."""

from __future__ import annotations

from pathlib import Path


def running(pid: int | Path) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped.

    ``pid`` is the process id, or a file holding it (as a shell step writes ``$$``).
    """
    number = int(pid.read_text()) if isinstance(pid, Path) else pid
    try:
        state = Path(f"/proc/{number}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
