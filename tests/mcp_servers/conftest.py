"""MCP servers from PyPI (``mcp-server-time``) and one of our own, run as real processes."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

BIN = Path(sys.executable).parent


@pytest.fixture
def mcp_path(monkeypatch: pytest.MonkeyPatch) -> str:
    """PATH with this interpreter's scripts first, where ``mcp-server-time`` is installed."""
    path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    monkeypatch.setenv("PATH", path)
    if shutil.which("mcp-server-time", path=path) is None:
        pytest.fail("mcp-server-time is not installed (it comes with the test extra)")
    return path
