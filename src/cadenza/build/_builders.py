"""The builders of `cadenza.build`: workflows in code, as the very Structs YAML loads into.

Each step builder returns a `BuiltStep`: the `Step` Struct a YAML step would load
into, plus what its workflow must declare for it (agents defined inline,
workflows included from memory). `workflow` gathers those, builds the
`Workflow` Struct and runs it through the loader's own validation, so a
builder's mistake is reported exactly as the same mistake in a file would be,
located by its document path (``steps[1].loop.until``).

Python callables become strings the document can hold, so a built workflow is
data like any other (stored with its runs, shown by the viewer):

* a handler function is named ``module:qualname`` when that name leads back to
  it (as a handler in YAML is named), and is otherwise registered in the loop
  SDK's `HANDLERS` under a generated name;
* a predicate (``until``, ``when``, edge ``when``, ``items``, ``output``, check
  ``expr``) is registered as a Python expression and the field holds its
  ``@python:`` marker (``workflow/_python.py``); it is called with a
  `PredicateContext` holding what a CEL expression would see at that place.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, TypeAlias, TypeVar

import msgspec

from cadenza.loops._functions import HANDLERS
from cadenza.actors import StepContext, StepOutput
from cadenza.actors.steps import StepsView
from cadenza.actors.containers import SAFETY_CAP
from cadenza.workflow import (
    Agent,
    Check,
    Control,
    ControlLimits,
    Coordinator,
    Edge,
    Graph,
    Human,
    InputSpec,
    LoadedWorkflow,
    Loop,
    McpServer,
    MemoryWindow,
    Options,
    ScriptReply,
    State,
    Step,
    Supervision,
    Workflow,
)
from cadenza.workflow import build_loaded
from cadenza.workflow import AsyncPythonExpression, python_expression, register_python


END = "END"
"""The state name an edge goes to to finish a graph."""

InputType = Literal["string", "integer", "number", "boolean", "object", "array", "any"]
OnError = Literal["fail", "continue"]
OnLimit = Literal["returnLast", "fail", "returnWithFlag"]
RestartStrategy = Literal["one_for_one", "one_for_all", "rest_for_one"]
Memory = Literal["fresh", "accumulate"] | MemoryWindow | int
WorkflowRef = str | Workflow | LoadedWorkflow

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PredicateContext:
    """What a Python predicate is called with: what a CEL expression sees there (SPEC 4).

    Which fields are set depends on the place, as for CEL; the others are None
    (``visits`` empty).

    Attributes:
        inputs: The run's inputs (an included workflow's own inputs inside it).
        steps: Outputs of the steps in scope, by id (``steps["critique"].content``);
            in a graph, each visited state's latest output under its name too.
        iteration: A repeat-until loop's 0-based iteration (the one just
            completed, in ``until``).
        item: The forEach element, inside a forEach body.
        index: Its position.
        content: The output just completed: the iteration's, in ``until`` (a
            loop body's is its last step's), or the graph state's visit's, in
            an edge's ``when``.
        result: Its result.
        status: Its status.
        state: The graph state just visited (edge ``when``).
        step: That visit's 1-based number.
        visits: Visits per state so far, this one included.
    """

    inputs: Mapping[str, Any]
    steps: Mapping[str, StepOutput]
    iteration: int | None = None
    item: Any = None
    index: int | None = None
    content: str | None = None
    result: Any = None
    status: str | None = None
    state: str | None = None
    step: int | None = None
    visits: Mapping[str, int] = field(default_factory=lambda: _EMPTY)


def _context(names: Mapping[str, Any]) -> PredicateContext:
    """A `PredicateContext` from the names a CEL expression would see."""
    get = names.get
    visits = get("visits")
    return PredicateContext(
        inputs=get("inputs") or _EMPTY,
        steps=StepsView(get("steps") or _EMPTY),
        iteration=get("iteration"),
        item=get("item"),
        index=get("index"),
        content=get("content"),
        result=get("result"),
        status=get("status"),
        state=get("state"),
        step=get("step"),
        # A read-only view: the graph's own counts, which change only between calls.
        visits=_EMPTY if visits is None else MappingProxyType(visits),
    )


Condition: TypeAlias = str | Callable[[PredicateContext], bool | Awaitable[bool]]
"""CEL text, or a callable (plain or ``async``) that returns True or False."""
Items: TypeAlias = (
    Sequence[Any] | str | Callable[[PredicateContext], list[Any] | Awaitable[list[Any]]]
)
OutputExpression: TypeAlias = str | Callable[[PredicateContext], Any]


def _expression(value: str | Callable[[PredicateContext], Any] | None, what: str) -> str | None:
    """CEL text as it is; a callable as the marker of its registered expression."""
    if value is None or isinstance(value, str):
        return value
    if not callable(value):
        raise TypeError(f"{what} must be CEL text or a callable, not {type(value).__name__}")
    return register_python(value, _context)


@dataclass(frozen=True, slots=True)
class BuiltStep:
    """What a step builder returns: the `Step` Struct, and what its workflow must declare.

    Attributes:
        step: The step exactly as a YAML document would load into it.
        agents: Agents this step (or one inside it) defines inline, by name.
        includes: Workflows included from memory, by the reference the step uses.
        feedback: As a graph state: ``feedback`` (None: the graph's default).
    """

    step: Step
    agents: Mapping[str, Agent] = field(default_factory=lambda: _EMPTY)
    includes: Mapping[str, LoadedWorkflow] = field(default_factory=lambda: _EMPTY)
    feedback: bool | None = None

    @property
    def id(self) -> str:
        """The step's id (a graph state's name, as a state)."""
        return self.step.id


StepLike: TypeAlias = BuiltStep | Step
_T = TypeVar("_T")


def _put(into: dict[str, _T], key: str, value: _T, what: str) -> None:
    have = into.get(key)
    if have is None:
        into[key] = value
    elif have is not value and have != value:
        raise ValueError(
            f"two different {what}s are named {key!r} in one workflow; give one another name"
        )


def _gather(
    parts: Iterable[StepLike],
) -> tuple[dict[str, Agent], dict[str, LoadedWorkflow]]:
    agents: dict[str, Agent] = {}
    includes: dict[str, LoadedWorkflow] = {}
    for part in parts:
        if isinstance(part, BuiltStep):
            for name, config in part.agents.items():
                _put(agents, name, config, "agent")
            for ref, child in part.includes.items():
                _put(includes, ref, child, "included workflow")
    return agents, includes


def _struct(part: StepLike, where: str) -> Step:
    if isinstance(part, BuiltStep):
        if part.feedback is not None:
            raise ValueError(
                f"{where}: step {part.id!r} has feedback=, which applies to graph states only"
            )
        return part.step
    if isinstance(part, Step):
        return part
    raise TypeError(f"{where}: expected a step from a builder, not {type(part).__name__}")


def _structs(parts: Sequence[StepLike], where: str) -> list[Step]:
    if isinstance(parts, BuiltStep | Step):
        raise TypeError(f"{where} must be a list of steps, not one step")
    return [_struct(part, f"{where}[{i}]") for i, part in enumerate(parts)]


def _ids(depends_on: Iterable[str | StepLike]) -> list[str]:
    return [d if isinstance(d, str) else _struct_id(d) for d in depends_on]


def _struct_id(part: StepLike) -> str:
    if isinstance(part, BuiltStep | Step):
        return part.id
    raise TypeError(f"depends_on takes step ids or steps, not {type(part).__name__}")


def _step(
    id: str,
    depends_on: Iterable[str | StepLike],
    when: Condition | None,
    timeout: str | None,
    retries: int,
    on_error: OnError,
    **fields: Any,
) -> Step:
    return Step(
        id=id,
        depends_on=_ids(depends_on),
        condition=_expression(when, "when"),
        timeout=timeout,
        retries=retries,
        on_error=on_error,
        **fields,
    )


# Handler functions -------------------------------------------------------------

_lock = threading.Lock()
_references: dict[int, tuple[Callable[[StepContext], Any], str]] = {}  # keeps each alive


def _handler_reference(function: Callable[[StepContext], Any]) -> str:
    """How a step names ``function``: ``module:qualname``, else a `HANDLERS` entry."""
    if not callable(function):
        raise TypeError(f"a handler must be callable, not {type(function).__name__}")
    with _lock:
        known = _references.get(id(function))
        if known is not None:
            return known[1]
        reference = _importable(function) or HANDLERS.add(function)
        _references[id(function)] = (function, reference)
        return reference


def _importable(function: Callable[..., Any]) -> str | None:
    """``module:qualname`` when importing that gives back ``function`` (as on a worker).

    ``__main__`` is left out: another process (a worker, a resume) has its own.
    """
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(name, str) or module == "__main__":
        return None
    if not all(part.isidentifier() for part in (*module.split("."), *name.split("."))):
        return None  # a lambda, a function defined inside another
    target: Any = sys.modules.get(module)
    for part in name.split("."):
        target = getattr(target, part, None)
    return f"{module}:{name}" if target is function else None


# Step builders -----------------------------------------------------------------


def handler(
    id: str,
    function: Callable[[StepContext], Any] | str,
    *,
    depends_on: Iterable[str | StepLike] = (),
    when: Condition | None = None,
    timeout: str | None = None,
    retries: int = 0,
    on_error: OnError = "fail",
    feedback: bool | None = None,
) -> BuiltStep:
    """A ``handler`` step: a Python function, plain or ``async``, given a `StepContext`.

    It returns the step's content (a str), a dict (its result, and JSON content),
    or None, as a handler named in YAML does. A string is a reference as YAML
    writes it (``"package.module:function"``).

    Args:
        id: The step id.
        function: The function, or its ``module:function`` reference.
        depends_on: Steps (or their ids) that must finish first.
        when: The step's ``condition``: CEL or a callable; false skips the step.
        timeout: A duration (``30s``) for each attempt.
        retries: Re-runs of the whole step after a failure.
        on_error: ``continue`` records a failure without failing the dependents.
        feedback: As a graph state only: whether a revisit sees its previous output.
    """
    reference = function if isinstance(function, str) else _handler_reference(function)
    step = _step(id, depends_on, when, timeout, retries, on_error, handler=reference)
    return BuiltStep(step, feedback=feedback)


def command(
    id: str,
    command: str | Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdin: str | None = None,
    depends_on: Iterable[str | StepLike] = (),
    when: Condition | None = None,
    timeout: str | None = None,
    retries: int = 0,
    on_error: OnError = "fail",
    feedback: bool | None = None,
) -> BuiltStep:
    """A ``command`` step: a string runs under ``/bin/sh -c``, a list is executed as is.

    Values reach the command through ``env`` (whose values may be ``{{ }}``
    templates) or ``stdin``, never spliced into the command line. The content is
    stdout, the result ``{exitCode, stdout, stderr}``; a non-zero exit fails the step.
    Other arguments as for `handler`.
    """
    line = command if isinstance(command, str) else list(command)
    step = _step(
        id,
        depends_on,
        when,
        timeout,
        retries,
        on_error,
        command=line,
        env=None if env is None else dict(env),
        cwd=cwd,
        stdin=stdin,
    )
    return BuiltStep(step, feedback=feedback)


def tool(
    id: str,
    tool: str | Callable[..., Any],
    tool_input: Mapping[str, Any] | None = None,
    *,
    depends_on: Iterable[str | StepLike] = (),
    when: Condition | None = None,
    timeout: str | None = None,
    retries: int = 0,
    on_error: OnError = "fail",
    feedback: bool | None = None,
) -> BuiltStep:
    """A ``tool`` step: one call of a tool, without a model (zenflow 4.1).

    ``tool`` is a built-in (``read``, ``write``, ``glob``, ``grep``, ``bash``), a
    ``package.module:function`` reference, or an importable function (a module-level
    ``def``; it is stored as its reference, as a worker or a resume must import it).
    ``tool_input`` holds its arguments as written, except that a top-level string
    starting with ``$`` is CEL (``"$steps.draft.content"``). Other arguments as for
    `handler`.

    Raises:
        TypeError: ``tool`` is a function that cannot be imported by its name
            (a lambda, a nested function, one defined in ``__main__``).
    """
    if isinstance(tool, str):
        name = tool
    else:
        found = _importable(tool)
        if found is None:
            raise TypeError(
                f"tool step {id!r}: {tool!r} cannot be imported by name; define the "
                "tool at module level, or pass its 'package.module:function' reference"
            )
        name = found
    step = _step(
        id,
        depends_on,
        when,
        timeout,
        retries,
        on_error,
        tool=name,
        tool_input=None if tool_input is None else dict(tool_input),
    )
    return BuiltStep(step, feedback=feedback)


def agent(
    id: str,
    instructions: str | None = None,
    *,
    agent: str | Agent | None = None,
    name: str | None = None,
    prompt: str | None = None,
    model: str | None = None,
    tools: Sequence[str] | None = None,
    disallowed_tools: Sequence[str] | None = None,
    max_turns: int = 0,
    temperature: float | None = None,
    top_p: float | None = None,
    result_schema: Mapping[str, Any] | None = None,
    script: Sequence[str | ScriptReply] | None = None,
    description: str | None = None,
    context_files: Sequence[str] = (),
    max_retries: int | None = None,
    depends_on: Iterable[str | StepLike] = (),
    when: Condition | None = None,
    timeout: str | None = None,
    retries: int = 0,
    on_error: OnError = "fail",
    feedback: bool | None = None,
) -> BuiltStep:
    """An agent step: an LLM with a tool-calling loop, given ``instructions``.

    The agent is one of three things, as in YAML:

    * defined here: any of ``prompt``, ``tools``, ``script``... (and ``model``)
      define it, under ``name`` (default: the step id), in the workflow's agents;
    * ``agent="writer"``: an agent of the workflow's ``agents`` (``model`` then
      overrides its model for this step), or ``agent=Agent(...)``, defined here;
    * neither: the default agent (``--model`` / ``CADENZA_MODEL``, or ``model``).

    Args:
        id: The step id.
        instructions: What to do; ``{{ CEL }}`` templates are rendered first.
        agent: The agent's name, or its `Agent` definition.
        name: The name of an agent defined here (default: the step id).
        prompt, model, tools, disallowed_tools, max_turns, temperature, top_p,
            result_schema, script, description: The agent's fields (SPEC 5);
            ``script`` holds the replies of the built-in ``scripted`` model.
        context_files: Files whose text the prompt includes.
        max_retries: Retries of each model call.
        depends_on, when, timeout, retries, on_error, feedback: As for `handler`.

    Raises:
        TypeError: ``agent="name"`` together with fields that would define another.
    """
    fields = {
        "description": description,
        "prompt": prompt,
        "tools": tools,
        "disallowed_tools": disallowed_tools,
        "max_turns": max_turns or None,
        "temperature": temperature,
        "top_p": top_p,
        "result_schema": result_schema,
        "script": script,
    }
    defined = sorted(key for key, value in fields.items() if value is not None)
    agents: dict[str, Agent] = {}
    step_model = model
    reference: str | None
    if defined:
        if agent is not None:
            raise TypeError(
                f"agent step {id!r}: give the agent's name or definition, or its fields "
                f"({', '.join(defined)}), not both"
            )
        reference = name or id
        agents[reference] = Agent(
            description=description,
            prompt=prompt,
            model=model,
            tools=None if tools is None else list(tools),
            disallowed_tools=None if disallowed_tools is None else list(disallowed_tools),
            max_turns=max_turns,
            temperature=temperature,
            top_p=top_p,
            result_schema=None if result_schema is None else dict(result_schema),
            script=None if script is None else list(script),
        )
        step_model = None  # the model is the agent's own
    elif isinstance(agent, Agent):
        reference = name or id
        agents[reference] = agent
    else:
        reference = agent
    step = _step(
        id,
        depends_on,
        when,
        timeout,
        retries,
        on_error,
        agent=reference,
        instructions=instructions,
        model=step_model,
        context_files=list(context_files),
        max_retries=max_retries,
    )
    return BuiltStep(step, agents=MappingProxyType(agents), feedback=feedback)


def include(
    id: str,
    workflow: WorkflowRef,
    *,
    inputs: Mapping[str, Any] | None = None,
    depends_on: Iterable[str | StepLike] = (),
    timeout: str | None = None,
    retries: int = 0,
    on_error: OnError = "fail",
    feedback: bool | None = None,
) -> BuiltStep:
    """An ``include`` step: a child workflow run as one step, its steps at ``id.<step>``.

    Args:
        id: The step id.
        workflow: A built workflow (`workflow`), a `Workflow` Struct, or a
            reference as YAML writes it (a path, or a name in the parent's ``includes``).
        inputs: The child's inputs; strings may be ``{{ CEL }}`` templates over
            the parent's scope.
        depends_on, timeout, retries, on_error, feedback: As for `handler`
            (an include step has no ``when``, as in zenflow).
    """
    reference, includes = _child(workflow)
    step = _step(
        id,
        depends_on,
        None,
        timeout,
        retries,
        on_error,
        include=reference,
        inputs=None if inputs is None else dict(inputs),
    )
    return BuiltStep(step, includes=includes, feedback=feedback)


def _child(workflow: WorkflowRef) -> tuple[str, Mapping[str, LoadedWorkflow]]:
    """The reference a step uses for ``workflow``, and the in-memory include it needs."""
    if isinstance(workflow, str):
        return workflow, _EMPTY
    if isinstance(workflow, Workflow):
        workflow = build_loaded(workflow, filename=f"<python:{workflow.name}>")
    if not isinstance(workflow, LoadedWorkflow):
        raise TypeError(f"expected a workflow or a reference, not {type(workflow).__name__}")
    name = workflow.workflow.name
    return name, MappingProxyType({name: workflow})


def human(
    id: str,
    prompt: str,
    *,
    schema: Mapping[str, Any] | None = None,
    depends_on: Iterable[str | StepLike] = (),
    when: Condition | None = None,
    timeout: str | None = None,
    on_error: OnError = "fail",
    feedback: bool | None = None,
) -> BuiltStep:
    """A ``human`` step: the run waits for a person's answer, checked against ``schema``.

    ``prompt`` may hold ``{{ CEL }}`` templates. Other arguments as for `handler`.
    """
    body = Human(prompt=prompt, schema=None if schema is None else dict(schema))
    step = _step(id, depends_on, when, timeout, 0, on_error, human=body)
    return BuiltStep(step, feedback=feedback)


def check(expr: str | Callable[[PredicateContext], bool], feedback: str | None = None) -> Check:
    """A control loop's check: CEL over ``result``, or a plain callable given it.

    ``feedback`` (a template) tells the next attempt what failed. Checks run
    synchronously: a callable must be a plain function returning True or False.

    Raises:
        TypeError: ``expr`` is an ``async`` function.
    """
    source = _expression(expr, "a check")
    assert source is not None
    if not isinstance(expr, str) and isinstance(python_expression(source), AsyncPythonExpression):
        raise TypeError("a check is evaluated synchronously: give a plain function, not async")
    return Check(expr=source, feedback=feedback)


def control(
    id: str,
    objective: str,
    *,
    actor: WorkflowRef,
    evaluator: WorkflowRef,
    criteria: str | None = None,
    planner: WorkflowRef | None = None,
    delegate: WorkflowRef | None = None,
    checks: Sequence[Check | str] = (),
    limits: ControlLimits | None = None,
    escalate: Literal["stop", "human"] = "stop",
    depends_on: Iterable[str | StepLike] = (),
    when: Condition | None = None,
    timeout: str | None = None,
    on_error: OnError = "fail",
) -> BuiltStep:
    """A ``control`` step: planner -> actor -> checks -> evaluator -> decide (SPEC 2.5).

    Each role is a workflow honouring its contract (inputs -> output map): built
    here, a `Workflow`, or a reference as YAML writes it. For a loop whose roles
    are plain Python functions, `cadenza.loops.ControlLoop` is shorter.

    Args:
        id: The step id.
        objective: What to achieve (a template).
        actor, evaluator: The required roles.
        criteria: How the evaluator judges (a template).
        planner, delegate: The optional roles.
        checks: Deterministic evidence: `check` results, or CEL strings.
        limits: `ControlLimits` (iterations, tokens, retries, replans, timeout...).
        escalate: ``stop`` or ``human``.
        depends_on, when, timeout, on_error: As for `handler`.
    """
    includes: dict[str, LoadedWorkflow] = {}
    roles: dict[str, str | None] = {}
    for role, ref in (
        ("actor", actor),
        ("evaluator", evaluator),
        ("planner", planner),
        ("delegate", delegate),
    ):
        if ref is None:
            roles[role] = None
            continue
        reference, child = _child(ref)
        roles[role] = reference
        for key, loaded in child.items():
            _put(includes, key, loaded, "included workflow")
    body = Control(
        objective=objective,
        actor=roles["actor"] or "",
        evaluator=roles["evaluator"] or "",
        criteria=criteria,
        planner=roles["planner"],
        delegate=roles["delegate"],
        checks=[c if isinstance(c, Check) else check(c) for c in checks],
        limits=limits if limits is not None else ControlLimits(),
        escalate=escalate,
    )
    step = _step(id, depends_on, when, timeout, 0, on_error, control=body)
    return BuiltStep(step, includes=MappingProxyType(includes))


def _body(
    id: str, steps: Sequence[StepLike] | None, step: StepLike | None, kind: str
) -> tuple[list[Step] | None, Step | None, list[StepLike]]:
    """A loop's own steps, or the one step it repeats (exactly one of them)."""
    if (steps is None) == (step is None):
        raise TypeError(f"{kind} {id!r}: give steps=[...] (a body) or step=... (repeated), one")
    if steps is not None:
        return _structs(steps, f"{kind} {id!r} steps"), None, list(steps)
    assert step is not None
    inner = _struct(step, f"{kind} {id!r} step")
    if inner.depends_on or inner.condition is not None:
        raise ValueError(
            f"{kind} {id!r}: the repeated step's depends_on and when are the loop's; "
            "give them to the loop"
        )
    return None, inner, [step]


def _looped(
    id: str,
    inner: Step | None,
    spec: Loop,
    depends_on: Iterable[str | StepLike],
    when: Condition | None,
    timeout: str | None,
    retries: int,
    on_error: OnError,
) -> Step:
    common = _step(id, depends_on, when, timeout, retries, on_error, loop=spec)
    if inner is None:
        return common
    # The repeated step keeps what it does; its id and common keys are the loop's.
    changes: dict[str, Any] = {
        "id": id,
        "depends_on": common.depends_on,
        "condition": common.condition,
        "loop": spec,
    }
    for key, default in (("timeout", None), ("retries", 0), ("on_error", "fail")):
        if getattr(common, key) != default:
            changes[key] = getattr(common, key)
    return msgspec.structs.replace(inner, **changes)


def loop(
    id: str,
    *,
    steps: Sequence[StepLike] | None = None,
    step: StepLike | None = None,
    max_iterations: int | None = None,
    until: Condition | None = None,
    until_agent: str | None = None,
    delay: str | None = None,
    output_mode: Literal["last", "cumulative"] | None = None,
    on_max_iterations: OnLimit = "returnLast",
    feedback: bool = True,
    memory: Memory = "fresh",
    keep_last: int | None = None,
    depends_on: Iterable[str | StepLike] = (),
    when: Condition | None = None,
    timeout: str | None = None,
    retries: int = 0,
    on_error: OnError = "fail",
) -> BuiltStep:
    """A repeat-until loop (SPEC 2.1): ``steps`` each iteration, or ``step`` repeated.

    Iteration N runs at ``id.N.<step>`` (``id.N`` for a repeated step). After
    each: ``until``, then the judge (``until_agent``), then ``max_iterations``.

    Args:
        id: The step id.
        steps: The loop's body, a sub-DAG run each iteration.
        step: Or one step (its id is replaced by ``id``) to repeat.
        max_iterations: The hard cap; without one, a safety cap of 100.
        until: CEL or a callable, after each iteration; true stops the loop.
        until_agent: A judge agent (its ``resultSchema`` needs ``done``).
        delay: A duration to wait between iterations.
        output_mode: ``last`` (default) or ``cumulative``.
        on_max_iterations: ``returnLast``, ``fail`` or ``returnWithFlag``.
        feedback: Whether an iteration sees the previous one's output.
        memory: ``fresh``, ``accumulate``, or N (keep the last N iterations' turns).
        keep_last: Keep only the last N iterations' records.
        depends_on, when, timeout, retries, on_error: As for `handler`; here they
            belong to the loop as a whole.
    """
    body, inner, parts = _body(id, steps, step, "loop")
    spec = Loop(
        max_iterations=SAFETY_CAP if max_iterations is None else max_iterations,
        until=_expression(until, "until"),
        until_agent=until_agent,
        delay=delay,
        steps=body,
        output_mode=output_mode or "",
        on_max_iterations=on_max_iterations,
        feedback=feedback,
        memory=MemoryWindow(window=memory) if isinstance(memory, int) else memory,
        keep_last=keep_last,
    )
    agents, includes = _gather(parts)
    looped = _looped(id, inner, spec, depends_on, when, timeout, retries, on_error)
    return BuiltStep(looped, agents=MappingProxyType(agents), includes=MappingProxyType(includes))


def for_each(
    id: str,
    items: Items,
    *,
    steps: Sequence[StepLike] | None = None,
    step: StepLike | None = None,
    max_concurrency: int = 0,
    output_mode: Literal["summary"] | None = None,
    depends_on: Iterable[str | StepLike] = (),
    when: Condition | None = None,
    timeout: str | None = None,
    retries: int = 0,
    on_error: OnError = "fail",
) -> BuiltStep:
    """A forEach loop (SPEC 2.2): one iteration per item, at ``id[i].<step>``.

    Args:
        id: The step id.
        items: A list; CEL that yields one; or a callable (plain or ``async``)
            returning one, called once when the step starts.
        steps: The body run for each item (it sees ``item`` and ``index``).
        step: Or one step (its id is replaced by ``id``) run per item.
        max_concurrency: Iterations alive at once (0: all; the run's cap applies).
        output_mode: ``summary``: the step's output counts the items and lists the
            ones that did not complete, and finished items' records leave the
            run's memory (None: every item's content and result, in order).
        depends_on, when, timeout, retries, on_error: As for `handler`.
    """
    body, inner, parts = _body(id, steps, step, "for_each")
    if isinstance(items, str) or callable(items):
        source: str | list[Any] | None = _expression(items, "items")
    else:
        source = list(items)
    spec = Loop(
        for_each=source,
        steps=body,
        max_concurrency=max_concurrency,
        output_mode=output_mode or "",
    )
    agents, includes = _gather(parts)
    looped = _looped(id, inner, spec, depends_on, when, timeout, retries, on_error)
    return BuiltStep(looped, agents=MappingProxyType(agents), includes=MappingProxyType(includes))


def edge(
    from_: str, to: str, *, when: Condition | None = None, description: str | None = None
) -> Edge:
    """A graph edge; after ``from_`` completes, the first edge whose ``when`` holds wins.

    ``when`` is CEL or a callable over a `PredicateContext` (``content``,
    ``state``, ``visits``...); without one the edge always matches. ``to`` may be `END`.
    """
    return Edge(from_=from_, to=to, condition=_expression(when, "when"), description=description)


def _state(name: str, part: BuiltStep | Step | State) -> State:
    if isinstance(part, State):
        return part
    built = part if isinstance(part, BuiltStep) else BuiltStep(part)
    inner = built.step
    if inner.depends_on or inner.condition is not None:
        raise ValueError(f"graph state {name!r} has depends_on or when; edges route a graph")
    fields = msgspec.structs.asdict(inner)
    for key in ("id", "depends_on", "condition"):
        del fields[key]
    return State(**fields, feedback=built.feedback)


def graph(
    id: str,
    *,
    states: Sequence[StepLike] | Mapping[str, StepLike | State],
    edges: Sequence[Edge],
    start: str | None = None,
    max_steps: int = 50,
    on_max_steps: OnLimit = "returnLast",
    feedback_on_revisit: bool = True,
    depends_on: Iterable[str | StepLike] = (),
    when: Condition | None = None,
    timeout: str | None = None,
    retries: int = 0,
    on_error: OnError = "fail",
) -> BuiltStep:
    """A ``graph`` step (SPEC 3): a state machine; visit N of state S runs at ``id.N.S``.

    Args:
        id: The step id.
        states: Steps from the builders, each a state named by its id (or a
            mapping of names to steps); a state's ``feedback=`` applies.
        edges: `edge` results, tried in order after each visit.
        start: The first state (default: the first of ``states``).
        max_steps: Visits at most, then ``on_max_steps``.
        on_max_steps: ``returnLast``, ``fail`` or ``returnWithFlag``.
        feedback_on_revisit: Whether a revisited state sees its previous output.
        depends_on, when, timeout, retries, on_error: As for `handler`.
    """
    named: list[tuple[str, StepLike | State]]
    if isinstance(states, Mapping):
        named = list(states.items())
    else:
        named = [(_struct_id(part), part) for part in states]
    built = {name: _state(name, part) for name, part in named}
    if start is None:
        start = named[0][0] if named else ""
    body = Graph(
        start=start,
        states=built,
        edges=list(edges),
        max_steps=max_steps,
        on_max_steps=on_max_steps,
        feedback_on_revisit=feedback_on_revisit,
    )
    agents, includes = _gather(part for _, part in named if not isinstance(part, State))
    step = _step(id, depends_on, when, timeout, retries, on_error, graph=body)
    return BuiltStep(step, agents=MappingProxyType(agents), includes=MappingProxyType(includes))


# Workflows -------------------------------------------------------------------


def input_(
    type: InputType = "any",
    *,
    default: Any = msgspec.UNSET,
    description: str | None = None,
) -> InputSpec:
    """A declared run input; without ``default`` the caller must give it."""
    return InputSpec(type=type, default=default, description=description)


def workflow_loop(
    *,
    max_iterations: int | None = None,
    until: Condition | None = None,
    until_agent: str | None = None,
    delay: str | None = None,
) -> Loop:
    """A workflow-level loop (SPEC 2.4), for `workflow`'s ``loop``: the whole DAG re-runs.

    As `loop`'s arguments; without ``max_iterations``, a safety cap of 100.
    """
    return Loop(
        max_iterations=SAFETY_CAP if max_iterations is None else max_iterations,
        until=_expression(until, "until"),
        until_agent=until_agent,
        delay=delay,
    )


def workflow(
    name: str,
    *,
    steps: Sequence[StepLike],
    description: str | None = None,
    inputs: Mapping[str, InputSpec | InputType] | None = None,
    agents: Mapping[str, Agent] | None = None,
    includes: Mapping[str, str] | None = None,
    output: OutputExpression | None = None,
    loop: Loop | None = None,
    coordinator: str | Coordinator | None = None,
    max_concurrency: int = 0,
    on_step_failure: Literal["cascade", "skip-dependents", "abort"] = "cascade",
    timeout: str | None = None,
    step_timeout: str | None = None,
    max_tokens: int | None = None,
    supervisor: RestartStrategy | Supervision | None = None,
    options: Options | None = None,
    base_dir: str | os.PathLike[str] | None = None,
    mcp_servers: Mapping[str, McpServer] | None = None,
) -> LoadedWorkflow:
    """A workflow, validated by the same rules as a file; `Runtime.run` takes it as it is.

    Args:
        name: The workflow's name.
        steps: Its steps, from the builders (or `Step` Structs).
        description: What it does.
        inputs: Declared inputs: `input_` results, or a type name (required input).
        agents: Agents the steps name (``agent(..., agent="writer")``); agents
            defined inline by steps are added.
        includes: Names of included workflow files (``{"deploy": "deploy.yaml"}``).
        output: CEL, or a callable (plain or ``async``) over a `PredicateContext`;
            default: the content of the last declared step that ran.
        loop: A workflow-level loop (`workflow_loop`).
        coordinator: The agent that wakes on each message, or a `Coordinator`.
        max_concurrency, on_step_failure, timeout, step_timeout, max_tokens:
            The run's options (or all of them as ``options``).
        supervisor: Restarts of failed steps (``options.supervisor``): a strategy
            (``"one_for_all"``, with 3 restarts at most) or a `Supervision`.
        base_dir: Where relative paths (includes, ``@file``, ``cwd``) resolve;
            default: the current directory.
        mcp_servers: MCP tool servers its agents may name in ``tools``
            (``{"time": McpServer(command="mcp-server-time")}``).

    Raises:
        WorkflowError: Every problem found, each with its document path
            (``<python>:0:0: steps[1].loop.until: ...``).
        ValueError: Two different agents or included workflows share a name, or
            both ``options`` and option arguments were given.
    """
    given = (max_concurrency, on_step_failure, timeout, step_timeout, max_tokens, supervisor)
    if options is None:
        options = Options(
            max_concurrency=max_concurrency,
            on_step_failure=on_step_failure,
            timeout=timeout,
            step_timeout=step_timeout,
            max_tokens=max_tokens,
            supervisor=Supervision(strategy=supervisor)
            if isinstance(supervisor, str)
            else supervisor,
        )
    elif given != (0, "cascade", None, None, None, None):
        raise ValueError("give options=Options(...) or the option arguments, not both")
    found_agents, found_includes = _gather(steps)
    declared = dict(agents or {})
    for agent_name, config in found_agents.items():
        _put(declared, agent_name, config, "agent")
    files = dict(includes or {})
    for ref in found_includes:
        if ref in files:
            raise ValueError(f"{ref!r} names both an included file and a workflow built in Python")
    document = Workflow(
        name=name,
        steps=_structs(steps, "steps"),
        description=description,
        inputs={
            key: spec if isinstance(spec, InputSpec) else InputSpec(type=spec)
            for key, spec in (inputs or {}).items()
        },
        agents=declared,
        includes=files,
        options=options,
        coordinator=Coordinator(agent=coordinator) if isinstance(coordinator, str) else coordinator,
        output=_expression(output, "output"),
        loop=loop,
        mcp_servers=dict(mcp_servers or {}),
    )
    directory = None if base_dir is None else Path(base_dir)
    return build_loaded(document, base_dir=directory, includes=found_includes)
