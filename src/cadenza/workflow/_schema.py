"""The schema layer: types, unknown keys, enums, ranges and patterns, all reported.

The walk is driven by the msgspec Structs themselves (``msgspec.inspect``), so the
document keys, types and required fields can never drift from ``_spec.py``; only
value constraints (``maxIterations >= 1``, the step id pattern, durations, the caps
of zenflow section 11) live apart, in ``_constraints.py``.

msgspec's own ``convert`` stops at the first error; this walk reports every one and
returns a *cleaned* copy of the document with the offending parts dropped (an
unknown key, a wrongly typed optional field, a list item missing its required
keys). The cleaned copy converts, so the rules that span fields still run.

A kind added to the registry (`cadenza.workflow.kinds`) has its block under its
own name on a step (``echo: {text: hi}``): it is checked against the kind's
``spec`` here like any block, and kept in the step's ``kindBlock``.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Final

from msgspec import inspect as mi

from ._constraints import Rule, constrain, rule_for
from ._problems import DocPath, Reporter, did_you_mean
from ._spec import (
    Agent,
    Control,
    ControlLimits,
    Coordinator,
    Graph,
    Human,
    ItemSource,
    Loop,
    Options,
    State,
    Step,
    Supervision,
    Workflow,
)
from .kinds import StepKind, step_kind, step_kinds

__all__ = ["BROKEN", "check_schema"]

BROKEN: Final = object()
"""Returned for a value that cannot be kept (wrong type, missing required key)."""

_NAMES: dict[type, str] = {
    Workflow: "the workflow",
    Step: "a step",
    State: "a graph state",
    Loop: "a loop",
    ItemSource: "a forEach source",
    Graph: "a graph",
    Agent: "an agent",
    Control: "a control step",
    ControlLimits: "control limits",
    Human: "a human step",
    Options: "options",
    Supervision: "options.supervisor",
    Coordinator: "the coordinator",
}
# zenflow's own valid fixtures spell `toolInput` as `tool_input`; accept both.
_ALIASES = {"tool_input": "toolInput"}
_BODIES = (Step, State)
_KIND_BLOCK = "kindBlock"


@cache
def _fields(cls: type) -> dict[str, mi.Field]:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    return {f.encode_name: f for f in info.fields}


@cache
def _type(cls: type) -> mi.Type:
    return mi.type_info(cls)


@cache
def _nested_keys(cls: type) -> dict[str, str]:
    """Keys of the blocks inside ``cls`` (``maxIterations`` -> ``loop``), for hints."""
    nested: dict[str, str] = {}
    for key, field in _fields(cls).items():
        members = field.type.types if isinstance(field.type, mi.UnionType) else (field.type,)
        for member in members:
            if isinstance(member, mi.StructType) and member.cls is not cls:
                for inner in _fields(member.cls):
                    nested.setdefault(inner, key)
    own = _fields(cls)
    return {inner: key for inner, key in nested.items() if inner not in own}


def check_schema(raw: Any, reporter: Reporter) -> Any:
    """Check ``raw`` against the :class:`Workflow` schema, reporting every problem.

    Returns:
        A cleaned copy that ``msgspec.convert(..., Workflow)`` accepts, or
        :data:`BROKEN` when the document is beyond repair (not a mapping, no
        ``name``/``steps``). Paths of dropped parts are marked quiet on ``reporter``.
    """
    walker = _Walker(reporter)
    if not isinstance(raw, dict):
        reporter.add((), "a workflow document must be a mapping with 'name' and 'steps'")
        return BROKEN
    clean = walker.struct(raw, Workflow, ())
    reporter.quiet(walker.dropped)
    return clean


class _Walker:
    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self.dropped: list[DocPath] = []
        self.blocks: dict[type, str] = {}
        """The registered kinds' blocks met, by ``spec``: what messages call them."""

    def value(self, value: Any, t: mi.Type, path: DocPath, rule: Rule | None) -> Any:
        member = _match(t, value)
        if member is None:
            self._mismatch(value, t, path)
            return BROKEN
        if isinstance(member, mi.StructType):
            return self.struct(value, member.cls, path)
        out: Any
        if isinstance(member, mi.ListType):
            # Items past a list's cap go unchecked: the cap is already a problem, and
            # checking 20,000 steps of a hostile document would take seconds.
            limit = rule.max_len if rule is not None else None
            items = value if limit is None else value[:limit]
            out = self._items(items, member.item_type, path)
        elif isinstance(member, mi.DictType):
            out = self._entries(value, member.value_type, path, rule)
        else:
            out = value
        if rule is not None:
            constrain(value, path, rule, self.reporter)
        return out

    def struct(self, value: dict[str, Any], cls: type, path: DocPath) -> Any:
        fields = _fields(cls)
        out: dict[str, Any] = {}
        broken = False
        body = cls in _BODIES
        for key, item in value.items():
            if body and self._registered(key, item, cls, path, out):
                continue
            name = _ALIASES.get(key, key) if key not in fields else key
            field = fields.get(name)
            if field is None:
                self._unknown(key, cls, path)
                continue
            if name in out:
                self.reporter.add((*path, key), f"{key!r} repeats {name!r}; give one of them")
                continue
            rule = rule_for(cls, name)
            cleaned = self.value(item, field.type, (*path, key), rule)
            if cleaned is BROKEN:
                self.dropped.append((*path, key))
                broken = broken or field.required
                continue
            out[name] = cleaned
        missing = self._missing(value, cls, path)
        return BROKEN if missing or broken else out

    def _missing(self, value: dict[str, Any], cls: type, path: DocPath) -> bool:
        """Reports each required key of ``cls`` that ``value`` lacks; True: one does."""
        missing = [name for name, f in _fields(cls).items() if f.required and name not in value]
        for name in missing:
            what = _NAMES.get(cls) or self.blocks.get(cls) or "this mapping"
            self.reporter.add(path, f"{what} needs {name!r}")
        return bool(missing)

    def _registered(
        self, key: str, item: Any, cls: type, path: DocPath, out: dict[str, Any]
    ) -> bool:
        """Whether ``key`` of a step is a registered kind's block, kept in ``out``."""
        if key == _KIND_BLOCK and isinstance(item, dict):  # a step built in Python
            for kind, block in item.items():
                if not self._kind_block(kind, block, path, out):
                    self._unknown(kind, cls, path)
            return True
        return key not in _fields(cls) and self._kind_block(key, item, path, out)

    def _unknown(self, key: str, cls: type, path: DocPath) -> None:
        name = _NAMES.get(cls) or self.blocks.get(cls)
        where = f" in {name}" if name else ""
        keys: list[str] = list(_fields(cls))
        if cls in _BODIES:  # the registered kinds' keys are a step's keys too
            keys += [kind.name for kind in step_kinds() if kind.spec is not None]
        # A near-exact typo first, then a key of a block written one level too
        # high (`maxIterations` on a step), then any close match.
        parent = _nested_keys(cls).get(key)
        hint = (
            did_you_mean(key, keys, cutoff=0.85)
            or (f"; it belongs under {parent!r}" if parent else "")
            or did_you_mean(key, keys)
        )
        self.reporter.add((*path, key), f"unknown key {key!r}{where}{hint}")
        self.dropped.append((*path, key))

    def _kind_block(self, name: str, block: Any, path: DocPath, out: dict[str, Any]) -> bool:
        """Keeps the block of registered kind ``name`` in ``out``; False: there is no such kind.

        The block is checked against the kind's ``spec`` at ``path.name``, where
        the document has it, whichever way it was written.
        """
        kind: StepKind | None = step_kind(name)
        if kind is None or kind.spec is None:  # Cadenza's own kinds have fields instead
            return False
        self.blocks.setdefault(kind.spec, f"the {name} block")
        cleaned = self.value(block, _type(kind.spec), (*path, name), None)
        if cleaned is BROKEN:
            self.dropped.append((*path, name))
        else:
            out.setdefault(_KIND_BLOCK, {})[name] = cleaned
        return True

    def _items(self, value: list[Any], t: mi.Type, path: DocPath) -> list[Any]:
        out = []
        for index, item in enumerate(value):
            cleaned = self.value(item, t, (*path, index), None)
            if cleaned is BROKEN:
                self.dropped.append((*path, index))
            else:
                out.append(cleaned)
        return out

    def _entries(
        self, value: dict[str, Any], t: mi.Type, path: DocPath, rule: Rule | None
    ) -> dict[str, Any]:
        out = {}
        for key, item in value.items():
            if rule is not None and rule.key_pattern and not rule.key_pattern.match(key):
                self.reporter.add(
                    (*path, key),
                    f"name {key!r} must match {rule.key_pattern.pattern} ({rule.hint})",
                )
            cleaned = self.value(item, t, (*path, key), None)
            if cleaned is BROKEN:
                self.dropped.append((*path, key))
            else:
                out[key] = cleaned
        return out

    def _mismatch(self, value: Any, t: mi.Type, path: DocPath) -> None:
        members = t.types if isinstance(t, mi.UnionType) else (t,)
        literal = next((m for m in members if isinstance(m, mi.LiteralType)), None)
        if literal is not None and isinstance(value, str):
            choices = [str(v) for v in literal.values if v != ""]
            message = f"{value!r} is not one of {', '.join(choices)}" + did_you_mean(value, choices)
        else:
            wanted = " or ".join(_describe(m) for m in members if not isinstance(m, mi.NoneType))
            message = f"expected {wanted}, got {_describe_value(value)}"
        self.reporter.add(path, message)


def _match(t: mi.Type, value: Any) -> mi.Type | None:
    """The member of ``t`` (a union or a single type) that ``value`` is an instance of."""
    for member in t.types if isinstance(t, mi.UnionType) else (t,):
        if _accepts(member, value):
            return member
    return None


_KINDS: dict[type, type | tuple[type, ...]] = {
    mi.IntType: int,
    mi.FloatType: (int, float),
    mi.StrType: str,
    mi.ListType: list,
    mi.DictType: dict,
    mi.StructType: dict,
}


def _accepts(t: mi.Type, value: Any) -> bool:
    if isinstance(t, mi.AnyType):
        return True
    if isinstance(t, mi.NoneType):
        return value is None
    if isinstance(value, bool):
        return isinstance(t, mi.BoolType) or (
            isinstance(t, mi.LiteralType) and any(v is value for v in t.values)
        )
    if isinstance(t, mi.LiteralType):
        return any(type(v) is type(value) and v == value for v in t.values)
    kind = _KINDS.get(type(t))
    return kind is not None and isinstance(value, kind)


def _describe(t: mi.Type) -> str:
    if isinstance(t, mi.LiteralType):
        return "one of " + ", ".join(str(v) for v in t.values if v != "")
    if isinstance(t, mi.ListType):
        item = _describe(t.item_type)
        return "a list" if item == "anything" else f"a list of {item.split(' ', 1)[-1]}s"
    names = {
        mi.AnyType: "anything",
        mi.IntType: "an integer",
        mi.FloatType: "a number",
        mi.StrType: "a string",
        mi.BoolType: "true or false",
        mi.DictType: "a mapping",
        mi.StructType: "a mapping",
        mi.NoneType: "null",
    }
    name = names.get(type(t))
    return name if name is not None else str(t)  # str() of a struct type costs ~0.5 ms


def _describe_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    kind = {
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }
    shown = (
        f" ({value!r})" if isinstance(value, (int, float, str)) and len(repr(value)) < 40 else ""
    )
    return kind.get(type(value), type(value).__name__) + shown
