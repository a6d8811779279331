"""The checked syntax tree of a compiled CEL expression, read from cel-cpp's own output.

cel-cpp exposes no tree, but ``Expression.serialize()`` is a ``cel.expr.CheckedExpr``
protocol buffer wrapped in ``google.protobuf.Any``: the expression tree (macros
already expanded into comprehensions) and the type the checker gave each node.
Decoding the few messages needed here takes a page of code and no protobuf
runtime; ``_cel_cost`` walks the result to bound what an evaluation can build.

Field numbers are those of cel-spec's ``proto/cel/expr/checked.proto`` and
``syntax.proto``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["SCALAR_TYPES", "Node", "decode_checked", "walk"]

SCALAR_TYPES = frozenset({"bool", "int", "uint", "double", "null"})
"""Checker types whose values have a fixed, small size."""

_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}

_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


@dataclass(slots=True)
class Node:
    """One expression node: ``kind`` is const, ident, select, call, list, struct or loop.

    ``name`` holds the identifier, selected field or function; ``value`` a
    constant (str, bytes, or a number); ``args`` a call's arguments after its
    target, a list's elements, or a map's keys and values in turn. A ``loop``
    (an expanded macro) keeps its parts in ``loop``.
    """

    id: int = 0
    kind: str = "const"
    name: str = ""
    value: object = None
    target: Node | None = None
    args: list[Node] = field(default_factory=list)
    loop: Comprehension | None = None
    type: str = "dyn"


@dataclass(slots=True)
class Comprehension:
    """A comprehension: ``for iter_var in range: accu = step while condition; result``."""

    iter_var: str = ""
    iter_var2: str = ""
    range: Node = field(default_factory=Node)
    accu_var: str = ""
    init: Node = field(default_factory=Node)
    condition: Node = field(default_factory=Node)
    step: Node = field(default_factory=Node)
    result: Node = field(default_factory=Node)


def decode_checked(serialized: bytes) -> Node:
    """The typed tree of ``cel.Expression.serialize()`` output.

    Raises:
        ValueError: The bytes are not a CheckedExpr this decoder understands.
    """
    body = next((v for n, v in _fields(serialized) if n == 2), None)  # Any.value
    if not isinstance(body, bytes):
        raise ValueError("not a serialized CheckedExpr")
    types: dict[int, str] = {}
    root: Node | None = None
    for number, value in _fields(body):
        if number == 3 and isinstance(value, bytes):  # type_map entry
            key = _int(_first(value, 1))
            types[key] = _type_name(_first(value, 2))
        elif number == 4 and isinstance(value, bytes):
            root = _expr(value)
    if root is None:
        raise ValueError("a CheckedExpr without an expression")
    for node in walk(root):
        node.type = types.get(node.id, "dyn")
    return root


def walk(node: Node) -> Iterator[Node]:
    """Every node of the tree under ``node``, ``node`` included (any order)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if current.target is not None:
            stack.append(current.target)
        stack.extend(current.args)
        if current.loop is not None:
            loop = current.loop
            stack.extend((loop.range, loop.init, loop.condition, loop.step, loop.result))


def _expr(data: bytes) -> Node:
    node = Node()
    for number, value in _fields(data):
        if number == 2:
            node.id = _int(value)
        elif not isinstance(value, bytes):
            continue
        elif number == 3:
            node.kind, node.value = "const", _constant(value)
        elif number == 4:
            node.kind, node.name = "ident", _text(_first(value, 1))
        elif number in (5, 6):
            node.kind = "select" if number == 5 else "call"
            _operation(node, value)
        elif number == 7:
            node.kind = "list"
            node.args = [_expr(v) for n, v in _fields(value) if n == 1 and isinstance(v, bytes)]
        elif number == 8:
            node.kind, node.args = "struct", _entries(value)
        elif number == 9:
            node.kind, node.loop = "loop", _loop(value)
    return node


def _operation(node: Node, data: bytes) -> None:
    """A Select's fields (operand 1, field 2, test_only 3: a varint) or a Call's (target 1,
    function 2, args 3): they share their first field numbers."""
    for number, value in _fields(data):
        if not isinstance(value, bytes):
            continue
        if number == 1:
            node.target = _expr(value)
        elif number == 2:
            node.name = value.decode()
        elif number == 3:
            node.args.append(_expr(value))


def _entries(data: bytes) -> list[Node]:
    """A map's (or message's) keys and values in turn."""
    nodes: list[Node] = []
    for number, entry in _fields(data):
        if number == 2 and isinstance(entry, bytes):
            nodes.extend(
                _expr(v) for k, v in _fields(entry) if k in (3, 4) and isinstance(v, bytes)
            )
    return nodes


def _loop(data: bytes) -> Comprehension:
    loop = Comprehension()
    for number, value in _fields(data):
        if not isinstance(value, bytes):
            continue
        if number == 1:
            loop.iter_var = value.decode()
        elif number == 8:
            loop.iter_var2 = value.decode()
        elif number == 3:
            loop.accu_var = value.decode()
        elif number == 2:
            loop.range = _expr(value)
        elif number == 4:
            loop.init = _expr(value)
        elif number == 5:
            loop.condition = _expr(value)
        elif number == 6:
            loop.step = _expr(value)
        elif number == 7:
            loop.result = _expr(value)
    return loop


def _constant(data: bytes) -> object:
    """Text, bytes and numbers (the length of a range is one); None for null and bools."""
    for number, value in _fields(data):
        if number == 6 and isinstance(value, bytes):
            return value.decode()
        if number == 7:
            return value
        if number == 3 and isinstance(value, int):  # int64, two's complement in a varint
            return value - (1 << 64) if value >= 1 << 63 else value
        if number == 4 and isinstance(value, int):  # uint64
            return value
        if number == 5 and isinstance(value, int):  # double, as fixed64
            return float(struct.unpack("<d", value.to_bytes(8, "little"))[0])
    return None


def _type_name(data: bytes | int | None) -> str:
    if not isinstance(data, bytes):
        return "dyn"
    for number, value in _fields(data):
        if number == 2:
            return "null"
        if number == 3:
            return _PRIMITIVES.get(_int(value), "dyn")
        if number == 6:
            return "list"
        if number == 7:
            return "map"
    return "dyn"


def _first(data: bytes, wanted: int) -> bytes | int | None:
    return next((value for number, value in _fields(data) if number == wanted), None)


def _int(value: bytes | int | None) -> int:
    return value if isinstance(value, int) else 0


def _text(value: bytes | int | None) -> str:
    return value.decode() if isinstance(value, bytes) else ""


def _fields(data: bytes) -> Iterator[tuple[int, bytes | int]]:
    """(field number, value) pairs of one message: ints for varints and fixed, bytes else."""
    position, end = 0, len(data)
    while position < end:
        tag, position = _varint(data, position)
        number, wire = tag >> 3, tag & 7
        if wire == _VARINT:
            value, position = _varint(data, position)
            yield number, value
        elif wire == _BYTES:
            length, position = _varint(data, position)
            yield number, data[position : position + length]
            position += length
        elif wire == _FIXED64:
            yield number, int.from_bytes(data[position : position + 8], "little")
            position += 8
        elif wire == _FIXED32:
            yield number, int.from_bytes(data[position : position + 4], "little")
            position += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(data):
            raise ValueError("truncated protobuf varint")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
