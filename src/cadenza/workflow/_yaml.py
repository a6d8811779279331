"""Safe YAML (and JSON) loading that remembers where every key and value came from.

The document is built from PyYAML's *event* stream rather than its composed node
graph: PyYAML's composer recurses once per nesting level (a 10,000-deep ``[[[...``
would end in ``RecursionError`` or worse), while the parser below it keeps explicit
stacks. Building the tree here, with an explicit stack too, is what lets nesting
depth, alias expansion and duplicate keys be checked as they happen and reported
with a position.

Plain scalars are resolved with the YAML 1.2 core schema, the one JSON and Go's
YAML library follow, so ``on``/``yes`` stay strings, ``1e3`` is a number, and a
YAML document and its JSON twin produce the same values. Only the JSON-compatible
tags (``!!str``, ``!!int``, ``!!float``, ``!!bool``, ``!!null``, ``!!seq``,
``!!map``) are accepted; any other (``!!python/object``, ``!!binary``, a local
``!tag``) is a problem: a workflow holds nothing but strings, numbers, booleans,
null, lists and maps. Merge keys (``<<``) are refused too, as zenflow does.

A document holds at most ``MAX_NODES`` values: building one costs microseconds in
Python, and a 1 MiB file of ``[1,1,1,...`` holds half a million of them.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

import yaml
from yaml import events

from ._problems import MAX_PROBLEMS, DocPath, Problem, format_path
from ._source import Loc, SourceMap

__all__ = ["MAX_ALIASES", "MAX_ALIAS_NODES", "MAX_DEPTH", "MAX_NODES", "Parsed", "parse_yaml"]

MAX_DEPTH = 128
"""Deepest nesting of lists and maps a document may have."""
MAX_ALIASES = 1_000
"""Most aliases (``*name``) a document may use."""
MAX_ALIAS_NODES = 100_000
"""Most nodes all aliases together may expand to (the billion-laughs bound)."""
MAX_NODES = 50_000
"""Most values (scalars, lists and maps) a document may spell out; aliases count apart."""

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CORE = "tag:yaml.org,2002:"
_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_BOOLS = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_INT = re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_SPECIAL_FLOATS = {
    f"{sign}.{word}": float(f"{sign}inf")
    for sign in ("", "+", "-")
    for word in ("inf", "Inf", "INF")
} | {".nan": float("nan"), ".NaN": float("nan"), ".NAN": float("nan")}


@dataclass(frozen=True, slots=True)
class Parsed:
    """A loaded document: its plain-Python value, its positions and its problems."""

    value: Any
    source: SourceMap
    problems: list[Problem]


class _Fatal(Exception):
    """Stops the build; the problem is already recorded."""


class _Frame:
    __slots__ = (
        "anchor",
        "discard",
        "is_map",
        "key",
        "key_loc",
        "path",
        "record",
        "seen",
        "start",
        "value",
    )

    def __init__(self, value: Any, path: DocPath, record: bool, anchor: str | None, start: int):
        self.value = value
        self.is_map = isinstance(value, dict)
        self.path = path
        self.record = record  # False under a duplicate key: its positions would clobber
        self.anchor = anchor
        self.start = start
        self.key: str | None = None
        self.key_loc: Loc | None = None
        self.discard = False  # the pending key is a duplicate or a merge key
        self.seen: dict[str, Loc] = {}


def _yaml_words(error: yaml.MarkedYAMLError, text: str, mark: yaml.Mark | None) -> str:
    """PyYAML's complaint in the words of this project, whichever PyYAML answered.

    A tab and a too-deep document are said the same way whatever the version of
    PyYAML (newer ones have a depth limit of their own that answers before ours).
    """
    problem = str(error.problem)
    if mark is not None and 0 <= mark.index < len(text) and text[mark.index] == "\t":
        return "a tab character: YAML indents with spaces only (replace the tab with spaces)"
    if "nesting depth" in problem:
        return f"the document nests deeper than {MAX_DEPTH} levels"
    detail = f"{problem} ({error.context})" if error.context else problem
    return f"invalid YAML: {detail}"


def parse_yaml(text: str, filename: str) -> Parsed:
    """Load one YAML or JSON document safely, recording positions and problems.

    Never raises for bad input: a syntax error becomes one located problem, and
    caps (depth, aliases) stop the build at the offending node.
    """
    builder = _Builder(text, filename)
    loader = _Loader(text)
    try:
        while loader.check_event():
            builder.feed(loader.get_event())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        builder.problem(_mark(mark), (), _yaml_words(exc, text, mark))
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        builder.problem(Loc(line, column), (), f"invalid character {char!r}: {exc.reason}")
    except _Fatal:
        pass
    finally:
        loader.dispose()
    return Parsed(builder.root, builder.source, builder.problems)


def _mark(mark: Any) -> Loc:
    return Loc(mark.line + 1, mark.column + 1) if mark is not None else Loc(1, 1)


class _Builder:
    """Turns parser events into plain Python values plus a :class:`SourceMap`."""

    def __init__(self, text: str, filename: str) -> None:
        self.filename = filename
        self.source = SourceMap(text)
        self.problems: list[Problem] = []
        self.root: Any = None
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.open_anchors: set[str] = set()
        self.documents = 0
        self.nodes = 0
        self.aliases = 0
        self.expanded = 0

    def problem(self, loc: Loc, path: DocPath, message: str) -> None:
        if len(self.problems) > MAX_PROBLEMS:
            return
        if len(self.problems) == MAX_PROBLEMS:
            message = f"more than {MAX_PROBLEMS} problems; the rest are not reported"
        self.problems.append(
            Problem(self.filename, loc.line, loc.column, format_path(path), message)
        )

    def fatal(self, loc: Loc, message: str, path: DocPath = ()) -> None:
        self.problem(loc, path, message)
        raise _Fatal

    def feed(self, event: Any) -> None:
        # Scalars are most events; position tuples are built once each, only when needed.
        kind = type(event)
        if kind is events.ScalarEvent:
            start = event.start_mark
            loc = Loc(
                start.line + 1, start.column + 1, event.style or None, event.end_mark.line + 1
            )
            if self._key_expected():
                self._key(event, loc)
                return
            value = self._scalar(event, loc)
            self._place(value, loc)
            self.nodes += 1
            if event.anchor:
                self.anchors[event.anchor] = (value, 1)
        elif kind is events.MappingEndEvent or kind is events.SequenceEndEvent:
            frame = self.stack.pop()
            if frame.anchor:
                self.open_anchors.discard(frame.anchor)
                self.anchors[frame.anchor] = (frame.value, self.nodes - frame.start)
        elif kind is events.MappingStartEvent or kind is events.SequenceStartEvent:
            self._start(event, _mark(event.start_mark))
        elif kind is events.AliasEvent:
            self._alias(event, _mark(event.start_mark))
        elif kind is events.DocumentStartEvent:
            self.documents += 1
            if self.documents > 1:
                self.fatal(
                    _mark(event.start_mark), "a workflow file holds exactly one YAML document"
                )

    def _key_expected(self) -> bool:
        return bool(self.stack) and self.stack[-1].is_map and self.stack[-1].key is None

    def _key(self, event: events.ScalarEvent, loc: Loc) -> None:
        frame = self.stack[-1]
        key = event.value
        path = (*frame.path, key)
        frame.key, frame.key_loc, frame.discard = key, loc, False
        if event.tag not in (None, "!", _CORE + "str"):
            self._bad_tag(event.tag, loc)
        if key == "<<" and event.tag is None and not event.style:
            self.problem(loc, path, "merge keys (<<) are not supported; write the keys out")
            frame.discard = True
        elif key in frame.seen:
            first = frame.seen[key]
            self.problem(
                loc,
                path,
                f"duplicate key {key!r} (first defined at line {first.line}, "
                f"column {first.column})",
            )
            frame.discard = True
        else:
            frame.seen[key] = loc

    def _scalar(self, event: events.ScalarEvent, loc: Loc) -> Any:
        tag, text = event.tag, event.value
        if tag in (None, "!"):
            return _resolve_plain(text) if tag is None and loc.style is None else text
        if tag == _CORE + "str":
            return text
        if tag in (_CORE + "int", _CORE + "float", _CORE + "bool", _CORE + "null"):
            value = _resolve_plain(text)
            kind = {int: "int", float: "float", bool: "bool", type(None): "null"}.get(type(value))
            if kind == tag.removeprefix(_CORE) or (kind == "int" and tag.endswith("float")):
                return float(value) if tag.endswith("float") else value
            self.problem(loc, self._path_here(), f"{text!r} is not a valid !!{tag[len(_CORE) :]}")
            return None
        self._bad_tag(tag, loc)
        return None

    def _bad_tag(self, tag: str, loc: Loc) -> None:
        shown = "!!" + tag[len(_CORE) :] if tag.startswith(_CORE) else tag
        self.problem(
            loc,
            self._path_here(),
            f"tag {shown!r} is not allowed: workflows hold only strings, numbers, "
            "booleans, null, lists and maps",
        )

    def _path_here(self) -> DocPath:
        if not self.stack:
            return ()
        frame = self.stack[-1]
        if frame.is_map:
            return (*frame.path, frame.key) if frame.key is not None else frame.path
        return (*frame.path, len(frame.value))

    def _start(self, event: events.CollectionStartEvent, loc: Loc) -> None:
        if self._key_expected():
            self.fatal(loc, "mapping keys must be plain strings", self.stack[-1].path)
        if len(self.stack) >= MAX_DEPTH:
            # The path would be as long as the nesting; its top two levels say enough.
            where = self._path_here()[:2]
            self.fatal(loc, f"the document nests deeper than {MAX_DEPTH} levels", where)
        is_map = isinstance(event, events.MappingStartEvent)
        if event.tag not in (None, "!", _CORE + ("map" if is_map else "seq")):
            self._bad_tag(event.tag, loc)
        value: Any = {} if is_map else []
        path, record = self._place(value, loc)
        self.nodes += 1
        if event.anchor:
            self.open_anchors.add(event.anchor)
        self.stack.append(_Frame(value, path, record, event.anchor, self.nodes - 1))

    def _alias(self, event: events.AliasEvent, loc: Loc) -> None:
        name = event.anchor or ""
        if self._key_expected():
            self.fatal(loc, "mapping keys must be plain strings, not aliases", self.stack[-1].path)
        if name in self.open_anchors:
            self.fatal(loc, f"alias *{name} refers to a node that contains it", self._path_here())
        if name not in self.anchors:
            self.fatal(loc, f"alias *{name} names no anchor defined before it", self._path_here())
        value, size = self.anchors[name]
        self.aliases += 1
        self.expanded += size
        if self.aliases > MAX_ALIASES or self.expanded > MAX_ALIAS_NODES:
            self.fatal(
                loc,
                f"too many aliases: more than {MAX_ALIASES} aliases or {MAX_ALIAS_NODES} "
                "nodes expanded (an alias bomb?)",
                self._path_here(),
            )
        # A copy, so that rewriting one use (an @file read in) leaves the others alone.
        self._place(copy.deepcopy(value), loc)
        self.nodes += size

    def _place(self, value: Any, loc: Loc) -> tuple[DocPath, bool]:
        if self.nodes - self.expanded >= MAX_NODES:  # aliases have their own cap
            self.fatal(
                loc,
                f"the document holds more than {MAX_NODES} values; a workflow is far "
                "smaller (read large data at run time instead)",
                self._path_here()[:2],
            )
        if not self.stack:
            self.root = value
            path: DocPath = ()
            record = True
        else:
            frame = self.stack[-1]
            record = frame.record
            if frame.is_map:
                key, frame.key = frame.key or "", None
                path = (*frame.path, key)
                if frame.discard:
                    record = False
                else:
                    frame.value[key] = value
                    if record and frame.key_loc is not None:
                        self.source.keys[path] = frame.key_loc
            else:
                path = (*frame.path, len(frame.value))
                frame.value.append(value)
        if record:
            self.source.values[path] = loc
        return path, record


def _resolve_plain(text: str) -> Any:
    """The value of an untagged plain scalar under the YAML 1.2 core schema."""
    if text in _NULLS:
        return None
    if text in _BOOLS:
        return _BOOLS[text]
    if _INT.fullmatch(text):
        try:
            return int(text, 0) if text[:2] in ("0o", "0x") else int(text)
        except ValueError:  # over Python's 4,300-digit limit: no field takes such a number
            return text
    if _FLOAT.fullmatch(text):
        return float(text)
    return _SPECIAL_FLOATS.get(text, text)
