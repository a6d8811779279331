"""The Python code a workflow document names: predicates, handlers and tools.

A document is data, but some of its fields stand for Python: a predicate's
``@python:`` marker (``cadenza.build``), a handler's ``module:function``, a
Python tool's ``module:function``. A process resuming a stored run needs that
code; `code_references` lists where the document names it, so that a process
lacking some can say so before it runs anything (`module_exists` tells, without
importing anything, whether a module could be found).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ._modules import module_exists
from ._python import is_python
from ._spec import Loop, State, Step, Workflow

if TYPE_CHECKING:
    from ._loader import LoadedWorkflow

__all__ = ["CodeReference", "code_references", "module_exists"]


@dataclass(frozen=True, slots=True)
class CodeReference:
    """One place where a document names Python code.

    Attributes:
        kind: ``predicate`` (a ``@python:`` marker), ``handler`` or ``tool``.
        reference: The marker, or the ``module:function`` text.
        where: The step that names it (ids joined by dots: ``spin.work``), the
            agent (``agent coder``), or ``the workflow``.
        base_dir: The directory of the workflow that names it, where a handler
            module is looked for first.
    """

    kind: Literal["predicate", "handler", "tool"]
    reference: str
    where: str
    base_dir: Path


def code_references(loaded: LoadedWorkflow) -> Iterator[CodeReference]:
    """Every place ``loaded`` and the workflows it includes name Python code.

    Markers appear only in expression fields, so a prompt or a tool's input that
    happens to start with ``@python:`` is not taken for one.
    """
    yield from _Walk(loaded.base_dir).workflow(loaded.workflow)
    for child in loaded.includes.values():
        yield from code_references(child)


@dataclass(frozen=True, slots=True)
class _Walk:
    base_dir: Path

    def workflow(self, workflow: Workflow) -> Iterator[CodeReference]:
        yield from self.predicate(workflow.output, "the workflow")
        for name, agent in workflow.agents.items():
            for tool in agent.tools or ():
                if ":" in tool:
                    yield CodeReference("tool", tool, f"agent {name}", self.base_dir)
        if workflow.loop is not None:
            yield from self.loop(workflow.loop, "the workflow")
        yield from self.steps(workflow.steps, "")

    def steps(self, steps: list[Step], prefix: str) -> Iterator[CodeReference]:
        for step in steps:
            where = prefix + step.id
            yield from self.predicate(step.condition, where)
            yield from self.body(step, where)

    def body(self, body: Step | State, where: str) -> Iterator[CodeReference]:
        if body.handler is not None:
            yield CodeReference("handler", body.handler, where, self.base_dir)
        if body.tool is not None and ":" in body.tool:
            yield CodeReference("tool", body.tool, where, self.base_dir)
        if body.loop is not None:
            yield from self.loop(body.loop, where)
        if body.graph is not None:
            for edge in body.graph.edges:
                yield from self.predicate(edge.condition, where)
            for name, state in body.graph.states.items():
                yield from self.body(state, f"{where}.{name}")
        if body.control is not None:
            for check in body.control.checks:
                yield from self.predicate(check.expr, where)

    def loop(self, loop: Loop, where: str) -> Iterator[CodeReference]:
        yield from self.predicate(loop.until, where)
        if isinstance(loop.for_each, str):
            yield from self.predicate(loop.for_each, where)
        if loop.steps is not None:
            yield from self.steps(loop.steps, f"{where}.")

    def predicate(self, source: str | None, where: str) -> Iterator[CodeReference]:
        if source is not None and is_python(source):
            yield CodeReference("predicate", source, where, self.base_dir)
