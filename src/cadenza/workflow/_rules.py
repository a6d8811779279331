"""Permission rules as written: ``NAME`` or ``NAME(PATTERN)``, checked before anything runs.

One grammar for the three places a rule comes from: a workflow's (or an
agent's) ``permissions:`` (the validator reports a problem at its line), the
``--allow``/``--deny`` flags of ``cadenza run`` and ``ToolPolicy`` (both refuse
at once). ``actors.run.PermissionRule`` matches what this module accepts.

A rule whose NAME names no tool, or whose PATTERN could never match what it is
compared with, is an error rather than a rule that silently covers nothing: a
``deny`` that covers nothing is the worst kind of typo.

- NAME is exact and case-sensitive: a built-in (``bash``), an MCP server's
  tools (``SERVER.*``, ``SERVER.TOOL``, globs after the dot; a bare ``SERVER``
  inside a workflow that declares it), or a Python tool (``module:function``).
- A ``bash`` PATTERN is matched against one simple command at a time, by its
  words joined with single spaces, quotes removed and the command named by its
  file name (``/bin/rm`` is ``rm``). So it holds no shell syntax: no ``;``,
  ``|``, ``&&``, quotes or ``$``, and no Claude Code ``rm:*``.
- A path PATTERN (``read``, ``write``, ``glob``, ``grep``) is a path relative
  to the workflow's directory, normalised as the paths it is matched against
  are (``./.env`` is ``.env``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection
from typing import Final, NamedTuple

from ._problems import did_you_mean
from ._spec import AGENT_BUILTINS

__all__ = [
    "MCP_SERVER_NAME",
    "PATH_TOOLS",
    "RUN_TOOLS",
    "WRAPPERS",
    "RuleText",
    "normal_pattern",
    "rule_problem",
    "split_rule",
]

MCP_SERVER_NAME: Final = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
"""What an ``mcpServers:`` key must look like."""

PATH_TOOLS: Final = frozenset(("read", "write", "glob", "grep"))
"""The built-ins whose PATTERN is a path."""

RUN_TOOLS: Final = frozenset(("send_message", "submit_result", "forward_to_agent"))
"""What the run itself offers: it acts only inside the run and is never checked."""

WRAPPERS: Final = frozenset(
    (
        "builtin",
        "busybox",
        "command",
        "env",
        "exec",
        "ionice",
        "nice",
        "nohup",
        "setsid",
        "stdbuf",
        "time",
        "timeout",
        "unbuffer",
        "xargs",
    )
)
"""Commands that run the command after them: a bash rule matches the one they run.

``sudo`` and ``doas`` are not among them: they change who runs it, so a rule may
name them (``bash(sudo *)``) as well as the command they run."""

_PYTHON_TOOL: Final = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[\w.*?\[\]!]+$")
_GLOB: Final = re.compile(r"[*?\[]")
_SHELL_SYNTAX: Final = re.compile(r"[;&|<>`$\n]")
_QUOTES: Final = re.compile(r"['\"\\]")
_EXAMPLES: Final = "e.g. bash, bash(git *), write(src/*), github.*"


class RuleText(NamedTuple):
    """A rule split into its parts: ``NAME`` and ``PATTERN`` (None: every call)."""

    name: str
    pattern: str | None


def split_rule(text: str) -> RuleText:
    """``NAME`` and ``PATTERN`` of the rule ``text``, as written.

    Raises:
        ValueError: It is not ``NAME`` or ``NAME(PATTERN)``.
    """
    stripped = text.strip()
    name, paren, rest = stripped.partition("(")
    name = name.strip()
    if (paren and not rest.endswith(")")) or not name or re.search(r"[\s()]", name):
        raise ValueError(f"write NAME or NAME(PATTERN), {_EXAMPLES}")
    return RuleText(name, rest[:-1] if paren else None)


def rule_problem(
    text: str, servers: Collection[str] | None, *, in_workflow: bool = True
) -> str | None:
    """What is wrong with the rule ``text`` (one line, naming it), or None.

    Args:
        text: The rule as written.
        servers: The MCP servers the workflow declares; None: not known (a
            ``ToolPolicy`` holds for any workflow), any ``SERVER.TOOL`` goes.
        in_workflow: The rule is a workflow's, where a bare NAME may name one
            of its MCP servers, as in ``tools:``. Outside one (``--allow``,
            ``ToolPolicy``) a bare NAME must be a built-in, and a server's tools
            are written ``SERVER.*``.
    """
    try:
        name, pattern = split_rule(text)
    except ValueError as error:
        return f"permission rule {text!r}: {error}"
    problem = _name_problem(name, servers, in_workflow=in_workflow)
    if problem is None and pattern is not None:
        problem = _pattern_problem(name, pattern)
    return None if problem is None else f"permission rule {text!r}: {problem}"


def normal_pattern(name: str, pattern: str) -> str:
    """``pattern`` in the form it is matched in: what ``bash``'s and paths' subjects are in."""
    if name == "bash":
        return " ".join(pattern.split())
    if name in PATH_TOOLS:
        return _normal_path(pattern)
    return pattern


def _normal_path(pattern: str) -> str:
    path = pattern.strip()
    normal = posixpath.normpath(path)
    if path.startswith("//"):  # normpath keeps a leading // (POSIX leaves it to the system)
        normal = "/" + normal.lstrip("/")
    return normal


def _name_problem(name: str, servers: Collection[str] | None, *, in_workflow: bool) -> str | None:
    if name in AGENT_BUILTINS:
        return None
    if name in RUN_TOOLS:
        return f"{name} acts only inside the run and is never checked: a rule on it does nothing"
    if ":" in name:
        if _PYTHON_TOOL.match(name):
            return None
        return f"a Python tool is named module:function (mytools:lookup), not {name!r}"
    if "." in name:
        return _server_problem(name, servers)
    if in_workflow and servers is not None and name in servers:
        return None
    return _unknown(name, servers, in_workflow=in_workflow)


def _server_problem(name: str, servers: Collection[str] | None) -> str | None:
    server, _, tool = name.partition(".")
    if not tool:
        return f"{name!r} names no tool after the dot: write {server}.* for all of its tools"
    if not MCP_SERVER_NAME.match(server):
        return f"{server!r} is no MCP server name"
    if servers is None or server in servers:
        return None
    declared = ", ".join(sorted(servers)) or "none declared"
    return f"{server!r} is no MCP server of this workflow (mcpServers: {declared})" + did_you_mean(
        server, servers
    )


def _unknown(name: str, servers: Collection[str] | None, *, in_workflow: bool) -> str:
    builtins = ", ".join(sorted(AGENT_BUILTINS))
    hint = did_you_mean(name, sorted({*AGENT_BUILTINS, *(servers or ())}))
    if _GLOB.search(name):
        return (
            f"unknown tool {name!r}: a NAME is a tool's exact name (the built-ins: {builtins}); "
            "globs go after an MCP server's dot (github.get_*)"
        )
    if name.lower() in AGENT_BUILTINS:
        hint = f"; names are case-sensitive: did you mean {name.lower()!r}?"
    if not in_workflow:
        where = f"not a built-in ({builtins}); an MCP server's tools are SERVER.* or SERVER.TOOL"
    else:
        declared = ", ".join(sorted(servers or ())) or "none declared"
        where = f"neither a built-in ({builtins}) nor an MCP server (mcpServers: {declared})"
    return f"unknown tool {name!r}: {where}{hint}"


def _pattern_problem(name: str, pattern: str) -> str | None:
    if not pattern.strip():
        return f"the pattern is empty: write {name} alone to cover every call"
    if name == "bash":
        return _bash_pattern_problem(pattern)
    if name in PATH_TOOLS and "\0" in pattern:
        return "a path holds no NUL byte"
    return None


def _bash_pattern_problem(pattern: str) -> str | None:
    words = pattern.split()
    if pattern.rstrip().endswith(":*"):
        fixed = pattern.rstrip()[:-2].rstrip()
        return (
            f"'{fixed}:*' is Claude Code's syntax; here a pattern is a glob over the "
            f"command's words: did you mean bash({fixed} *)?"
        )
    if _SHELL_SYNTAX.search(pattern):
        return (
            "a bash pattern matches one simple command by its words (a compound command's "
            "every part is checked on its own): it holds no ; | & < > ` $ or new line; "
            "write one rule per command"
        )
    if _QUOTES.search(pattern):
        return (
            "quotes and backslashes are removed from a command before it is matched: "
            "write the pattern without them"
        )
    first = words[0]
    if "/" in first:
        return (
            f"a command is matched by its file name ({first} runs as "
            f"{first.rsplit('/', 1)[-1]}): name it without its directory"
        )
    if first in WRAPPERS:
        return (
            f"{first} is looked through: a rule matches the command it runs "
            f"(bash(rm *) covers {first} rm -r x)"
        )
    return None
