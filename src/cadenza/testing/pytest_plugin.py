"""The ``llm_server`` pytest fixture.

Enable it with ``pytest_plugins = ["cadenza.testing.pytest_plugin"]`` in the
root ``conftest.py`` (or import ``llm_server`` into a ``conftest.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import pytest

from ._llm_rules import RuleLike
from ._llm_server import ScriptedLLMServer, Wire

__all__ = ["StartLLMServer", "llm_server"]


class StartLLMServer(Protocol):
    """Starts a ``ScriptedLLMServer`` that stops when the test ends."""

    def __call__(self, rules: Sequence[RuleLike], *, wire: Wire = "openai") -> ScriptedLLMServer:
        """Start a server answering from ``rules`` in the ``wire`` format."""
        ...


@pytest.fixture
def llm_server() -> Iterator[StartLLMServer]:
    """A factory of running ``ScriptedLLMServer``s, all stopped at teardown."""
    servers: list[ScriptedLLMServer] = []

    def start(rules: Sequence[RuleLike], *, wire: Wire = "openai") -> ScriptedLLMServer:
        server = ScriptedLLMServer(rules, wire=wire).start()
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()
