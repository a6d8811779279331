"""Where things are in a document: positions of keys and values by document path.

The YAML loader fills a :class:`SourceMap` while it builds the document, and the
problem reporter asks it for the line and column of a path, or of a character
inside a string value (where a CEL syntax error is).
"""

from __future__ import annotations

from functools import cached_property
from typing import NamedTuple

__all__ = ["DocPath", "Loc", "SourceMap"]

DocPath = tuple[str | int, ...]
"""A position in a document: mapping keys and list indexes from the root."""


class Loc(NamedTuple):
    """Where a node starts (1-based), its scalar style and the line it ends on."""

    line: int
    column: int
    style: str | None = None
    end_line: int = 0


class SourceMap:
    """Positions of a document's keys and values, by document path.

    Lookups fall back to the nearest recorded ancestor, so a path the document does
    not spell out (a default, something inside an alias) still gets a useful place.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.keys: dict[DocPath, Loc] = {}
        self.values: dict[DocPath, Loc] = {}

    @cached_property
    def lines(self) -> list[str]:
        """The document's lines, split once when a position inside a value is asked for."""
        return self.text.splitlines()

    def locate(self, path: DocPath) -> tuple[int, int]:
        """Line and column of ``path``: its key when it is a map entry, else its value."""
        for end in range(len(path), -1, -1):
            prefix = path[:end]
            loc = self.keys.get(prefix) or self.values.get(prefix)
            if loc is not None:
                return loc.line, loc.column
        return 1, 1

    def locate_offset(self, path: DocPath, offset: int) -> tuple[int, int]:
        """Line and column of character ``offset`` inside the string value at ``path``.

        Exact for single-line plain and quoted scalars and for literal blocks (``|``);
        other multi-line scalars fold or unescape their lines, so the scalar's start
        is the best answer there.
        """
        loc = self.values.get(path)
        if loc is None:
            return self.locate(path)
        lines = self.lines
        if loc.style == "|":
            return _offset_in_block(lines, loc, offset)
        if loc.line != loc.end_line or loc.line > len(lines):
            return loc.line, loc.column
        raw = lines[loc.line - 1]
        start = loc.column - 1
        if loc.style in ('"', "'"):
            start += 1
        return loc.line, _raw_column(raw, start, offset, loc.style) + 1


def _offset_in_block(lines: list[str], loc: Loc, offset: int) -> tuple[int, int]:
    """Map an offset in a literal block's value to the block's source lines."""
    first = loc.line  # the `|` indicator's line (1-based) is followed by the content
    while first < len(lines) and not lines[first].strip():
        first += 1
    if first >= len(lines):
        return loc.line, loc.column
    indent = len(lines[first]) - len(lines[first].lstrip(" "))
    line = first
    remaining = offset
    while line < len(lines):
        body = lines[line][indent:]
        if remaining <= len(body):
            return line + 1, indent + remaining + 1
        remaining -= len(body) + 1
        line += 1
    return loc.line, loc.column


def _raw_column(raw: str, start: int, offset: int, style: str | None) -> int:
    """0-based column in ``raw`` of value character ``offset``, stepping over escapes."""
    col = start
    for _ in range(offset):
        if col >= len(raw):
            break
        if style == '"' and raw[col] == "\\":
            nxt = raw[col + 1 : col + 2]
            col += {"x": 4, "u": 6, "U": 10}.get(nxt, 2)
        elif style == "'" and raw[col : col + 2] == "''":
            col += 2
        else:
            col += 1
    return col
