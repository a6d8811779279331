"""The rules that span fields: step kinds, references, loops, graphs, files, includes.

Runs on the typed :class:`Workflow` once the schema layer (``_schema.py``) has
checked types and values, and walks the document once: every step, loop body,
graph state and control step is visited a single time, with its document path
(for locations) and its nesting depth. Problems are reported, never raised.

Two things reach outside the document and are delegated: reading ``@file``
references (here, relative to the workflow's directory) and loading included
workflows (a callback from the loader, which owns include cycles and depth).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from cadenza.errors import InputError

from ._containers import check_loop
from ._expressions import ExpressionChecker
from ._files import FileRefused, resolve_inside
from ._inputs import resolve_inputs
from ._models import ModelCheck, ModelRules
from ._modules import module_exists
from ._prices import PricesInvalid, read_prices
from ._problems import DocPath, Reporter, did_you_mean
from ._references import check_json_schema, judge_problem, lines_problem, read_reference
from ._rules import MCP_SERVER_NAME, rule_problem
from ._scopes import check_scope, declared_ids, loop_owners
from ._spec import (
    AGENT_BUILTINS,
    DEFAULT_MAX_CONCURRENCY,
    Agent,
    ItemSource,
    Loop,
    McpServer,
    ModelPrice,
    Permissions,
    Step,
    Supervision,
    Workflow,
    parse_duration,
)
from .kinds import Body, StepKind, step_kinds

__all__ = ["MAX_NESTING", "IncludeLoader", "Validator"]

MAX_NESTING = 8
"""Deepest nesting of loops, graphs and control steps inside one another."""

IncludeLoader = Callable[[DocPath, str], Workflow | None]
"""Loads the workflow a reference names (reporting at the path), or returns None."""


class Validator:
    """Checks one workflow document; problems go to ``reporter``.

    What each kind of step checks of its own keys is the kind's (`StepKind.check`,
    in ``kinds/``); this is the `KindChecks` those checks use.

    Args:
        workflow: The document, already through the schema layer.
        reporter: Collects and locates the problems.
        base_dir: Where ``@file`` references are resolved.
        root: The tree ``@file`` references must stay in (default: ``base_dir``).
        agent_names: Agent names the document declares (including any whose
            definition had schema problems, so references to them stay quiet).
        include: Loads an included or control workflow.
        models: The caller's rules for model specs (``cadenza validate``); None: the
            models are not checked here (a run checks them when an agent starts).

    Attributes:
        replacements: Text read in for ``@file`` values, by document path.
    """

    def __init__(
        self,
        workflow: Workflow,
        reporter: Reporter,
        *,
        base_dir: Path,
        agent_names: frozenset[str],
        include: IncludeLoader,
        root: Path | None = None,
        models: ModelRules | None = None,
    ) -> None:
        self.workflow = workflow
        self.reporter = reporter
        self.base_dir = base_dir
        self.root = root or base_dir
        self.agent_names = agent_names
        self.include = include
        self.replacements: dict[DocPath, str] = {}
        self.ids = declared_ids(workflow)
        self.exprs = ExpressionChecker(
            reporter,
            frozenset(self.ids),
            inputs=frozenset(workflow.inputs) if workflow.inputs else None,
            top_level=frozenset(step.id for step in workflow.steps),
            declared=self.ids,
            loops=loop_owners(workflow),
        )
        self._defined_agents: str | None = None
        self.models = ModelCheck(models, reporter, workflow.agents) if models else None
        self.prices: dict[str, ModelPrice] | None = None
        """The prices of a ``prices:`` file, read in (None: the prices are inline)."""

    def run(self) -> None:
        """Apply every rule to the whole document."""
        wf = self.workflow
        if wf.version != 1:
            self.add(("version",), f"unsupported version {wf.version}; only version 1 is defined")
        if wf.options.supervisor is not None:
            self._supervision(wf.options.supervisor)
        for name, spec in wf.inputs.items():
            if not spec.required:
                try:
                    resolve_inputs({name: spec}, {name: spec.default})
                except InputError as exc:
                    self.add(("inputs", name, "default"), f"the default does not fit: {exc}")
        for name, server in wf.mcp_servers.items():
            self._mcp_server(("mcpServers", name), name, server)
        self._permissions(("permissions",), wf.permissions)
        if isinstance(wf.prices, str):
            self._prices_file(wf.prices)
        for name, agent in wf.agents.items():
            self._agent_definition(("agents", name), agent)
        if wf.coordinator is not None:
            self._runs_agent(("coordinator", "agent"), wf.coordinator.agent)
        if wf.loop is not None:
            self._loop(wf.loop, ("loop",), 1, root=True)
        self._scope(wf.steps, ("steps",), 1 if wf.loop is not None else 0, frozenset())
        if wf.output is not None:
            self.exprs.scope = frozenset(step.id for step in wf.steps)
            self.exprs.expression(("output",), wf.output, field="output", want="any")
            self.exprs.scope = None

    def _prices_file(self, reference: str) -> None:
        """``prices: FILE``: the file, inside the workflow's tree, read and checked."""
        try:
            path = resolve_inside(self.root, self.base_dir, reference)
            self.prices = read_prices(path, reference)
        except FileRefused as refused:
            self.add(("prices",), f"prices file {reference!r}: {refused}")
        except PricesInvalid as invalid:
            self.add(("prices",), str(invalid))

    def _agent_definition(self, path: DocPath, agent: Agent) -> None:
        """An entry of ``agents``: its permissions, tools, prompt file, schema and model."""
        if agent.permissions is not None:
            self._permissions((*path, "permissions"), agent.permissions)
        for index, tool in enumerate(agent.tools or ()):
            self._agent_tool((*path, "tools", index), tool)
        if agent.prompt is not None and agent.prompt.startswith("@"):
            self._read((*path, "prompt"), agent.prompt)
        if agent.result_schema is not None:
            check_json_schema(self.reporter, (*path, "resultSchema"), agent.result_schema)
        if agent.model is not None and self.models is not None:
            self.models.spec((*path, "model"), agent.model)

    # Steps and what they run -------------------------------------------------

    def _scope(
        self, steps: list[Step], path: DocPath, depth: int, outer: frozenset[str] | None
    ) -> None:
        """One list of steps; ``outer``: the ids the lists around it show (None: unknown)."""
        check_scope(steps, path, self.reporter, self.ids)
        readable = _dependencies(steps) if path == ("steps",) else {}
        # At run time a list's steps see their own list and the lists around it, never
        # the bodies of loops (each iteration's steps live in a scope of their own).
        here = None if outer is None else outer | {step.id for step in steps}
        for index, step in enumerate(steps):
            where = (*path, index)
            self.exprs.visible = readable.get(step.id)
            self.exprs.scope = here
            if step.condition is not None:
                self.exprs.expression(
                    (*where, "condition"), step.condition, field="condition", want="bool"
                )
            self._body(step, where, depth, "step", here)
        self.exprs.visible = None
        self.exprs.scope = None

    def _body(
        self,
        body: Body,
        path: DocPath,
        depth: int,
        noun: str,
        here: frozenset[str] | None = None,
    ) -> None:
        """What a step or graph state does; ``here``: the step ids its own fields can read."""
        kinds = step_kinds()
        named = [(kind, key) for kind in kinds if (key := kind.named_by(body)) is not None]
        if len(named) > 1:
            (_, first), (_, second) = named[:2]
            self.add(
                (*path, second),
                f"a {noun} does one thing, but this one has both {first!r} and {second!r}",
            )
        if body.loop is not None:
            self._looped(body.loop, path, depth, noun, named[0] if named else None)
            self.exprs.scope = None  # until, forEach: not worked out (their body's scope)
            self._loop(body.loop, (*path, "loop"), depth + 1, outer=here)
        elif not named:
            names = [key for kind in kinds for key in kind.names]
            choices = f"{', '.join(names[:-1])} or {names[-1]}"
            self.add(
                path,
                f"this {noun} has nothing to do: give it one of {choices}, "
                "or a loop with its own steps",
            )
        self.exprs.scope = here  # a leaf's fields (and a looped one's) read the list's scope
        for kind in kinds:
            kind.check(body, path, depth, self)
        self.exprs.scope = None

    def _looped(
        self, loop: Loop, path: DocPath, depth: int, noun: str, named: tuple[StepKind, str] | None
    ) -> None:
        """A loop on a step: it repeats the step's work or runs steps of its own, not both."""
        if loop.steps is not None and named is not None:
            key = named[1]
            self.add(
                (*path, "loop", "steps"),
                f"loop.steps cannot be combined with {key!r}: the loop either "
                f"repeats this step (drop loop.steps) or runs its own steps (move "
                f"{key!r} into one of them)",
            )
        elif loop.steps is None and named is None:
            names = [key for kind in step_kinds() if kind.loopable for key in kind.names]
            self.add(
                (*path, "loop"),
                f"this loop has no steps and this {noun} has nothing to repeat: add "
                f"loop.steps, or one of {', '.join(names[:-1])} or {names[-1]}",
            )
        elif loop.steps is None and named is not None and not named[0].loopable:
            self.add(
                (*path, "loop"), f"a loop cannot repeat a {named[1]} step; put it in loop.steps"
            )

    # What the kinds' checks use (`KindChecks`) ----------------------------------

    def add(self, path: DocPath, message: str) -> None:
        """Reports a problem at ``path`` (quiet where the schema already reported one)."""
        self.reporter.add_rule(path, message)

    def agent(self, path: DocPath, name: str) -> bool:
        """Whether the workflow defines agent ``name``; reports it at ``path`` when not."""
        return self._agent(path, name)

    def text(self, path: DocPath, text: str, field: str) -> None:
        """Checks a text that may be ``@file``: read in, its templates checked."""
        self._text(path, text, field)

    def load_include(self, path: DocPath, reference: str) -> Workflow | None:
        """Loads the workflow ``reference`` names (problems reported at ``path``)."""
        return self.include(path, reference)

    def body(self, body: Body, path: DocPath, depth: int, noun: str) -> None:
        """Checks a step-like body held inside another (a graph's state)."""
        self._body(body, path, depth, noun)

    def nesting(self, path: DocPath, depth: int) -> None:
        """Reports a container nested deeper than the cap (at the first level past it)."""
        if depth == MAX_NESTING + 1:  # deeper levels would repeat it
            self.add(
                path,
                f"loops, graphs and control steps nest at most {MAX_NESTING} deep; "
                f"this one is at depth {depth}",
            )

    @contextmanager
    def unscoped(self) -> Iterator[None]:
        """Expressions checked inside read no known scope (a graph's, a control loop's)."""
        scope, self.exprs.scope = self.exprs.scope, None
        try:
            yield
        finally:
            self.exprs.scope = scope

    # Containers ---------------------------------------------------------------

    def _loop(
        self,
        loop: Loop,
        path: DocPath,
        depth: int,
        *,
        root: bool = False,
        outer: frozenset[str] | None = None,
    ) -> None:
        self.nesting(path, depth)
        check_loop(loop, path, self.reporter, self.exprs, root=root)
        self._capped(loop, path)
        if isinstance(loop.for_each, ItemSource):
            self._item_source(loop.for_each, (*path, "forEach"))
        if loop.for_each is None and loop.until_agent is not None:
            where = (*path, "untilAgent")
            judge = self.workflow.agents.get(loop.until_agent)
            why = judge_problem(judge) if judge is not None else None
            if self._runs_agent(where, loop.until_agent) and why is not None:
                self.add(
                    where,
                    f"judge agent {loop.until_agent!r} must submit {{done: boolean}}, but {why}",
                )
        if loop.steps is not None and not root:
            self._scope(loop.steps, (*path, "steps"), depth, outer)

    def _capped(self, loop: Loop, path: DocPath) -> None:
        """A loop that asks for more at once than its run allows gets the run's number:
        the run's ``maxConcurrency`` bounds every step of it, the loop's included."""
        wanted = loop.max_concurrency
        given = self.workflow.options.max_concurrency
        cap = given or DEFAULT_MAX_CONCURRENCY
        if wanted > cap:
            which = f"options.maxConcurrency: {cap}" if given else f"the default of {cap}"
            self.reporter.warn(
                (*path, "maxConcurrency"),
                f"{wanted} at once is more than the run allows ({which}), so at most {cap}"
                " run at once: raise the run's options.maxConcurrency (or pass"
                " --max-concurrency)",
            )

    def _item_source(self, source: ItemSource, path: DocPath) -> None:
        """A streamed forEach's file must be there now, and its handler's module findable
        (nothing is read or imported: the items are read when the step runs)."""
        if source.lines is not None:
            problem = lines_problem(self.root, self.base_dir, source.lines)
            if problem is not None:
                self.add((*path, "lines"), problem)
        if source.handler is not None and ":" in source.handler:
            top = source.handler.partition(":")[0].split(".", 1)[0]
            if top.isidentifier() and not module_exists(top, self.base_dir):
                self.add(
                    (*path, "handler"),
                    f"handler {source.handler!r}: no module {top!r} beside the workflow "
                    f"({self.base_dir}) or on the Python path",
                )

    # References and files -----------------------------------------------------

    def _agent(self, path: DocPath, name: str) -> bool:
        if name in self.agent_names:
            return True
        if self._defined_agents is None:  # once, not per unknown agent (thousands of steps)
            names = sorted(self.agent_names)
            more = f", ... ({len(names)} in all)" if len(names) > 20 else ""
            self._defined_agents = (", ".join(names[:20]) + more) or "none"
        defined = self._defined_agents
        self.add(
            path,
            f"unknown agent {name!r} (defined: {defined})" + did_you_mean(name, self.agent_names),
        )
        return False

    def _runs_agent(self, path: DocPath, name: str) -> bool:
        """`_agent`, for an agent run with its own model (a judge, the coordinator)."""
        known = self._agent(path, name)
        if known and self.models is not None:
            self.models.runs_agent(path, name, step=False)
        return known

    def _supervision(self, supervision: Supervision) -> None:
        try:
            seconds = parse_duration(supervision.within) if supervision.within else None
        except ValueError:
            return  # the schema layer reported it
        if seconds == 0:
            self.add(
                ("options", "supervisor", "within"),
                "within must be longer than 0s; leave it out to count restarts over the "
                "whole life of each list of steps",
            )

    def _permissions(self, path: DocPath, permissions: Permissions) -> None:
        servers = frozenset(self.workflow.mcp_servers)
        for kind, rules in (("allow", permissions.allow), ("deny", permissions.deny)):
            for index, rule in enumerate(rules):
                problem = rule_problem(rule, servers)
                if problem is not None:
                    self.add((*path, kind, index), problem)

    def _mcp_server(self, path: DocPath, name: str, server: McpServer) -> None:
        if not MCP_SERVER_NAME.match(name):
            self.add(path, f"MCP server name {name!r} must match {MCP_SERVER_NAME.pattern}")
        try:
            parse_duration(server.timeout)
        except ValueError as error:
            self.add((*path, "timeout"), str(error))
        if (server.command is None) == (server.url is None):
            self.add(path, "give an MCP server either command (stdio) or url (streamable HTTP)")
        elif server.command is not None and server.headers:
            self.add((*path, "headers"), "headers apply to a url server only")
        elif server.url is not None:
            for key in ("args", "env", "cwd"):
                if getattr(server, key):
                    self.add((*path, key), f"{key} applies to a command server only")
            if not server.url.startswith(("http://", "https://")):
                self.add((*path, "url"), f"{server.url!r} is not an http(s) URL")

    def _agent_tool(self, path: DocPath, tool: str) -> None:
        """A name in ``tools:``: a built-in, ``SERVER`` or ``SERVER.TOOL``, or ``module:fn``.

        zenflow lets a bare name match nothing (its documents list tools of their
        own runtimes), so a bare unknown name is refused only in a workflow that
        declares ``mcpServers:``, where it is most likely a misspelt server.
        """
        if ":" in tool or tool in AGENT_BUILTINS or tool in _MESSAGE_TOOLS:
            return
        server = tool.split(".", 1)[0]
        servers = self.workflow.mcp_servers
        if server not in servers and ("." in tool or servers):
            known = sorted(self.workflow.mcp_servers) or ["none declared"]
            self.add(
                path,
                f"unknown tool {tool!r}: not a built-in ({', '.join(sorted(AGENT_BUILTINS))}),"
                f" not 'module:function', and {server!r} is no MCP server"
                f" (mcpServers: {', '.join(known)})",
            )

    def _text(self, path: DocPath, text: str, field: str) -> None:
        if text.startswith("@"):
            content = self._read(path, text)
            if content is not None:
                self.exprs.template(path, content, field=f"{field} ({text})", in_value=False)
        else:
            self.exprs.template(path, text, field=field)

    def _read(self, path: DocPath, ref: str) -> str | None:
        content = read_reference(self.reporter, self.base_dir, path, ref, root=self.root)
        if content is not None:
            self.replacements[path] = content
        return content


_MESSAGE_TOOLS = frozenset(("send_message", "submit_result"))


def _dependencies(steps: list[Step]) -> dict[str, frozenset[str]]:
    """Each step's id with its transitive dependencies: the top-level steps it may read."""
    direct = {step.id: step.depends_on for step in steps}
    closed: dict[str, frozenset[str]] = {}
    for start in direct:
        seen = {start}
        todo = list(direct[start])
        while todo:
            current = todo.pop()
            if current in seen or current not in direct:
                continue
            seen.add(current)
            todo.extend(direct[current])
        closed[start] = frozenset(seen)
    return closed
