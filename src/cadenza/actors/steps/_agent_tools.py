"""zenflow's built-in tools offered to agents: ``bash``, ``read``, ``write``, ``glob``, ``grep``.

The same implementations as ``tool`` steps (``_tool_step``), which confine
every path to the workflow's directory tree by real path (``_confined``); what
an agent needs besides is that a failure is an answer to the model, not the
end of the step: a refused path, a non-zero exit (with its output), a timeout.

zenflow's rule decides which are offered: an agent without ``tools`` gets them
all; one with ``tools`` gets those it names; ``disallowedTools`` takes away.
``bash`` runs as a ``command`` step does: in its own process group, killed with
its group when the step is cancelled or times out, and ``timeout_seconds``
bounds one call.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cadenza.actors.run import StepFailure
from cadenza.kernel import Clock
from cadenza.llm import ToolSpec
from cadenza.workflow import Agent

from ._tool_step import BUILTIN_TOOLS, CallSite, builtin
from ._tools import Tool, ToolError

__all__ = ["agent_builtins", "builtin_names"]

_TEXT = {"type": "string"}
_PATH = {"type": "string", "description": "Relative to the workflow's directory."}
_SCHEMAS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "read": ("Read a text file.", {"path": _PATH}, ["path"]),
    "write": (
        "Create or replace a file (and its directories) with the given content.",
        {"path": _PATH, "content": _TEXT},
        ["path", "content"],
    ),
    "glob": (
        "List the paths that match a pattern (** crosses directories).",
        {"pattern": _TEXT, "path": _PATH},
        ["pattern"],
    ),
    "grep": (
        "Find the lines that contain a text (or match a regex) under a file or directory.",
        {"pattern": _TEXT, "path": _PATH, "glob": _TEXT, "regex": {"type": "boolean"}},
        ["pattern"],
    ),
    "bash": (
        "Run a shell command in the workflow's directory; its stdout comes back.",
        {
            "command": _TEXT,
            "timeout_seconds": {"type": "integer", "minimum": 1},
            "working_directory": _PATH,
        },
        ["command"],
    ),
}
# Made once: every visit of every agent offers the same specs (nothing writes to them).
_SPECS = {
    name: ToolSpec(
        name=name,
        description=description,
        parameters={"type": "object", "properties": properties, "required": required},
    )
    for name, (description, properties, required) in _SCHEMAS.items()
}


def builtin_names(agent: Agent | None) -> list[str]:
    """The built-ins ``agent`` is offered, by zenflow's rule (see the module docstring)."""
    names: Iterable[str] = BUILTIN_TOOLS
    if agent is not None and agent.tools is not None:
        names = [name for name in BUILTIN_TOOLS if name in agent.tools]
    denied = set(agent.disallowed_tools or ()) if agent is not None else set()
    return [name for name in names if name not in denied]


def agent_builtins(
    names: Iterable[str], *, base_dir: Path, run_id: str, address: str, clock: Clock
) -> list[Tool]:
    """The tools ``names`` for one agent visit at ``address``."""
    site = CallSite(base_dir, run_id, address, 1, clock)
    return [_tool(name, site) for name in names]


def _tool(name: str, site: CallSite) -> Tool:
    implementation = builtin(name)

    async def run(arguments: dict[str, Any]) -> str:
        try:
            return await implementation(site, arguments)
        except StepFailure as failure:  # bash's non-zero exit or timeout: the model hears it
            said = f"{failure.error.type}: {failure.error.message}"
            raise ToolError(f"{said}\n{failure.content}" if failure.content else said) from None

    return Tool(_SPECS[name], run)
