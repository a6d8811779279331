"""What a kind of step is in a document: `StepKind`, and what its checks may use.

A kind declares its YAML keys, its checks, whether a ``loop`` may repeat it,
whether it runs steps of its own (its span's children, in OpenTelemetry) and
how ``cadenza graph`` draws it. What a run does with it (in process, or on a
worker) is the other half, above the document layer: `cadenza.actors.steps.LeafKind`
adds it, and a kind from outside Cadenza subclasses that, both halves in one class.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar, Protocol

import msgspec

from cadenza.workflow._expressions import ExpressionChecker
from cadenza.workflow._models import ModelCheck
from cadenza.workflow._problems import DocPath, Reporter
from cadenza.workflow._spec import State, Step, Workflow

__all__ = ["Body", "KindChecks", "StepKind", "short"]

Body = Step | State
"""What has a kind: a step, or a graph state."""

_FIELDS = frozenset(State.__struct_fields__) & frozenset(Step.__struct_fields__)


class KindChecks(Protocol):
    """What a kind's checks may use of the validator that runs them.

    Expressions read the scope of the step's list of steps (``exprs``); a kind
    whose own steps live in a scope of their own checks them `unscoped`.
    """

    reporter: Reporter
    exprs: ExpressionChecker
    workflow: Workflow
    base_dir: Path
    agent_names: frozenset[str]
    models: ModelCheck | None

    def add(self, path: DocPath, message: str) -> None:
        """Reports a problem at ``path`` (quiet where the schema already reported one)."""

    def agent(self, path: DocPath, name: str) -> bool:
        """Whether the workflow defines agent ``name``; reports it at ``path`` when not."""
        ...

    def text(self, path: DocPath, text: str, field: str) -> None:
        """Checks a text that may be ``@file``: read in, its templates checked."""

    def load_include(self, path: DocPath, reference: str) -> Workflow | None:
        """Loads the workflow ``reference`` names (problems reported at ``path``)."""
        ...

    def body(self, body: Body, path: DocPath, depth: int, noun: str) -> None:
        """Checks a step-like body held inside this one (a graph's state) ``depth`` deep."""

    def nesting(self, path: DocPath, depth: int) -> None:
        """Reports a container nested deeper than the cap."""

    def unscoped(self) -> AbstractContextManager[None]:
        """Expressions checked inside read no known scope (a graph's, a control loop's)."""
        ...


class StepKind:
    """One kind of step, as a workflow document has it.

    Subclasses set the class attributes and override what they need; one
    instance of each is listed in the registry (`cadenza.workflow.kinds`).

    Attributes:
        name: The kind's name: what `Step.kind` says, ``step_start``'s ``kind``,
            the ``cadenza.step.kind`` span attribute and ``cadenza graph``'s label.
        names: The YAML keys that make a step this kind (default: its name).
        keys: All its YAML keys, ``names`` first (default: ``names``). A kind added
            to the registry has one, its name, holding a block that converts to ``spec``.
        spec: The type a registered kind's block converts to (a msgspec Struct,
            usually ``forbid_unknown_fields``): its keys, as the schema checks them.
        loopable: Whether a ``loop`` without steps of its own may repeat it.
        leaf: Whether it runs no steps of its own (a loop, a graph, an include and
            a control loop do): a leaf's span has no step spans below it.
    """

    name: ClassVar[str]
    names: ClassVar[tuple[str, ...]] = ()
    keys: ClassVar[tuple[str, ...]] = ()
    spec: ClassVar[type | None] = None
    loopable: ClassVar[bool] = True
    leaf: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if name is not None:  # a concrete kind: its keys default to its name
            cls.names = cls.__dict__.get("names") or (name,)
            cls.keys = cls.__dict__.get("keys") or cls.names

    def named_by(self, body: Body) -> str | None:
        """The key that makes ``body`` this kind (``instructions`` for the default
        agent), or None. A registered kind: its block."""
        if self.name in _FIELDS:  # a built-in kind: its key is a field of every step
            return self.name if getattr(body, self.name) is not None else None
        block = body.kind_block
        return self.name if block is not None and self.name in block else None

    def options(self, body: Body) -> Any:
        """A registered kind's block, converted to ``spec``.

        Raises:
            msgspec.ValidationError: The block does not fit (the validator says so first).
        """
        block = (body.kind_block or {}).get(self.name)
        return block if self.spec is None else msgspec.convert(block, self.spec)

    def check(self, body: Body, path: DocPath, depth: int, at: KindChecks) -> None:
        """Reports what is wrong with this kind's keys on ``body`` (of any kind).

        ``depth`` is how deep ``body`` is nested in loops, graphs and control
        loops. The default converts a registered kind's block, reporting what
        its types refuse beyond what the schema saw (a number's bounds, say).
        """
        if self.spec is None or self.named_by(body) is None:
            return
        try:
            self.options(body)
        except msgspec.ValidationError as error:
            at.add((*path, self.name), f"invalid {self.name} block: {error}")

    def label(self, body: Body) -> str:
        """What ``cadenza graph`` writes after a step's name: its kind, and perhaps what
        it runs (``agent writer``)."""
        return self.name

    def describe(self, body: Body) -> dict[str, Any]:
        """The keys ``cadenza graph --format json`` shows for this kind: a registered
        kind's block under its name."""
        block = (body.kind_block or {}).get(self.name)
        return {} if block is None else {self.name: block}


def short(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters for a label, an ellipsis saying so."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
