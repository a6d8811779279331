"""A real pseudo-terminal driving a real ``cadenza`` process, read like a screen."""

from __future__ import annotations

import codecs
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from types import TracebackType

DEADLINE = 30.0
"""Seconds a pattern may take to appear: generous (the machine may be busy), and
under pytest's own timeout, so that a failure shows the screen."""


class Terminal:
    """``cadenza ARGS`` with stdin, stdout and stderr on one pseudo-terminal.

    ``text`` is everything written to the terminal so far (escape sequences
    included; the terminal turns each newline into CR LF).
    """

    def __init__(self, *args: str, cwd: Path, columns: int = 100) -> None:
        leader, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cadenza", *args],
            cwd=cwd,
            stdin=follower,
            stdout=follower,
            stderr=follower,
        )
        os.close(follower)
        self.leader = leader
        self.text = ""
        self.ended = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def __enter__(self) -> Terminal:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=DEADLINE)
        os.close(self.leader)

    def read_until(self, pattern: str) -> re.Match[str]:
        """Reads until ``pattern`` (a regex) is on the screen; fails at the deadline or EOF."""
        deadline = time.monotonic() + DEADLINE
        while (match := re.search(pattern, self.text)) is None:
            remaining = deadline - time.monotonic()
            if self.ended or remaining <= 0:
                raise AssertionError(f"{pattern!r} never appeared; the screen:\n{self.text}")
            self._read(remaining)
        return match

    def type(self, text: str) -> None:
        """Types ``text`` at the terminal, as a person at the keyboard would."""
        os.write(self.leader, text.encode())

    def wait(self, seconds: float = DEADLINE) -> int:
        """Reads everything until the process ends, within ``seconds``; its exit code."""
        deadline = time.monotonic() + seconds
        while not self.ended and time.monotonic() < deadline:
            self._read(deadline - time.monotonic())
        return self.process.wait(timeout=DEADLINE)

    def lines(self) -> list[str]:
        """The screen's lines, without the terminal's carriage returns."""
        return self.text.replace("\r\n", "\n").split("\n")

    def _read(self, timeout: float) -> None:
        ready, _, _ = select.select([self.leader], [], [], timeout)
        if not ready:
            return
        try:
            chunk = os.read(self.leader, 65536)
        except OSError:  # EIO: every process holding the terminal has closed it
            chunk = b""
        if not chunk:
            self.ended = True
        self.text += self._decoder.decode(chunk, final=not chunk)
