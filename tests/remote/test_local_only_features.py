"""What runs only in the supervisor's process is refused with remote workers, saying why."""

from __future__ import annotations

import pytest

from cadenza import InputError, Runtime, ToolPolicy
from cadenza.remote import Dispatcher
from tests.conftest import WriteFlow

STEPS = "steps:\n  - {id: a, command: 'true'}\n"


@pytest.mark.parametrize(
    ("head", "policy", "says"),
    [
        ("mcpServers:\n  time: {command: mcp-server-time}\n", None, "declares mcpServers"),
        ("options: {isolation: worktree-per-step}\n", None, "worktree-per-step"),
        ('permissions: {deny: ["bash"]}\n', None, "tool permissions"),
        ("", ToolPolicy(sandbox=True), "tool permissions"),
    ],
)
async def test_local_only_features_are_refused_before_the_run_starts(
    write_flow: WriteFlow, head: str, policy: ToolPolicy | None, says: str
) -> None:
    """MCP servers, worktrees and permission checks live here: no run starts without them."""
    path = write_flow(f"name: local\n{head}{STEPS}")
    dispatcher = Dispatcher("tcp://127.0.0.1:*", heartbeat=0.2)
    async with Runtime(workers=dispatcher, permissions=policy) as runtime:
        with pytest.raises(InputError, match=says):
            await runtime.start(path)
        assert await runtime.store.list_runs() == []
