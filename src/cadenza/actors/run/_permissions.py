"""The tool-permission policy: asked before every tool call an agent's model makes.

Who decides, in order (the first that decides wins):

1. the **sandbox** (``cadenza run --sandbox``, ``ToolPolicy(sandbox=True)``):
   only the read-only built-ins ``read``, ``glob`` and ``grep`` run;
2. **deny rules**, the workflow's ``permissions.deny`` and the agent's: a call
   one of them certainly covers is denied; one it may cover (below) is asked
   about, and refused when nobody can answer;
3. the **hook** (``Runtime(permissions=hook)``): it sees the call's tool
   name and arguments and answers True (allow), False or a reason (deny), or
   None (no opinion);
4. **allow rules**, the workflow's and the agent's: once either lists any, a
   call they do not certainly cover is denied, or asked about;
5. the **person** at the terminal (``cadenza run --ask``): every call still
   undecided is asked about; "always" allows that tool for the rest of the run;
6. otherwise the call runs.

A rule is ``NAME`` or ``NAME(PATTERN)`` (``workflow._rules`` checks them at
load). PATTERN is a glob matched against what the call will act on, not its
text: each simple command of a ``bash`` command line (``_shell``), the
normalised path of ``read`` and ``write``, the tree a ``glob`` or ``grep``
reaches, and for any other tool its arguments as compact JSON.

"Certainly" and "may" come from what is not known before a call runs: an
expanded word in a command (``rm $X``), arguments ``xargs`` reads, a directory
``grep`` walks. A rule certainly covers a call when it matches whatever those
turn out to be, and may cover it when it matches some of them. A command line
with a part that cannot be read at all (a substitution, ``sh -c``...) is one
no patterned ``bash`` rule can vouch for either way.

What the run itself offers (``submit_result``, ``send_message``,
``forward_to_agent``) acts only inside the run and is never asked about. A
denied call is answered to the model with the reason; every decision the
policy takes (all but the default) is recorded as a ``tool_permission`` event.

A run keeps its policy for life. What the runtime gave it (the sandbox, the
rules, whether a hook and a person decided) is stored with the run as a
`StoredPolicy`; a resume rebuilds the policy from that, whatever the resuming
process was given (`resumed_policy`). That process may refuse more, never
less: its deny rules and sandbox join the run's, its hook or person decide
after the run's policy has let a call through; an allow rule the run did not
have, or a missing hook, is a reason not to resume it at all (`resume_refusal`).
"""

from __future__ import annotations

import fnmatch
import functools
import inspect
import os
import posixpath
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple, TypeAlias

import anyio.to_thread
import msgspec

from cadenza.workflow import AGENT_BUILTINS, normal_pattern, rule_problem, split_rule

from ._shell import read_command

__all__ = [
    "READ_ONLY_TOOLS",
    "Asker",
    "PermissionAnswer",
    "PermissionDecision",
    "PermissionHook",
    "PermissionPolicy",
    "PermissionRule",
    "StoredPolicy",
    "ToolPolicy",
    "ToolRequest",
    "resume_refusal",
    "resumed_policy",
]

READ_ONLY_TOOLS: Final = frozenset(("read", "glob", "grep"))
"""The built-ins the sandbox lets run: they read files and change nothing."""

_READ_IN_THREAD: Final = 4096
"""Characters of a command line above which it is read in a worker thread."""

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
        """The call's main argument, as shown to a person asked about it."""
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


class PermissionDecision(NamedTuple):
    """What the policy decided about one call, and who decided it."""

    allowed: bool
    by: Literal["sandbox", "rule", "hook", "ask"]
    reason: str


# What a call acts on -------------------------------------------------------------


class _Subject(NamedTuple):
    """One thing a call acts on, in the forms a rule may name it by.

    ``forms`` are spellings of the same thing (a path relative to the
    workflow's directory, and absolute): a rule matching any one matches it.
    ``open`` is None when a form is all of it; otherwise each form is how it
    starts and more follows, unknown before the call runs: ``""`` anything,
    ``" "`` (a command's) further arguments. ``why`` says what that is.
    """

    forms: tuple[str, ...]
    open: str | None = None
    why: str = ""


_Reading: TypeAlias = tuple[tuple[_Subject, ...], tuple[str, ...]]


class _Call:
    """A request as the rules see it: its subjects, read once and only if a rule asks."""

    def __init__(self, request: ToolRequest, directory: Path | None) -> None:
        self.request = request
        self.directory = directory
        self._reading: _Reading | None = None

    @property
    def reading(self) -> _Reading:
        """The subjects, and why part of the call cannot be read (a bash command's)."""
        if self._reading is None:
            self._reading = self._read()
        return self._reading

    async def read_ahead(self, rules: Iterable[PermissionRule]) -> None:
        """Reads a long command line in a worker thread, if a rule will need it.

        A line of thousands of commands takes tens of milliseconds to read:
        not on the event loop.
        """
        command = self.request.arguments.get("command")
        if (
            self.request.tool == "bash"
            and isinstance(command, str)
            and len(command) > _READ_IN_THREAD
            and any(rule.pattern is not None and rule.names("bash") for rule in rules)
        ):
            self._reading = await anyio.to_thread.run_sync(self._read)

    def _read(self) -> _Reading:
        tool, arguments = self.request.tool, self.request.arguments
        command = arguments.get("command")
        if tool == "bash" and isinstance(command, str):
            reading = read_command(command)
            subjects = tuple(_Subject((c.text,), c.open, c.why) for c in reading.commands if c.text)
            return subjects, reading.unclear
        if tool in ("read", "write") and isinstance(arguments.get("path"), str):
            return _path_subjects(arguments["path"], self.directory, tree=False), ()
        if tool == "grep" and isinstance(arguments.get("path", "."), str):
            return _path_subjects(arguments.get("path", "."), self.directory, tree=None), ()
        if tool == "glob" and isinstance(arguments.get("pattern"), str):
            return _glob_subjects(arguments, self.directory), ()
        return (_Subject((msgspec.json.encode(arguments).decode(),)),), ()


def _path_subjects(
    given: str, directory: Path | None, *, tree: bool | None
) -> tuple[_Subject, ...]:
    """A path argument as rules see it: as written and with its links resolved.

    Both are normalised (``./a//b/../.env`` is ``.env``) and relative to the
    workflow's directory when inside it, absolute otherwise; the two are
    separate subjects, since a link can lead somewhere a rule covers.
    ``tree``: the call reaches everything under the path (True), the path
    itself (False), or whichever it is, asked of the file system (None: grep).
    """
    given = given.strip()
    places: list[tuple[str, ...]]
    if directory is None:
        places = [(posixpath.normpath(given or "."),)]
        is_tree = bool(tree)
    else:
        base = os.path.abspath(directory)
        joined = os.path.join(base, given)
        lexical = os.path.normpath(joined)
        try:  # as the tool resolves it: links first, then what .. leads to
            real_base = os.path.realpath(base)
            resolved = os.path.realpath(joined)
        except (OSError, ValueError):  # a NUL byte: the tool refuses it anyway
            real_base, resolved = base, lexical
        places = [_place(lexical, (base, real_base)), _place(resolved, (real_base,))]
        is_tree = os.path.isdir(resolved) if tree is None else tree
    subjects: dict[tuple[str, ...], None] = {}
    for forms in places:
        if is_tree:
            forms = tuple("" if form == "." else form.rstrip("/") + "/" for form in forms)
        subjects[forms] = None
    why = "it reaches every file under the directory"
    return tuple(_Subject(forms, "" if is_tree else None, why) for forms in subjects)


def _place(path: str, bases: Iterable[str]) -> tuple[str, ...]:
    """``path`` relative to the first of ``bases`` it is inside, then absolute; or absolute."""
    for base in bases:
        if path == base:
            return ".", path
        if path.startswith(base.rstrip(os.sep) + os.sep):
            return path[len(base.rstrip(os.sep)) + 1 :], path
    return (path,)


_GLOB_CHARS: Final = frozenset("*?[")


def _glob_subjects(arguments: dict[str, Any], directory: Path | None) -> tuple[_Subject, ...]:
    """What a ``glob`` call lists: the directory its pattern's fixed part names, or one path."""
    root = arguments.get("path", ".")
    pattern: str = arguments["pattern"]
    full = posixpath.join(root if isinstance(root, str) else ".", pattern)
    parts = full.split("/")
    fixed = next((i for i, part in enumerate(parts) if _GLOB_CHARS & set(part)), None)
    if fixed is None:
        return _path_subjects(full, directory, tree=False)
    return _path_subjects(
        "/".join(parts[:fixed]) or ("/" if full.startswith("/") else "."), directory, tree=True
    )


# Rules ---------------------------------------------------------------------------


class _RuleMatch(NamedTuple):
    """What a deny rule says of a call: it covers it (``certain``), or it may."""

    rule: PermissionRule
    certain: bool
    reason: str  # certain: what it covers (a command of the line); else why it cannot tell


@dataclass(frozen=True, slots=True)
class PermissionRule:
    """``NAME`` or ``NAME(PATTERN)``: which calls a rule covers."""

    name: str
    pattern: str | None = None

    @classmethod
    def parse(cls, text: str) -> PermissionRule:
        """The rule ``text`` spells, its PATTERN in the form it is matched in.

        Raises:
            ValueError: It is not ``NAME`` or ``NAME(PATTERN)``.
        """
        name, pattern = split_rule(text)
        return cls(name, None if pattern is None else normal_pattern(name, pattern))

    def names(self, tool: str) -> bool:
        """Whether the rule is about ``tool`` (whatever its arguments).

        A built-in by its name; a Python tool (``module:function``) or an MCP
        server's (``SERVER.TOOL``) by a glob over names of its own kind; a bare
        ``SERVER``, every tool of the server.
        """
        if self.name in AGENT_BUILTINS:
            return tool == self.name
        if (":" in self.name) != (":" in tool):
            return False
        if ":" in self.name or "." in self.name:
            return fnmatch.fnmatchcase(tool, self.name)
        return tool.startswith(self.name + ".")

    def matches(self, request: ToolRequest) -> bool:
        """Whether the rule alone, as an allow rule, covers ``request`` (paths as written)."""
        return _uncovered(_Call(request, None), (self,)) is None

    def denies(self, call: _Call) -> _RuleMatch | None:
        """As a deny rule: whether it covers ``call``, or may (None: it does not).

        One subject it covers is enough. A call with a part that cannot be read
        is a "maybe" for every patterned rule about its tool.
        """
        if not self.names(call.request.tool):
            return None
        if self.pattern is None:
            return _RuleMatch(self, True, "")
        subjects, unclear = call.reading
        maybe: _RuleMatch | None = None
        for subject in subjects:
            if self.covers(subject):
                return _RuleMatch(self, True, _shown(subject))
            if maybe is None and self._reaches(subject):
                maybe = _RuleMatch(self, False, f"{_shown(subject)}: {subject.why}")
        return _RuleMatch(self, False, unclear[0]) if unclear else maybe

    def covers(self, subject: _Subject) -> bool:
        """Whether the PATTERN matches ``subject`` whatever its unknown part turns out to be."""
        return self.pattern is None or any(
            self._covers(form, subject.open) for form in subject.forms
        )

    def _covers(self, text: str, open: str | None) -> bool:
        assert self.pattern is not None
        if open is None:
            return self._whole(text)
        if open == " ":
            return self._whole(text) and _glob(self.pattern).takes_all(text + " ")
        return _glob(self.pattern).takes_all(text)

    def _reaches(self, subject: _Subject) -> bool:
        """Whether the PATTERN matches some of what ``subject`` may turn out to be."""
        assert self.pattern is not None
        glob = _glob(self.pattern)
        for text in subject.forms:
            if subject.open is None and self._whole(text):
                return True
            if subject.open == " " and (self._whole(text) or glob.takes_some(text + " ")):
                return True
            if subject.open == "" and glob.takes_some(text):
                return True
        return False

    def _whole(self, text: str) -> bool:
        """The PATTERN matches ``text``; for bash, ``rm *`` matches ``rm`` alone too."""
        assert self.pattern is not None
        if fnmatch.fnmatchcase(text, self.pattern):
            return True
        return self.name == "bash" and fnmatch.fnmatchcase(text + " ", self.pattern)

    def __str__(self) -> str:
        return self.name if self.pattern is None else f"{self.name}({self.pattern})"


class _Glob:
    """A shell-style glob run over a text's start: what may, or must, follow it.

    fnmatch answers "does this whole text match"; a subject with an unknown
    end asks "does every text starting so match" and "does some". The pattern
    is run as a small automaton over the known start, one position per token
    (``*``, ``?``, a ``[...]`` class, a character), classes read as fnmatch
    reads them.
    """

    def __init__(self, pattern: str) -> None:
        self.tokens: list[str] = []
        index = 0
        while index < len(pattern):
            char = pattern[index]
            if char == "[":
                end = index + 1
                if end < len(pattern) and pattern[end] == "!":
                    end += 1
                if end < len(pattern) and pattern[end] == "]":
                    end += 1
                while end < len(pattern) and pattern[end] != "]":
                    end += 1
                if end < len(pattern):
                    self.tokens.append(pattern[index : end + 1])
                    index = end + 1
                    continue
                char = "[[]"  # no closing bracket: a literal [, as fnmatch takes it
            self.tokens.append(char)
            index += 1

    def _states(self, text: str) -> set[int]:
        states = self._closure({0})
        for char in text:
            following = set()
            for state in states:
                if state == len(self.tokens):
                    continue
                token = self.tokens[state]
                if token == "*":
                    following.add(state)
                elif token in ("?", char) or (len(token) > 1 and fnmatch.fnmatchcase(char, token)):
                    following.add(state + 1)
            states = self._closure(following)
            if not states:
                break
        return states

    def _closure(self, states: set[int]) -> set[int]:
        for state in sorted(states):
            while state < len(self.tokens) and self.tokens[state] == "*":
                state += 1
                states.add(state)
        return states

    def takes_all(self, start: str) -> bool:
        """Every text that begins with ``start`` matches."""
        stars = [s for s in self._states(start) if s < len(self.tokens)]
        return any(all(t == "*" for t in self.tokens[s:]) for s in stars)

    def takes_some(self, start: str) -> bool:
        """Some text that begins with ``start`` matches."""
        return bool(self._states(start))


@functools.lru_cache(maxsize=512)
def _glob(pattern: str) -> _Glob:
    return _Glob(pattern)


# Policies ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """What a `Runtime` (or ``cadenza run``) adds to every run's permission policy.

    Rules are checked when the policy is made: outside a workflow a bare NAME
    must be a built-in, and an MCP server's tools are written ``SERVER.*``.

    Attributes:
        hook: Asked about each call the sandbox and deny rules let through.
        sandbox: Only the read-only built-ins (``read``, ``glob``, ``grep``) run.
        allow: Allow rules for every run, besides the workflow's own.
        deny: Deny rules for every run, besides the workflow's own.
        ask: Asks a person about each call nothing else decided.

    Raises:
        ValueError: A rule is malformed or names no tool.
    """

    hook: PermissionHook | None = None
    sandbox: bool = False
    allow: Sequence[str] = ()
    deny: Sequence[str] = ()
    ask: Asker | None = None

    def __post_init__(self) -> None:
        for kind in ("allow", "deny"):
            rules = getattr(self, kind)
            if isinstance(rules, str):
                raise ValueError(f"ToolPolicy({kind}=...) takes a list of rules, not one string")
            for index, rule in enumerate(rules):
                problem = rule_problem(rule, None, in_workflow=False)
                if problem is not None:
                    raise ValueError(f"ToolPolicy({kind}[{index}]): {problem}")


class StoredPolicy(msgspec.Struct, frozen=True, omit_defaults=True):
    """A run's `ToolPolicy` as stored with the run (in its document), for every resume.

    A hook and a person cannot be stored: ``hook`` and ``ask`` say that the
    run had them, so that a resume brings its own or refuses what they would
    have decided.
    """

    sandbox: bool = False
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    hook: bool = False
    ask: bool = False

    @classmethod
    def of(cls, policy: ToolPolicy | None) -> StoredPolicy:
        """What a run started under ``policy`` stores."""
        if policy is None:
            return cls()
        return cls(
            sandbox=policy.sandbox,
            allow=tuple(policy.allow),
            deny=tuple(policy.deny),
            hook=policy.hook is not None,
            ask=policy.ask is not None,
        )


def resume_refusal(stored: StoredPolicy | None, given: ToolPolicy | None) -> str | None:
    """Why a runtime given ``given`` must leave a run that stored ``stored`` untouched.

    None: it may resume it. A run recorded before policies were stored
    (``stored`` None) may always be resumed: ``given`` is then all it has.

    The checks are the ones `resumed_policy` cannot make good by refusing
    calls: the run's hook is not in this process (it cannot be stored), or an
    allow rule of ``given`` would let through what the run's rules refuse.
    """
    if stored is None:
        return None
    if stored.hook and (given is None or given.hook is None):
        return (
            "it was started with a permission hook (Runtime(permissions=...)), which cannot"
            " be stored: resume it in a process whose Runtime has the hook"
        )
    for rule in (*stored.allow, *stored.deny):
        problem = rule_problem(rule, None, in_workflow=False)
        if problem is not None:  # valid when stored; a later Cadenza may read rules otherwise
            return f"its stored {problem}"
    kept = {PermissionRule.parse(rule) for rule in stored.allow}
    for rule in given.allow if given is not None else ():
        if PermissionRule.parse(rule) not in kept:
            return (
                f"the allow rule {rule!r} is not one the run was started with: a resume keeps"
                " the run's permission policy and may only add to what it refuses"
                " (deny rules, the sandbox)"
            )
    return None


def resumed_policy(
    stored: StoredPolicy | None, given: ToolPolicy | None
) -> tuple[ToolPolicy | None, ToolPolicy | None]:
    """A resumed run's own policy, and what the resuming runtime adds to it.

    The run's own is the stored one, with ``given``'s deny rules and sandbox
    joined to it, and ``given``'s hook and person standing in for the run's
    (a run that had a person and finds none refuses what it would have asked;
    one whose hook is missing refuses what the hook would have been asked:
    `resume_refusal` keeps such a run from being resumed in the first place).
    ``given``'s hook and person that the run did not have are added after it:
    they may refuse what the run's policy lets through, not allow what it
    refuses. An allow rule the run did not have is ignored.

    ``stored`` None (a new run, or one recorded before policies were stored):
    ``given`` as it is. None for either: it has nothing to decide.
    """
    if stored is None:
        return given, None
    given = given or ToolPolicy()
    own = ToolPolicy(
        sandbox=stored.sandbox or given.sandbox,
        allow=stored.allow,
        deny=(*stored.deny, *(rule for rule in given.deny if rule not in stored.deny)),
        hook=(given.hook or _hook_missing) if stored.hook else None,
        ask=(given.ask or _nobody) if stored.ask else None,
    )
    hook = None if stored.hook else given.hook
    ask = None if stored.ask else given.ask
    added = ToolPolicy(hook=hook, ask=ask) if hook is not None or ask is not None else None
    return (None if own == ToolPolicy() else own), added


def _hook_missing(request: ToolRequest) -> str:
    return "the run was started with a permission hook, and this process has none to ask"


async def _nobody(request: ToolRequest) -> Literal["no"]:
    """Stands in for the person a run was started with (``--ask``) where nobody can answer."""
    return "no"


@dataclass(slots=True)
class PermissionPolicy:
    """One run's policy: the runtime's `ToolPolicy` and the workflow's rules together.

    ``added``: what a resuming runtime adds (`resumed_policy`), asked only
    about the calls this policy lets through.
    """

    allow: tuple[PermissionRule, ...] = ()
    deny: tuple[PermissionRule, ...] = ()
    sandbox: bool = False
    hook: PermissionHook | None = None
    ask: Asker | None = None
    always: set[str] = field(default_factory=set)  # tools a person allowed for the whole run
    added: PermissionPolicy | None = None

    @classmethod
    def of(
        cls,
        runtime: ToolPolicy | None,
        allow: Iterable[str] = (),
        deny: Iterable[str] = (),
        added: ToolPolicy | None = None,
    ) -> PermissionPolicy:
        """The policy of a run: the runtime's settings and the workflow's rules."""
        runtime = runtime or ToolPolicy()
        return cls(
            allow=tuple(PermissionRule.parse(r) for r in (*runtime.allow, *allow)),
            deny=tuple(PermissionRule.parse(r) for r in (*runtime.deny, *deny)),
            sandbox=runtime.sandbox,
            hook=runtime.hook,
            ask=runtime.ask,
            added=None if added is None else cls.of(added),
        )

    @property
    def active(self) -> bool:
        """Whether anything can be decided: otherwise every call runs, unrecorded."""
        return bool(self.allow or self.deny or self.sandbox or self.hook or self.ask or self.added)

    async def decide(
        self,
        request: ToolRequest,
        allow: Sequence[PermissionRule] = (),
        deny: Sequence[PermissionRule] = (),
        directory: Path | None = None,
    ) -> PermissionDecision | None:
        """The decision about ``request`` (None: nothing decided, it runs).

        ``allow`` and ``deny`` are the agent's own rules, added to the run's;
        ``directory`` is where the call's relative paths lead (the workflow's).
        """
        decision = await self._decide(request, allow, deny, directory)
        if self.added is None or (decision is not None and not decision.allowed):
            return decision
        added = await self.added._decide(request, (), (), directory)
        if added is not None and not added.allowed:
            return added
        return decision or added

    async def _decide(
        self,
        request: ToolRequest,
        allow: Sequence[PermissionRule],
        deny: Sequence[PermissionRule],
        directory: Path | None,
    ) -> PermissionDecision | None:
        if self.sandbox and request.tool not in READ_ONLY_TOOLS:
            reason = "the run is sandboxed: only read, glob and grep may run"
            return PermissionDecision(False, "sandbox", reason)
        call = _Call(request, directory)
        await call.read_ahead((*self.deny, *deny, *self.allow, *allow))
        denied = _deny(call, (*self.deny, *deny))
        if denied is not None:
            return await self._denied(request, denied)
        if self.hook is not None:
            answered = await self._hooked(request)
            if answered is not None:
                return answered
        return await self._allowed(call, (*self.allow, *allow))

    async def _denied(self, request: ToolRequest, denied: _RuleMatch) -> PermissionDecision:
        """A deny rule covers the call (refused), or may cover it (a person decides, if any)."""
        if denied.certain:
            what = f": {denied.reason}" if denied.reason else ""
            return PermissionDecision(False, "rule", f"denied by the rule {denied.rule}{what}")
        if self.ask is not None:
            return await self._ask(request, sticky=False)
        reason = f"the rule {denied.rule} may cover this call ({denied.reason})"
        return PermissionDecision(False, "rule", f"{reason}; nobody was there to ask (--ask)")

    async def _hooked(self, request: ToolRequest) -> PermissionDecision | None:
        """The permission hook's answer; None when it leaves the call to the allow rules."""
        assert self.hook is not None
        answer = self.hook(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if answer is True:
            return PermissionDecision(True, "hook", "allowed by the permission hook")
        if answer is False or isinstance(answer, str):
            reason = answer if isinstance(answer, str) and answer else ""
            return PermissionDecision(False, "hook", reason or "denied by the permission hook")
        return None

    async def _allowed(
        self, call: _Call, rules: Sequence[PermissionRule]
    ) -> PermissionDecision | None:
        """What the allow rules (or else the person) say; None: nothing decided, it runs."""
        refusal = _uncovered(call, rules) if rules else None
        if rules and refusal is None:
            return PermissionDecision(True, "rule", _allowed_by(call, rules))
        if self.ask is not None:
            return await self._ask(call.request, sticky=True)
        if refusal is not None:
            return PermissionDecision(False, "rule", refusal)
        return None

    async def _ask(self, request: ToolRequest, *, sticky: bool) -> PermissionDecision:
        """Puts the call to the person. ``sticky``: "always" holds for the tool from now on.

        A call a deny rule may cover is asked about every time: an "always"
        said about another call of the tool does not answer for it.
        """
        if self.ask is _nobody:
            reason = "the run asks a person about this call (--ask), and nobody is here to answer"
            return PermissionDecision(False, "ask", reason)
        said = f"allowed: {request.tool} always, said at the terminal"
        if sticky and request.tool in self.always:
            return PermissionDecision(True, "ask", said)
        assert self.ask is not None
        answer = await self.ask(request)
        if answer == "always" and sticky:
            self.always.add(request.tool)
            return PermissionDecision(True, "ask", said)
        if answer in ("yes", "always"):
            return PermissionDecision(True, "ask", "allowed at the terminal")
        return PermissionDecision(False, "ask", "denied at the terminal")


def _deny(call: _Call, rules: Sequence[PermissionRule]) -> _RuleMatch | None:
    """The first deny rule that covers the call; else the first that may; else None."""
    maybe: _RuleMatch | None = None
    for rule in rules:
        verdict = rule.denies(call)
        if verdict is not None and verdict.certain:
            return verdict
        maybe = maybe or verdict
    return maybe


def _uncovered(call: _Call, rules: Sequence[PermissionRule]) -> str | None:
    """Why the allow ``rules`` together do not cover the call, or None: they do.

    Every subject must be covered by some rule; a patterned rule cannot vouch
    for a call with a part that cannot be read.
    """
    named = [rule for rule in rules if rule.names(call.request.tool)]
    listed = ", ".join(str(rule) for rule in rules)
    if any(rule.pattern is None for rule in named):
        return None
    if not named:
        return f"not allowed: the allow rules are {listed}"
    subjects, unclear = call.reading
    if unclear:
        return f"not allowed: {unclear[0]}, so no allow rule ({listed}) can vouch for it"
    for subject in subjects:
        if not any(rule.covers(subject) for rule in named):
            return (
                f"not allowed: {_shown(subject)} is covered by none of the allow rules ({listed})"
            )
    return None


def _allowed_by(call: _Call, rules: Sequence[PermissionRule]) -> str:
    """Which allow rules let the call through (those covering one of its subjects)."""
    named = [rule for rule in rules if rule.names(call.request.tool)]
    used = [rule for rule in named if rule.pattern is None][:1]
    if not used:
        subjects, _ = call.reading
        covering = (next(r for r in named if r.covers(s)) for s in subjects)
        used = list(dict.fromkeys(covering)) or named[:1]
    plural = "s" if len(used) > 1 else ""
    return f"allowed by the rule{plural} " + ", ".join(map(str, used))


def _shown(subject: _Subject) -> str:
    """A subject as a reason names it; an open one ends with what may follow."""
    text = subject.forms[0] or "."
    if len(text) > _SHOWN:
        text = text[: _SHOWN - 1] + "…"
    return {None: text, "": f"{text}…", " ": f"{text} …"}[subject.open]


_SHOWN: Final = 200  # characters of a command or path a reason quotes
