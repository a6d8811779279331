"""The tool-permission policy: asked before every tool call an agent's model makes.

Who decides, in order (the first that decides wins):

1. the **sandbox** (``cadenza run --sandbox``, ``ToolPolicy(sandbox=True)``):
   only the read-only built-ins ``read``, ``glob`` and ``grep`` run;
2. **deny rules**, the workflow's ``permissions.deny`` and the agent's;
3. the **hook** (``Runtime(permissions=hook)``): it sees the call's tool
   name and arguments and answers True (allow), False or a reason (deny), or
   None (no opinion);
4. **allow rules**, the workflow's and the agent's: once either lists any, a
   call they do not match is denied, or asked about;
5. the **person** at the terminal (``cadenza run --ask``): every call still
   undecided is asked about; "always" allows that tool for the rest of the run;
6. otherwise the call runs.

A rule is ``NAME`` or ``NAME(PATTERN)``, both shell-style globs: NAME is the
tool as ``tools:`` names it (``bash``, ``github.create_issue``, ``github.*``,
``mytools:lookup``); PATTERN is matched against the call's main argument (the
command of ``bash``, the path of ``read`` and ``write``, the pattern of
``glob`` and ``grep``; for any other tool its arguments as compact JSON).

What the run itself offers (``submit_result``, ``send_message``,
``forward_to_agent``) acts only inside the run and is never asked about. A
denied call is answered to the model with the reason; every decision the
policy takes (all but the default) is recorded as a ``tool_permission`` event.
"""

from __future__ import annotations

import fnmatch
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple, TypeAlias

import msgspec

__all__ = [
    "READ_ONLY_TOOLS",
    "Asker",
    "Decision",
    "PermissionAnswer",
    "PermissionHook",
    "PermissionPolicy",
    "PermissionRule",
    "ToolPolicy",
    "ToolRequest",
]

READ_ONLY_TOOLS: Final = frozenset(("read", "glob", "grep"))
"""The built-ins the sandbox lets run: they read files and change nothing."""

_SUBJECTS: Final = {
    "bash": "command",
    "read": "path",
    "write": "path",
    "glob": "pattern",
    "grep": "pattern",
}


class ToolRequest(msgspec.Struct, frozen=True):
    """A tool call a model asked for, as the policy sees it.

    Attributes:
        run_id: The run.
        step: The address of the agent's step (``fix.2.implement``).
        agent: The agent's name, if the step names one.
        tool: The tool as ``tools:`` names it (``bash``, ``github.create_issue``).
        arguments: The call's arguments, as the model sent them.
    """

    run_id: str
    step: str
    agent: str | None
    tool: str
    arguments: dict[str, Any]

    @property
    def subject(self) -> str:
        """What a rule's ``(PATTERN)`` is matched against (see the module's notes)."""
        key = _SUBJECTS.get(self.tool)
        value = self.arguments.get(key) if key is not None else None
        if isinstance(value, str):
            return value
        return msgspec.json.encode(self.arguments).decode()


PermissionAnswer: TypeAlias = bool | str | None
"""A hook's answer: True allows, False or a reason denies, None leaves it to the rules."""

PermissionHook: TypeAlias = Callable[[ToolRequest], PermissionAnswer | Awaitable[PermissionAnswer]]
"""``hook(request)``: asked about every call the sandbox and deny rules let through."""

Asker: TypeAlias = Callable[[ToolRequest], Awaitable[Literal["yes", "no", "always"]]]
"""Asks a person about one call (``cadenza run --ask``)."""


class Decision(NamedTuple):
    """What the policy decided about one call, and who decided it."""

    allowed: bool
    by: Literal["sandbox", "rule", "hook", "ask"]
    reason: str


@dataclass(frozen=True, slots=True)
class PermissionRule:
    """``NAME`` or ``NAME(PATTERN)``: which calls a rule covers."""

    name: str
    pattern: str | None = None

    @classmethod
    def parse(cls, text: str) -> PermissionRule:
        """The rule ``text`` spells.

        Raises:
            ValueError: It is empty, or its parentheses do not close at its end.
        """
        text = text.strip()
        name, paren, rest = text.partition("(")
        if paren and not rest.endswith(")"):
            raise ValueError(f"rule {text!r}: write NAME or NAME(PATTERN)")
        if not name.strip():
            raise ValueError(f"rule {text!r} names no tool")
        return cls(name.strip(), rest[:-1] if paren else None)

    def matches(self, request: ToolRequest) -> bool:
        """Whether the rule covers ``request``."""
        if not fnmatch.fnmatchcase(request.tool, self.name):
            return False
        return self.pattern is None or fnmatch.fnmatchcase(request.subject, self.pattern)

    def __str__(self) -> str:
        return self.name if self.pattern is None else f"{self.name}({self.pattern})"


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """What a `Runtime` (or ``cadenza run``) adds to every run's permission policy.

    Attributes:
        hook: Asked about each call the sandbox and deny rules let through.
        sandbox: Only the read-only built-ins (``read``, ``glob``, ``grep``) run.
        allow: Allow rules for every run, besides the workflow's own.
        deny: Deny rules for every run, besides the workflow's own.
        ask: Asks a person about each call nothing else decided.
    """

    hook: PermissionHook | None = None
    sandbox: bool = False
    allow: Sequence[str] = ()
    deny: Sequence[str] = ()
    ask: Asker | None = None


@dataclass(slots=True)
class PermissionPolicy:
    """One run's policy: the runtime's `ToolPolicy` and the workflow's rules together."""

    allow: tuple[PermissionRule, ...] = ()
    deny: tuple[PermissionRule, ...] = ()
    sandbox: bool = False
    hook: PermissionHook | None = None
    ask: Asker | None = None
    always: set[str] = field(default_factory=set)  # tools a person allowed for the whole run

    @classmethod
    def of(
        cls, runtime: ToolPolicy | None, allow: Iterable[str] = (), deny: Iterable[str] = ()
    ) -> PermissionPolicy:
        """The policy of a run: the runtime's settings and the workflow's rules."""
        runtime = runtime or ToolPolicy()
        return cls(
            allow=tuple(PermissionRule.parse(r) for r in (*runtime.allow, *allow)),
            deny=tuple(PermissionRule.parse(r) for r in (*runtime.deny, *deny)),
            sandbox=runtime.sandbox,
            hook=runtime.hook,
            ask=runtime.ask,
        )

    @property
    def active(self) -> bool:
        """Whether anything can be decided: otherwise every call runs, unrecorded."""
        return bool(self.allow or self.deny or self.sandbox or self.hook or self.ask)

    async def decide(
        self,
        request: ToolRequest,
        allow: Sequence[PermissionRule] = (),
        deny: Sequence[PermissionRule] = (),
    ) -> Decision | None:
        """The decision about ``request`` (None: nothing decided, it runs).

        ``allow`` and ``deny`` are the agent's own rules, added to the run's.
        """
        if self.sandbox and request.tool not in READ_ONLY_TOOLS:
            reason = "the run is sandboxed: only read, glob and grep may run"
            return Decision(False, "sandbox", reason)
        for rule in (*self.deny, *deny):
            if rule.matches(request):
                return Decision(False, "rule", f"denied by the rule {rule}")
        if self.hook is not None:
            answer = self.hook(request)
            if inspect.isawaitable(answer):
                answer = await answer
            if answer is True:
                return Decision(True, "hook", "allowed by the permission hook")
            if answer is False or isinstance(answer, str):
                reason = answer if isinstance(answer, str) and answer else ""
                return Decision(False, "hook", reason or "denied by the permission hook")
        rules = (*self.allow, *allow)
        for rule in rules:
            if rule.matches(request):
                return Decision(True, "rule", f"allowed by the rule {rule}")
        if self.ask is not None:
            return await self._ask(request)
        if rules:
            names = ", ".join(str(rule) for rule in rules)
            return Decision(False, "rule", f"not allowed: the allow rules are {names}")
        return None

    async def _ask(self, request: ToolRequest) -> Decision:
        if request.tool in self.always:
            return Decision(True, "ask", f"allowed: {request.tool} always, said at the terminal")
        assert self.ask is not None
        answer = await self.ask(request)
        if answer == "always":
            self.always.add(request.tool)
            return Decision(True, "ask", f"allowed: {request.tool} always, said at the terminal")
        if answer == "yes":
            return Decision(True, "ask", "allowed at the terminal")
        return Decision(False, "ask", "denied at the terminal")
