"""The kinds of step: one module each, and the one table that lists them.

Each module declares a `StepKind`: its YAML keys, its checks, whether a loop may
repeat it, whether it runs steps of its own, and its ``cadenza graph`` label.
The validator, the schema, ``cadenza graph``, the actors, the workers and the
OpenTelemetry spans all ask this table, so nothing else lists the kinds.

A kind from outside Cadenza (a plugin, a test) is registered with
`register_step_kind`, or named in ``CADENZA_STEP_KINDS`` (``module:attribute``,
comma-separated), which every process reads the first time it asks for a kind:
``cadenza validate``, ``cadenza graph`` and ``cadenza worker`` included. Its key
in a document is its name (``echo: {text: hi}``); see `StepKind` and, for what a
run does with it, `cadenza.actors.steps.LeafKind`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from typing import Final

import msgspec

from cadenza.errors import CadenzaError
from cadenza.workflow._problems import DocPath as DocPath
from cadenza.workflow._spec import State, Step

from ._agent import Agent
from ._base import Body as Body
from ._base import KindChecks as KindChecks
from ._base import StepKind as StepKind
from ._base import short as short
from ._command import Command
from ._control import Control
from ._graph import Graph
from ._handler import Handler
from ._human import Human
from ._include import Include
from ._tool import Tool

__all__ = [
    "ENVIRONMENT",
    "Body",
    "DocPath",
    "KindChecks",
    "StepKind",
    "register_step_kind",
    "short",
    "step_kind",
    "step_kinds",
    "unregister_step_kind",
]

ENVIRONMENT: Final = "CADENZA_STEP_KINDS"
"""The variable naming kinds to register in every process: ``module:attribute,...``."""

_BUILT_IN: Final = (
    Include(),
    Command(),
    Handler(),
    Graph(),
    Control(),
    Human(),
    Tool(),
    Agent(),
)
"""The kinds Cadenza ships, in the order a step that names two of them is reported."""

_kinds: dict[str, StepKind] = {kind.name: kind for kind in _BUILT_IN}
_from_environment = False


def step_kinds() -> Iterable[StepKind]:
    """Every kind: Cadenza's, then the registered ones in the order they came."""
    if not _from_environment:
        _register_environment()
    return _kinds.values()


def step_kind(name: str) -> StepKind | None:
    """The kind called ``name``, or None."""
    if not _from_environment:
        _register_environment()
    return _kinds.get(name)


def register_step_kind(kind: StepKind) -> None:
    """Adds a kind: documents may use its key from now on, in this process.

    Register it before loading the workflows that use it. A process that runs
    its steps on workers needs it registered on each worker too
    (``CADENZA_STEP_KINDS``).

    Raises:
        ValueError: Its name is taken (by a kind, or a key every step has) or is
            not a plain identifier, or it has no ``spec`` (the type of its block).
    """
    name = getattr(kind, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a step kind's name must be an identifier, not {name!r}")
    if kind.spec is None:
        raise ValueError(f"step kind {name!r} has no spec: the type its block converts to")
    step_kinds()  # the environment's first, so that a clash with one is reported here
    if name in _kinds:
        raise ValueError(f"step kind {name!r} is registered already")
    if name in _step_keys():
        raise ValueError(f"step kind {name!r}: the name is a key every step has")
    _kinds[name] = kind


def unregister_step_kind(name: str) -> None:
    """Forgets a registered kind (Cadenza's own stay)."""
    if all(kind.name != name for kind in _BUILT_IN):
        _kinds.pop(name, None)


def _step_keys() -> frozenset[str]:
    """The keys a step or a graph state has already (``tool_input``: an alias)."""
    fields = (*msgspec.structs.fields(Step), *msgspec.structs.fields(State))
    return frozenset(field.encode_name for field in fields) | {"tool_input"}


def _register_environment() -> None:
    """Registers the kinds ``CADENZA_STEP_KINDS`` names, once per process.

    Raises:
        CadenzaError: An entry cannot be imported or is no `StepKind`.
    """
    global _from_environment
    _from_environment = True  # once, even when an entry fails: the error says which
    entries = (part.strip() for part in os.environ.get(ENVIRONMENT, "").split(","))
    for entry in filter(None, entries):
        module, colon, attribute = entry.partition(":")
        where = f"{ENVIRONMENT}: {entry!r}"
        if not colon or not module or not attribute:
            raise CadenzaError(f"{where} is not 'module:attribute'")
        try:
            found = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as error:
            raise CadenzaError(f"{where} cannot be loaded: {error}") from None
        kind = found() if isinstance(found, type) and issubclass(found, StepKind) else found
        if not isinstance(kind, StepKind):
            raise CadenzaError(f"{where} is not a StepKind (it is {type(kind).__name__})")
        if _kinds.get(kind.name) is not kind:
            try:
                register_step_kind(kind)
            except ValueError as error:
                raise CadenzaError(f"{where}: {error}") from None
