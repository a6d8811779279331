"""The workflow format as msgspec Structs: the data model of SPEC.md sections 1-3.

These types are the one model both front ends produce: the YAML/JSON loader
converts documents into them, and the Python builders construct them directly.
Field names are snake_case in Python and camelCase in documents
(``depends_on`` <-> ``dependsOn``), the spelling zenflow uses.

Structs here only describe; rules that span fields (mutual exclusions, references,
cycles) live in the validator, so that every problem is reported with its location.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

import msgspec

__all__ = [
    "AGENT_BUILTINS",
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_MAX_TURNS",
    "THINKING_LEVELS",
    "WORKTREE_PER_STEP",
    "Agent",
    "Check",
    "Control",
    "ControlLimits",
    "Coordinator",
    "Edge",
    "Graph",
    "Human",
    "InputSpec",
    "ItemSource",
    "Loop",
    "McpServer",
    "MemoryWindow",
    "ModelPrice",
    "Options",
    "Permissions",
    "ScriptReply",
    "ScriptToolCall",
    "State",
    "Step",
    "Supervision",
    "ThinkingLevel",
    "Workflow",
    "parse_duration",
]

DEFAULT_MAX_CONCURRENCY = 5
"""Steps in parallel when neither the workflow nor the caller says (zenflow's default)."""

DEFAULT_MAX_TURNS = 50
"""Tool-calling turns per agent step visit when ``maxTurns`` is 0 or absent."""

InputType = Literal["string", "integer", "number", "boolean", "object", "array", "any"]
OnStepFailure = Literal["cascade", "skip-dependents", "abort"]
OutputMode = Literal["", "last", "cumulative", "summary"]  # summary: forEach, an extension
OnLimit = Literal["returnLast", "fail", "returnWithFlag"]
ThinkingLevel = Literal["off", "low", "medium", "high"]
"""How much an agent's model reasons before it answers (docs/providers.md, "Reasoning")."""
THINKING_LEVELS: tuple[ThinkingLevel, ...] = ("off", "low", "medium", "high")
RestartStrategy = Literal["one_for_one", "one_for_all", "rest_for_one"]


class _Spec(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    omit_defaults=True,
    rename="camel",
):
    """Base for every document type: immutable, camelCase keys, unknown keys rejected."""


class InputSpec(_Spec, frozen=True):
    """A declared run input (extension). No ``default`` means the input is required."""

    type: InputType = "any"
    default: Any | msgspec.UnsetType = msgspec.UNSET
    description: str | None = None

    @property
    def required(self) -> bool:
        """True when the caller must supply a value."""
        return self.default is msgspec.UNSET


class ScriptToolCall(_Spec, frozen=True):
    """A tool call the ``scripted`` model makes: ``{name, arguments}``."""

    name: str
    arguments: dict[str, Any] = {}


class ScriptReply(_Spec, frozen=True):
    """One reply of the ``scripted`` model; a bare string in a document means ``content``."""

    content: str | None = None
    tool_calls: list[ScriptToolCall] = []
    reasoning: str | None = None
    """Streamed as the reply's reasoning (``output`` events with ``reasoning``)."""


class McpServer(_Spec, frozen=True):
    """An MCP tool server an agent may use (``mcpServers:``): a command (stdio) or a URL.

    ``env`` and ``headers`` values may name environment variables as ``${VAR}``;
    their values are treated as secrets (never recorded).
    """

    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    timeout: str = "60s"
    """How long the server may take to answer one request (``initialize``, listing its
    tools, a tool call); past it the step fails, or for a call the model is told."""


class Permissions(_Spec, frozen=True):
    """``permissions:`` of a workflow or an agent: which tool calls may run.

    Each rule is ``NAME`` or ``NAME(PATTERN)``: a tool's exact name, and a glob
    matched against what the call acts on (``bash(git *)``, ``write(docs/*)``,
    ``github.*``; ``_rules.py`` checks them). A deny rule always wins; once any
    allow rule is given, a call the allow rules do not cover is denied
    (docs/tools.md).
    """

    allow: list[str] = []
    deny: list[str] = []


AGENT_BUILTINS = frozenset(("bash", "read", "write", "glob", "grep"))
"""zenflow's built-in tools an agent may be given (``tools:``)."""


class Agent(_Spec, frozen=True):
    """An LLM configuration that steps reference by name (zenflow ``AgentConfig``)."""

    description: str | None = None
    prompt: str | None = None
    model: str | None = None
    tools: list[str] | None = None
    disallowed_tools: list[str] | None = None
    permissions: Permissions | None = None  # extension: added to the workflow's rules
    max_turns: int = 0
    temperature: float | None = None
    top_p: float | None = None
    result_schema: dict[str, Any] | None = None
    script: list[str | ScriptReply] | None = None  # extension: replies of the scripted model
    max_cost: float | None = None
    """Extension: USD this agent's model calls may cost in the whole run (docs/prices.md)."""
    thinking: ThinkingLevel | None = None
    """Extension: how much the model reasons; None: the run's ``--thinking``, else the
    provider's default."""

    @property
    def turns(self) -> int:
        """The effective turn cap: 0 and absent both mean the default of 50."""
        return self.max_turns or DEFAULT_MAX_TURNS


class MemoryWindow(_Spec, frozen=True):
    """``memory: {window: N}``: an agent keeps the last N iterations' turns."""

    window: int


class ItemSource(_Spec, frozen=True):
    """``forEach: {lines: FILE}`` or ``{handler: module:function}`` (extension): items
    read as the forEach's window moves, never held all at once.

    ``lines`` is a JSON-lines file beside the workflow (one JSON value a line);
    ``handler`` a Python function returning an iterable or a generator, sync or
    async. Exactly one of the two (the validator says so).
    """

    lines: str | None = None
    handler: str | None = None


class Loop(_Spec, frozen=True):
    """A repeat-until or forEach loop (SPEC 2); ``steps`` makes it a multi-step body."""

    for_each: str | list[Any] | ItemSource | None = None
    max_iterations: int | None = None
    until: str | None = None
    until_agent: str | None = None
    delay: str | None = None
    max_concurrency: int = 0
    steps: list[Step] | None = None
    output_mode: OutputMode = ""
    on_max_iterations: OnLimit = "returnLast"
    feedback: bool = True
    memory: Literal["fresh", "accumulate"] | MemoryWindow = "fresh"
    keep_last: int | None = None  # extension: keep only the last N iterations' records

    @property
    def is_for_each(self) -> bool:
        """True for a forEach loop, False for repeat-until."""
        return self.for_each is not None


class Edge(_Spec, frozen=True):
    """A graph transition; the first edge whose condition holds wins."""

    from_: str = msgspec.field(name="from")
    to: str
    condition: str | None = None
    description: str | None = None


class Graph(_Spec, frozen=True):
    """A state machine over step-like states (SPEC 3)."""

    start: str
    states: dict[str, State]
    edges: list[Edge] = []
    max_steps: int = 50
    on_max_steps: OnLimit = "returnLast"
    feedback_on_revisit: bool = True


class Check(_Spec, frozen=True):
    """A deterministic check in a control loop: CEL over ``result``, templated feedback."""

    expr: str
    feedback: str | None = None


class ControlLimits(_Spec, frozen=True):
    """Bounds of a control loop (SPEC 2.5)."""

    max_iterations: int = 5
    max_tokens: int | None = None
    max_retries: int = 3
    max_replans: int = 1
    timeout: str | None = None
    no_progress_after: int = 2
    max_infra_retries: int = 2


class Control(_Spec, frozen=True):
    """A planner -> actor -> evaluator -> decide loop (SPEC 2.5)."""

    objective: str
    actor: str
    evaluator: str
    criteria: str | None = None
    planner: str | None = None
    delegate: str | None = None
    checks: list[Check] = []
    limits: ControlLimits = ControlLimits()
    escalate: Literal["stop", "human"] = "stop"


class Human(_Spec, frozen=True):
    """A step that waits for a person's answer (SPEC 2.6)."""

    prompt: str
    schema: dict[str, Any] | None = None


class _Body(_Spec, frozen=True):
    """What a step or a graph state does: exactly one kind, plus common keys."""

    # What it runs (exactly one of these, or `instructions` alone for the default agent).
    agent: str | None = None
    instructions: str | None = None
    command: str | list[str] | None = None
    handler: str | None = None
    include: str | None = None
    graph: Graph | None = None
    control: Control | None = None
    human: Human | None = None
    tool: str | None = None
    tool_input: dict[str, Any] | None = None
    loop: Loop | None = None
    kind_block: dict[str, Any] | None = None
    """The block of a kind from the registry (`register_step_kind`), under the kind's
    name: ``echo: {text: hi}`` in a document is ``kind_block={"echo": {"text": "hi"}}``."""
    # Inputs of an `include`; `env`/`cwd`/`stdin` of a `command`.
    inputs: dict[str, Any] | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None
    stdin: str | None = None
    # Common keys (zenflow) and extensions.
    context_files: list[str] = []
    model: str | None = None
    timeout: str | None = None
    retries: int = 0
    max_retries: int | None = None
    on_error: Literal["fail", "continue"] = "fail"
    max_cost: float | None = None
    """Extension: USD the model calls of this step may cost, everything it contains
    included (a loop's iterations, a graph's states, an include's steps)."""

    @property
    def kind(self) -> str:
        """The one thing this step does (``loop`` for a loop carrying its own steps).

        For a looped single step (``loop`` without ``steps`` beside e.g. ``agent``)
        this is the kind of the looped work; the validator guarantees one kind.

        What each kind is, its keys and checks, is in the kinds' registry
        (`cadenza.workflow.kinds`); this names the kinds older than it by their
        fields, a closed list (a kind added since has its block in ``kind_block``),
        written out because a step asks it on every start: 0.2 us, where a walk of
        the registry took 0.7 to 1 us (tests/test_step_kinds.py checks they agree).
        """
        if self.graph is not None:
            return "graph"
        if self.control is not None:
            return "control"
        if self.human is not None:
            return "human"
        if self.include is not None:
            return "include"
        if self.command is not None:
            return "command"
        if self.handler is not None:
            return "handler"
        if self.tool is not None:
            return "tool"
        if self.agent is not None or self.instructions is not None:
            return "agent"
        if self.kind_block:
            return next(iter(self.kind_block))
        return "loop"


class Step(_Body, frozen=True, kw_only=True):
    """A node of a workflow DAG (or of a loop body)."""

    id: str
    depends_on: list[str] = []
    condition: str | None = None


class State(_Body, frozen=True, kw_only=True):
    """A graph state: a step without ``id``/``dependsOn``; the key in ``states`` names it."""

    feedback: bool | None = None


WORKTREE_PER_STEP: Final = "worktree-per-step"
"""``options.isolation`` that gives each writing step a git worktree of its own."""


class Supervision(_Spec, frozen=True):
    """``options.supervisor``: what a list of steps does when one of them fails (OTP's rules).

    A step that fails for good (its ``retries`` spent, no ``onError: continue``) is
    run again from its start; ``one_for_all`` also stops and re-runs every other
    step of its list that is running, ``rest_for_one`` those started after it.
    More than ``max_restarts`` restarts within ``within`` (absent: ever) and the
    supervisor gives up: the list stops, failed (``SupervisorEscalation``).
    """

    strategy: RestartStrategy = "one_for_one"
    max_restarts: int = 3
    within: str | None = None


class Options(_Spec, frozen=True):
    """Run-wide execution options (zenflow section 8, plus ``maxTokens``)."""

    max_concurrency: int = 0
    on_step_failure: OnStepFailure = "cascade"
    timeout: str | None = None
    step_timeout: str | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    """Extension: USD the run's model calls may cost (docs/prices.md)."""
    isolation: Literal["none", "worktree-per-step"] | None = None
    """``worktree-per-step``: each command, tool and agent step in a git worktree of its own."""
    scheduler: Literal["dependency-first", "round-robin", "least-busy"] = "dependency-first"
    max_retries: int | None = None
    supervisor: Supervision | None = None
    """Restarts of failed steps, per list of steps (extension; absent: none)."""


class ModelPrice(_Spec, frozen=True):
    """An entry of ``prices:``: a model's price in USD per million tokens (extension)."""

    input: float
    output: float
    cached_input: float | None = None
    """Prompt tokens read from the provider's cache; absent: priced as ``input``."""


class Coordinator(_Spec, frozen=True):
    """``coordinator: {agent: NAME}``: that agent wakes on each message (SPEC 5)."""

    agent: str
    max_wakes: int = 100


class Workflow(_Spec, frozen=True):
    """A whole workflow document."""

    name: str
    steps: list[Step]
    description: str | None = None
    version: int = 1
    inputs: dict[str, InputSpec] = {}
    agents: dict[str, Agent] = {}
    includes: dict[str, str] = {}
    options: Options = Options()
    coordinator: Coordinator | None = None
    output: str | None = None
    loop: Loop | None = None
    mcp_servers: dict[str, McpServer] = {}
    permissions: Permissions = Permissions()
    prices: dict[str, ModelPrice] | str = {}
    """Extension: prices of models by spec, over the shipped ones, or the path of a YAML
    or JSON file of them (relative to this file; the loader reads it in)."""


_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> float:
    """Seconds in a zenflow duration (``1h30m``, ``45s``).

    Raises:
        ValueError: The text is not of the form ``^(\\d+h)?(\\d+m)?(\\d+s)?$``
            with at least two characters.
    """
    match = _DURATION.match(text)
    if match is None or len(text) < 2:
        raise ValueError(f"{text!r} is not a duration like '30s', '5m' or '1h30m'")
    hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return float(hours * 3600 + minutes * 60 + seconds)
