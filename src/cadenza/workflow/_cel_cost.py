"""A bound on what one CEL evaluation can build, checked before the engine runs.

cel-cpp caps the iterations of an evaluation (10,000) but not the size of the
values it builds: ``content.replace("", content)`` on 40 KB of model output
asks for 1.6 GB, and ``items.map(i, i * 2)`` copies its growing list on every
iteration (8,000 items: 1.5 s and 750 MB). The engine cannot be interrupted
once it runs, so the bound is worked out beforehand.

At compile time the checked tree (``_cel_ast``) becomes a polynomial in the
sizes of the values the expression reads (``steps.a.content`` has a size and,
for a list or map, a count of elements): the *work* of an evaluation, in units
of about one byte, counting every value built and every value scanned. Before
each evaluation the sizes of the values actually handed to the engine are
measured and the polynomial evaluated; over :data:`WORK_LIMIT` the evaluation
is refused. Expressions that build nothing (comparisons, ``size``,
``contains`` with a short literal needle, field access) are linear in their
input by construction and skip the measurement, so the common conditions pay
nothing.

Searching is not linear either. cel-cpp finds a substring (``contains``,
``indexOf``, ``lastIndexOf``, ``split``, ``replace``) by comparing the needle
at every position of the text, so a 500 KB needle taken from the data costs
5 s on 1 MB of text: a search is charged the product of both sizes
(:data:`SEARCH_WEIGHT`). ``matches`` runs RE2, linear in the text for a given
pattern but proportional to the pattern's compiled program when its DFA gives
up: a pattern written in the workflow is the author's and is charged as a scan,
but one that comes from the data is charged its program size (``_cel_regex``,
measured on the actual text before each evaluation) times the text's, and
refused outright past :data:`PATTERN_LIMIT` characters.

One function builds from a number rather than from a size: ``lists.range(n)``
makes a list of n integers. Its length is bounded by the magnitude of the
integer expression it is given, itself a polynomial in the *values* of the
numbers it reads (``|a + b| <= |a| + |b|``, ``|a * b| = |a| |b|``, ``size(x)``
is the count of ``x``); a length computed any other way (from a comprehension's
variable, through a conversion) is refused at load.

The bound is an over-estimate by design: sums over a comprehension use
``sum(a_i ** k) <= sum(a_i) ** k``, a conditional counts both branches, and a
comprehension's accumulator counts its full final size on every iteration
(which is what cel-cpp really does for ``map`` and ``filter``). Text counts its
UTF-8 bytes, four per character unless it is ASCII.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ._cel_ast import SCALAR_TYPES, Node
from ._cel_regex import program_bound

__all__ = [
    "PATTERN_LIMIT",
    "REGEX_COMPILE",
    "REGEX_WEIGHT",
    "SEARCH_WEIGHT",
    "WORK_LIMIT",
    "CostBound",
    "PatternTooLong",
    "TooCostly",
    "bound_of",
    "measure",
]

WORK_LIMIT = 32 * 2**20
"""Units of work (about bytes built or scanned) one evaluation may need: 32 Mi.

Measured with cel-cpp on this project's machines, 32 Mi units of the slowest
kinds (``replace``, a ``map``'s copied accumulator) take under 100 ms and
64 MB; plain concatenation takes a fraction of that."""

ELEMENT = 16
"""The units one list element or map entry costs beyond its contents."""

SEARCH_WEIGHT = 1 / 64
"""Units per (text byte x needle byte) of a substring search.

Measured: comparing a needle of ``x...xy`` at every position of ``x...x``
costs 0.010-0.020 ns per pair, whichever of the five functions; 32 Mi units
allow 2.1e9 pairs, 45 ms at worst."""

REGEX_WEIGHT = 2.0
"""Units per (program instruction x text byte) of ``matches`` with a pattern from data.

Measured where RE2's DFA gives up (``a[ab]{1000}c`` on 1 MB of ``a``/``b``):
3.7-4.4 ns per instruction and byte, about two units."""

REGEX_COMPILE = 128.0
"""Units per program instruction to compile a pattern from data (measured: 55-260 ns)."""

PATTERN_LIMIT = 4_096
"""Characters a regular expression from data may have: a whole expression's own cap."""

_MAX_TERMS = 256

Monomial = tuple[tuple[str, int], ...]
Poly = dict[Monomial, float]

# Functions that look for their second argument in their first: a search each.
_SEARCHES = frozenset({"contains", "indexOf", "lastIndexOf", "split", "replace"})
# Functions that only read their arguments (work: their sizes) and give a scalar.
_READERS = frozenset({
    "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "@in", "contains", "startsWith",
    "endsWith", "matches", "indexOf", "lastIndexOf", "size", "@not_strictly_false",
})  # fmt: skip
# Functions that select part of their first argument without copying it.
_SELECTORS = frozenset({"_[_]", "dyn", "_-_", "_*_", "_/_", "_%_", "-_"})
# Functions whose new result is at most as large as their receiver (lists: flatten, slice).
_COPIERS = frozenset({
    "lowerAscii", "upperAscii", "reverse", "trim", "substring", "charAt", "flatten", "slice",
})  # fmt: skip
# The lists extension's reorderings: a list as large as the receiver, built by comparing
# its elements. Measured with cel-cpp, per unit of the receiver beyond converting it:
# sort 2-4 ns (ints or 10 KB strings alike), distinct 1-2 ns, the sortBy pairs' sort
# the same; a copy is about 1 ns.
_REORDERINGS = {"sort": 4.0, "distinct": 4.0, "@sortByAssociatedKeys": 4.0}
_RANGE = "lists.range"
# Arithmetic whose magnitude is bounded by its operands' (see `_Walker._magnitude`).
_SUMS = frozenset({"_+_", "_-_"})
_SHRINKS = frozenset({"_/_", "_%_", "-_"})  # |a / b|, |a % b| and |-a| are at most |a|
# Conversions: a number or timestamp printed as text is larger than its 1 unit.
_CONVERSIONS = frozenset({"string", "bytes", "int", "uint", "double", "timestamp", "duration"})
_PRINTED = 32  # units of text one scalar can print as
# Builders that cost more time per unit built than a copy (measured): a weight each.
_SLOW = {"replace": 4.0, "split": 2.0}


class TooCostly(Exception):
    """The expression cannot be bounded: too intricate, or a pattern computed in an opaque way."""


class PatternTooLong(Exception):
    """A regular expression from data is longer than :data:`PATTERN_LIMIT`."""

    def __init__(self, where: str, length: int) -> None:
        super().__init__(where, length)
        self.where = where
        self.length = length


# A regular expression from data: literal text and context paths, joined.
_PatternPart = str | tuple[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class _Size:
    """Upper bounds of one value: its size, its element count, and the work to build it."""

    size: Poly
    count: Poly
    work: Poly


@dataclass(frozen=True, slots=True)
class CostBound:
    """The work polynomial of one expression and the input paths it is written in."""

    work: tuple[tuple[Monomial, float], ...]
    paths: tuple[tuple[str, tuple[str, ...]], ...]
    patterns: tuple[tuple[_PatternPart, ...], ...] = ()
    numbers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Paths whose numeric value (not size) the work depends on: a range's length."""

    @property
    def fixed(self) -> float | None:
        """The work when it depends on no value read (only literals), else None."""
        if any(monomial for monomial, _ in self.work):
            return None
        return sum(coefficient for _, coefficient in self.work)

    def estimate(self, data: Mapping[str, object]) -> float:
        """The bound on the work of evaluating over ``data`` (the engine's own input).

        Raises:
            PatternTooLong: A regular expression from data is over :data:`PATTERN_LIMIT`.
        """
        values: dict[str, float] = {}
        for root, keys in self.paths:
            value = _lookup(data, root, keys)
            size, count = measure(value)
            name = _path_name(root, keys)
            values["s:" + name] = size
            values["n:" + name] = count
        for index, parts in enumerate(self.patterns):
            values[f"r:{index}"] = _program(data, parts)
        for root, keys in self.numbers:
            values["i:" + _path_name(root, keys)] = _magnitude(_lookup(data, root, keys))
        total = 0.0
        for monomial, coefficient in self.work:
            term = coefficient
            for symbol, exponent in monomial:
                try:
                    term *= values.get(symbol, 0.0) ** exponent
                except OverflowError:
                    return math.inf
            total += term
        return total


def bound_of(root: Node) -> CostBound | None:
    """The work bound of the tree at ``root``, or None when it builds nothing worth checking.

    Raises:
        TooCostly: The bound has too many terms to evaluate cheaply.
    """
    walker = _Walker()
    result = walker.walk(root, {})
    if not walker.builds:
        return None
    work = _add(result.work, result.size)
    return CostBound(
        tuple(work.items()),
        tuple(sorted(walker.paths)),
        tuple(walker.patterns),
        tuple(sorted(walker.numbers)),
    )


def measure(value: object) -> tuple[float, float]:
    """(size, count) of a plain value: text bytes plus ``ELEMENT`` per element, nested."""
    if isinstance(value, str | bytes):
        return _bytes(value), float(len(value))
    if not isinstance(value, list | tuple | dict):
        return 1.0, 1.0
    count = float(len(value))
    size = 0.0
    stack: list[object] = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, str | bytes):
            size += _bytes(current)
        elif isinstance(current, dict):
            size += ELEMENT * len(current)
            stack.extend(current.keys())
            stack.extend(current.values())
        elif isinstance(current, list | tuple):
            size += ELEMENT * len(current)
            stack.extend(current)
        else:
            size += 1
    return size, count


def _magnitude(value: object) -> float:
    """``|value|`` for a number the engine will read, 0 for anything else (a type error)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(abs(value))
    return 0.0


def _bytes(text: str | bytes) -> float:
    """The UTF-8 bytes of ``text`` at most, in constant time (``isascii`` is a flag)."""
    return float(len(text) if isinstance(text, bytes) or text.isascii() else 4 * len(text))


def _program(data: Mapping[str, object], parts: tuple[_PatternPart, ...]) -> float:
    """The bound on RE2's program for the pattern ``parts`` spell over ``data``."""
    texts = []
    for part in parts:
        value = part if isinstance(part, str) else _lookup(data, *part)
        # Anything but text is a type error the engine reports without compiling a thing.
        texts.append(value if isinstance(value, str) else "")
    pattern = "".join(texts)
    if len(pattern) > PATTERN_LIMIT:
        where = " + ".join(_shown(part) for part in parts)
        raise PatternTooLong(where, len(pattern))
    return program_bound(pattern)


def _shown(part: _PatternPart) -> str:
    if isinstance(part, str):
        return repr(part) if len(part) <= 20 else repr(part[:17] + "...")
    root, keys = part
    return "".join([root, *(f".{key}" if key.isidentifier() else f"[{key!r}]" for key in keys)])


class _Walker:
    """One pass over a tree, collecting the input paths it reads and the patterns from data."""

    def __init__(self) -> None:
        self.paths: set[tuple[str, tuple[str, ...]]] = set()
        self.patterns: list[tuple[_PatternPart, ...]] = []
        self.numbers: set[tuple[str, tuple[str, ...]]] = set()
        # Whether the expression must be measured before each evaluation: it builds
        # something, or its work grows faster than its inputs.
        self.builds = False
        self._depth = 0

    def walk(self, node: Node, scope: dict[str, _Size]) -> _Size:
        measured = self._node(node, scope)
        if node.type in SCALAR_TYPES:
            return _Size(_ONE, _ONE, measured.work)
        return measured

    def _node(self, node: Node, scope: dict[str, _Size]) -> _Size:
        path = _path(node, scope)
        if path is not None:
            self.paths.add(path)
            name = _path_name(*path)
            return _Size(_symbol("s:" + name), _symbol("n:" + name), {})
        if node.kind == "const":
            length = float(len(node.value)) if isinstance(node.value, str | bytes) else 1.0
            return _Size(_constant(length), _constant(length), {})
        if node.kind == "ident":
            return scope.get(node.name, _Size(_ONE, _ONE, {}))
        if node.kind == "select":
            assert node.target is not None
            operand = self.walk(node.target, scope)
            return _Size(operand.size, operand.size, operand.work)
        if node.kind in ("list", "struct"):
            return self._literal(node, scope)
        if node.kind == "loop":
            return self._loop(node, scope)
        return self._call(node, scope)

    def _literal(self, node: Node, scope: dict[str, _Size]) -> _Size:
        parts = [self.walk(arg, scope) for arg in node.args]
        entries = len(parts) if node.kind == "list" else len(parts) // 2
        size = _add(_constant(ELEMENT * entries), *(part.size for part in parts))
        if parts:
            self.builds = True
        work = _add(size, *(part.work for part in parts))
        return _Size(size, _constant(entries), work)

    def _call(self, node: Node, scope: dict[str, _Size]) -> _Size:
        operands = [node.target] if node.target is not None else []
        operands += node.args
        parts = [self.walk(arg, scope) for arg in operands]
        work = _add(*(part.work for part in parts))
        if node.name == _RANGE and len(operands) == 1:
            return self._range(operands[0], scope, work)
        if node.name.startswith("math."):  # numbers in, a number or a bool out
            return _Size(_ONE, _ONE, _add(work, *(part.size for part in parts)))
        name = node.name.rsplit(".", 1)[-1]  # strings.quote -> quote
        work = _add(work, self._scanning(name, parts, operands, scope))
        shaped = self._shaped(name, parts, work)
        if shaped is not None:
            return shaped
        if node.type in SCALAR_TYPES:
            return _Size(_ONE, _ONE, _add(work, *(part.size for part in parts)))
        self.builds = True
        size, count = _built(name, parts)
        if name == "_+_" and node.type == "list":
            # Lists share their elements: joining two copies references, not contents.
            return _Size(size, count, _add(work, _scale(count, ELEMENT)))
        built = _scale(size, _SLOW.get(name, 1.0))
        return _Size(size, count, _add(work, built, *(part.size for part in parts)))

    def _scanning(
        self, name: str, parts: list[_Size], operands: list[Node], scope: dict[str, _Size]
    ) -> Poly:
        """The work of a search of text for text, or of a regular expression's match."""
        if name in _SEARCHES and len(parts) >= 2:
            return self._search(parts[0], parts[1])
        if name == "matches" and len(parts) == 2:
            return self._regex(parts[0], operands[1], scope)
        return {}

    def _shaped(self, name: str, parts: list[_Size], work: Poly) -> _Size | None:
        """The result of a call whose size follows from its operands' (None: another call).

        Logic and readers give a scalar; ``?:`` one of its branches; selectors a part
        of their first operand, copiers and reorderings a copy of it.
        """
        if name in ("_&&_", "_||_", "!_", "@not_strictly_false"):
            return _Size(_ONE, _ONE, work)
        if name in _READERS:
            return _Size(_ONE, _ONE, _add(work, *(part.size for part in parts)))
        if name == "_?_:_" and len(parts) == 3:
            size = _max(parts[1].size, parts[2].size)
            return _Size(size, _max(parts[1].count, parts[2].count), work)
        if not parts:
            return None
        if name in _SELECTORS:
            return _Size(parts[0].size, parts[0].size, work)
        if name in _COPIERS:
            return _Size(parts[0].size, parts[0].size, _add(work, parts[0].size))
        if name in _REORDERINGS:
            self.builds = True
            sorted_ = _scale(parts[0].size, _REORDERINGS[name])
            return _Size(parts[0].size, parts[0].count, _add(work, sorted_, parts[0].size))
        return None

    def _range(self, length: Node, scope: dict[str, _Size], work: Poly) -> _Size:
        """``lists.range(n)``: n integers, each an element of the list built.

        Raises:
            TooCostly: n is computed in a way whose magnitude cannot be bounded.
        """
        count = self._magnitude(length, scope)
        if count is None:
            raise TooCostly(
                "the length given to lists.range() is computed in a way that cannot be"
                " bounded; write a number, a context value, size(...), or those combined"
                " with + - * / % and ?:"
            )
        self.builds = True
        size = _scale(count, ELEMENT + 1)
        return _Size(size, count, _add(work, size))

    def _magnitude(self, node: Node, scope: dict[str, _Size]) -> Poly | None:
        """A bound on ``|value|`` of the integer expression ``node``, or None if there is none.

        A context path is a symbol measured before each evaluation (``i:`` + its
        name); ``size(x)`` is x's count. Anything else (a comprehension's variable,
        a conversion, a function) has no bound here.
        """
        if node.kind == "const":
            value = node.value
            return _constant(_magnitude(value)) if isinstance(value, int | float) else None
        path = _path(node, scope)
        if path is not None:
            self.numbers.add(path)
            return _symbol("i:" + _path_name(*path))
        if node.kind != "call":
            return None
        operands = [node.target] if node.target is not None else []
        operands += node.args
        if node.name == "size" and len(operands) == 1:
            return self.walk(operands[0], scope).count
        if node.name == "_?_:_" and len(operands) == 3:
            yes, no = (self._magnitude(branch, scope) for branch in operands[1:])
            return None if yes is None or no is None else _max(yes, no)
        return self._arithmetic(node.name, operands, scope)

    def _arithmetic(self, name: str, operands: list[Node], scope: dict[str, _Size]) -> Poly | None:
        """`_magnitude` of a sum, a product or what shrinks its first operand (``/ % -``);
        None for any other call."""
        if name not in _SUMS and name not in _SHRINKS and name != "_*_":
            return None
        bounds = []
        for operand in operands:
            bound = self._magnitude(operand, scope)
            if bound is None:
                return None
            bounds.append(bound)
        if name in _SUMS:
            return _add(*bounds)
        if name == "_*_":
            return _mul(bounds[0], bounds[1])
        return bounds[0]

    def _search(self, text: _Size, needle: _Size) -> Poly:
        """Looking for ``needle`` at every position of ``text``: the product of their sizes."""
        work = _scale(_mul(text.size, needle.size), SEARCH_WEIGHT)
        # A short literal needle keeps the search linear and cheap: no need to measure.
        if any(sum(e for _, e in m) > 1 or (m and c > 1) for m, c in work.items()):
            self.builds = True
        return work

    def _regex(self, text: _Size, pattern: Node, scope: Mapping[str, _Size]) -> Poly:
        """A pattern written in the workflow is the author's; one from data is charged.

        Raises:
            TooCostly: The pattern is computed in a way its text cannot be read back.
        """
        if pattern.kind == "const":
            return {}
        parts = _pattern_parts(pattern, scope)
        if parts is None:
            raise TooCostly(
                "the pattern of matches() is computed in a way that cannot be bounded;"
                " write it as a literal, a context value, or literals and context values"
                " joined with +"
            )
        if all(isinstance(part, str) for part in parts):
            return {}  # literals joined: written in the workflow too
        self.builds = True
        if parts not in self.patterns:
            self.patterns.append(parts)
        program = _symbol(f"r:{self.patterns.index(parts)}")
        return _mul(program, _add(_constant(REGEX_COMPILE), _scale(text.size, REGEX_WEIGHT)))

    def _loop(self, node: Node, scope: dict[str, _Size]) -> _Size:
        loop = node.loop
        assert loop is not None
        # Every iteration may scan its inputs again: a comprehension is always checked.
        self.builds = True
        self._depth += 1
        variable = f"v:{self._depth}:{loop.iter_var}"
        over = self.walk(loop.range, scope)
        element = _Size(_symbol(variable), _symbol(variable), {})
        inner = {**scope, loop.iter_var: element}
        if loop.iter_var2:
            inner[loop.iter_var2] = element
        init = self.walk(loop.init, inner)

        def summed(poly: Poly) -> Poly:
            return _sum_over(poly, variable, over.count, over.size)

        # First the accumulator's final size (init plus every iteration's step),
        # then the work of every step with the accumulator at that size.
        inner[loop.accu_var] = init
        first = self.walk(loop.step, inner)
        final = _Size(
            _add(init.size, summed(first.size)), _add(init.count, summed(first.count)), {}
        )
        inner[loop.accu_var] = final
        step = self.walk(loop.step, inner)
        condition = self.walk(loop.condition, inner)
        result = self.walk(loop.result, inner)
        self._depth -= 1
        work = _add(over.work, init.work, summed(_add(step.work, condition.work)), result.work)
        return _Size(result.size, result.count, work)


def _built(name: str, parts: list[_Size]) -> tuple[Poly, Poly]:
    """(size, count) of what a building function returns, from its arguments'."""
    sizes = [part.size for part in parts]
    if name == "_+_":
        return _add(*sizes), _add(*(part.count for part in parts))
    if name == "replace" and len(parts) >= 3:
        text, new = sizes[0], sizes[2]
        grown = _add(text, _mul(_add(text, _ONE), new))  # every gap may take `new`
        return grown, grown
    if name == "split" and parts:
        return _add(_scale(sizes[0], 1 + ELEMENT), _constant(ELEMENT)), _add(sizes[0], _ONE)
    if name == "join" and parts:
        separator = sizes[1] if len(sizes) > 1 else {}
        joined = _add(sizes[0], _mul(parts[0].count, separator))
        return joined, joined
    if name == "quote" and parts:
        quoted = _add(_scale(sizes[0], 10), _constant(2))  # \U escapes: 10 per character
        return quoted, quoted
    if name in _CONVERSIONS and parts:
        printed = _add(_scale(sizes[0], _PRINTED), _constant(_PRINTED))
        return printed, printed
    # format, and anything not known here: every argument printed at its widest.
    printed = _add(_scale(_add(*sizes), _PRINTED), _constant(_PRINTED))
    return printed, printed


def _path(node: Node, scope: Mapping[str, _Size]) -> tuple[str, tuple[str, ...]] | None:
    """The context path a chain of fields and constant keys selects, if that is what it is."""
    keys: list[str] = []
    current = node
    while True:
        if current.kind == "select" and current.target is not None and current.name:
            keys.append(current.name)
            current = current.target
        elif (
            current.kind == "call"
            and current.name == "_[_]"
            and len(current.args) == 2
            and current.args[1].kind == "const"
            and isinstance(current.args[1].value, str)
        ):
            keys.append(current.args[1].value)
            current = current.args[0]
        elif current.kind == "ident" and current.name not in scope:
            return current.name, tuple(reversed(keys))
        else:
            return None


def _pattern_parts(node: Node, scope: Mapping[str, _Size]) -> tuple[_PatternPart, ...] | None:
    """The literals and context paths ``node`` joins with ``+``, or None if it is more."""
    if node.kind == "const" and isinstance(node.value, str):
        return (node.value,)
    path = _path(node, scope)
    if path is not None:
        return (path,)
    if node.kind == "call" and node.name == "_+_" and len(node.args) == 2:
        left = _pattern_parts(node.args[0], scope)
        right = _pattern_parts(node.args[1], scope)
        return None if left is None or right is None else left + right
    return None


def _path_name(root: str, keys: tuple[str, ...]) -> str:
    return "\x1f".join((root, *keys))


def _lookup(data: Mapping[str, object], root: str, keys: tuple[str, ...]) -> object:
    value: object = data.get(root)
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


_ONE: Poly = {(): 1.0}


def _constant(value: float) -> Poly:
    return {(): float(value)} if value else {}


def _symbol(name: str) -> Poly:
    return {((name, 1),): 1.0}


def _add(*polys: Poly) -> Poly:
    total: Poly = {}
    for poly in polys:
        for monomial, coefficient in poly.items():
            total[monomial] = total.get(monomial, 0.0) + coefficient
    return _checked(total)


def _scale(poly: Poly, factor: float) -> Poly:
    return {monomial: coefficient * factor for monomial, coefficient in poly.items()}


def _max(a: Poly, b: Poly) -> Poly:
    """An upper bound of both (symbols are never negative): each term's larger coefficient."""
    return {m: max(a.get(m, 0.0), b.get(m, 0.0)) for m in a.keys() | b.keys()}


def _mul(a: Poly, b: Poly) -> Poly:
    product: Poly = {}
    for left, x in a.items():
        for right, y in b.items():
            monomial = _times(left, right)
            product[monomial] = product.get(monomial, 0.0) + x * y
    return _checked(product)


def _times(left: Monomial, right: Monomial) -> Monomial:
    exponents = dict(left)
    for symbol, exponent in right:
        exponents[symbol] = exponents.get(symbol, 0) + exponent
    return tuple(sorted(exponents.items()))


def _power(poly: Poly, exponent: int) -> Poly:
    result = _ONE
    for _ in range(exponent):
        result = _mul(result, poly)
    return result


def _sum_over(poly: Poly, variable: str, count: Poly, total: Poly) -> Poly:
    """The sum of ``poly`` over every iteration, ``variable`` being one element's size.

    A term without the element is paid once per iteration (``count`` times);
    ``c * x**k`` summed over elements whose sizes add up to ``total`` is at
    most ``c * total**k``.
    """
    summed: list[Poly] = []
    for monomial, coefficient in poly.items():
        exponent = dict(monomial).get(variable, 0)
        rest: Poly = {tuple(p for p in monomial if p[0] != variable): coefficient}
        summed.append(_mul(rest, count if exponent == 0 else _power(total, exponent)))
    return _add(*summed)


def _checked(poly: Poly) -> Poly:
    if len(poly) > _MAX_TERMS:
        raise TooCostly(f"its cost bound has more than {_MAX_TERMS} terms")
    return poly
