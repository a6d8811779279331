"""The CEL engine: Google's cel-cpp, through the ``cel-expr-python`` bindings.

Chosen by the bake-off in docs/cel-engine.md: full conformance on the cases
workflows use, heterogeneous numeric comparison, type-checked compilation
(a misspelt variable fails at load), located syntax errors, a built-in
comprehension budget (10,000 iterations per evaluation), wheels for Linux and
macOS on x86-64 and arm64, and it leaves ``sys.getrecursionlimit()`` alone.
Expressions get cel-cpp's strings, math and lists extensions (``_cel_cost``
charges what each of their functions builds).

This module is the only one that imports the engine. It speaks in engine
terms (line and column, the engine's own error text) and turns results into
plain Python; ``_cel`` turns failures into Cadenza's errors.
"""

from __future__ import annotations

import difflib
import functools
import re
import threading
from collections.abc import Iterable

from cel_expr_python import cel
from cel_expr_python.ext import ext_strings

__all__ = ["CompileFailure", "EvalFailure", "Program", "compile_program"]

LISTS_VERSION = 2
"""cel-cpp's lists extension: ``lists.range``, ``distinct``, ``flatten``, ``reverse``,
``slice``, ``sort`` and ``sortBy``."""
MATH_VERSION = 2
"""cel-cpp's math extension: ``math.greatest``/``least``, rounding, ``abs``, ``sign``,
``sqrt``, the ``isInf``/``isNaN``/``isFinite`` tests and the bit operations."""

ITERATION_BUDGET = 10_000
"""cel-cpp's default ``comprehension_max_iterations``: all loops of one evaluation together."""

_ERROR = cel.Type.ERROR
_COMPILE_LOCK = threading.Lock()
_STATUS = re.compile(r"^(?:[A-Z_]+: )+|\s*\[[A-Z_]+\]\s*$")
_LOCATED = re.compile(r"ERROR: <input>:(-?\d+):(-?\d+): (.*)")
_OPERATORS = {
    "_+_": "+", "_-_": "-", "_*_": "*", "_/_": "/", "_%_": "%", "_<_": "<", "_<=_": "<=",
    "_>_": ">", "_>=_": ">=", "_==_": "==", "_!=_": "!=", "!_": "!", "-_": "unary -",
    "_[_]": "[]", "@in": "in", "_&&_": "&&", "_||_": "||", "_?_:_": "?:",
    "math.@max": "math.greatest", "math.@min": "math.least",
}  # fmt: skip


class CompileFailure(Exception):
    """The engine refused the text; ``line``/``column`` are 1-based, 0 when unknown.

    ``unknown`` is the undeclared name when that is the problem.
    """

    def __init__(
        self,
        description: str,
        line: int,
        column: int,
        *,
        too_complex: bool = False,
        unknown: str | None = None,
    ) -> None:
        super().__init__(description)
        self.description = description
        self.line = line
        self.column = column
        self.too_complex = too_complex
        self.unknown = unknown


class EvalFailure(Exception):
    """An evaluation failed; ``kind`` says how, for ``_cel`` to explain it.

    Kinds: ``missing_key``, ``no_field`` (a field selected on a non-map),
    ``unknown_name`` (a declared name absent from the context), ``budget``,
    ``other``.
    """

    def __init__(self, kind: str, detail: str, name: str | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.name = name


class Program:
    """One compiled expression; evaluating it is thread-safe in cel-cpp."""

    __slots__ = ("_compiled", "_eval")

    def __init__(self, compiled: cel.Expression) -> None:
        self._compiled = compiled
        self._eval = compiled.eval

    def checked_tree(self) -> bytes:
        """The engine's checked tree (a serialized ``cel.expr.CheckedExpr``) for `_cel_ast`."""
        data: bytes = self._compiled.serialize()
        return data

    def run(self, data: dict[str, object]) -> object:
        """Evaluate over ``data`` and return plain Python.

        Raises:
            EvalFailure: The engine reported an error.
        """
        try:
            # Positional: pybind11 parses keyword arguments at a measurable cost here.
            value = self._eval(None, data)
        except RuntimeError as exc:  # the iteration budget, and bad input values
            raise _eval_failure(str(exc)) from None
        except MemoryError:  # std::bad_alloc: refused by the cost bound first, but never raw
            raise EvalFailure("memory", "the CEL engine ran out of memory") from None
        except ValueError as exc:  # std::length_error: lists.range(-1) asks for a negative size
            raise EvalFailure("other", _length_error(str(exc))) from None
        plain = value.value()
        kind = type(plain)
        if kind is bool or kind is int or kind is float or plain is None:
            return plain
        if kind is str:
            # An error comes back as a value whose value() is its message.
            if value.type() == _ERROR:
                raise _eval_failure(plain)
            return plain
        return _plain(value.plain_value())


def _plain(value: object) -> object:
    """The few engine types that are not plain Python yet: bytes, type values; map order."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        # CEL maps have no order and cel-cpp's differs from process to process;
        # sorted keys make results (and rendered templates) the same every run.
        items = sorted(value.items(), key=lambda kv: (type(kv[0]).__name__, kv[0]))
        return {_plain(k): _plain(v) for k, v in items}
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, cel.Type):
        return value.name().lower()
    return value


@functools.lru_cache(maxsize=8)
def _env(names: frozenset[str]) -> cel.Env:
    # Every name is dyn: a declared int would make ``iteration > 2.5`` a type error.
    variables = dict.fromkeys(sorted(names), cel.Type.DYN)
    return cel.NewEnv(
        config=_extensions(), variables=variables, extensions=[ext_strings.ExtStrings()]
    )


@functools.cache
def _extensions() -> cel.EnvConfig:
    """cel-cpp's math and lists extensions, at the versions `_cel_cost` charges.

    The bindings wrap math (``ext_math``) but not lists, which cel-cpp has all the
    same; an environment configuration names both, versions pinned, so that a
    newer engine cannot add functions the cost bound has never heard of.
    """
    return cel.NewEnvConfigFromYaml(
        f"extensions:\n  - name: lists\n    version: {LISTS_VERSION}\n"
        f"  - name: math\n    version: {MATH_VERSION}\n"
    )


def compile_program(text: str, names: Iterable[str]) -> Program:
    """Parse and type-check ``text`` with ``names`` declared as dynamic variables.

    Raises:
        CompileFailure: A syntax error, an unknown name, or operand types that never fit.
    """
    known = frozenset(names)
    env = _env(known)
    try:
        with _COMPILE_LOCK:
            compiled = env.compile(text)
    except RuntimeError as exc:
        raise _compile_failure(str(exc), known) from None
    return Program(compiled)


def _compile_failure(message: str, names: frozenset[str]) -> CompileFailure:
    if "recursion" in message:
        # cel-cpp refuses more than 32 nested or chained operations.
        return CompileFailure(
            "it nests (or chains operators) more than 32 deep", 0, 0, too_complex=True
        )
    located = _LOCATED.search(message)
    if located is None:
        return CompileFailure(_clean(message), 0, 0)
    line, column, text = max(int(located[1]), 0), max(int(located[2]), 0), located[3].strip()
    unknown = re.match(r"undeclared reference to '([^'.]*)", text)
    if unknown:
        # cel-cpp names the whole dotted chain; its first part is the unknown name.
        name = unknown[1]
        close = difflib.get_close_matches(name, names, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"the context has: {_names(names)}"
        return CompileFailure(f"unknown name '{name}' ({hint})", line, column, unknown=name)
    return CompileFailure(_describe(text), line, column)


def _names(names: frozenset[str]) -> str:
    return ", ".join(sorted(names))


def _describe(text: str) -> str:
    """The engine's compile message, in words a workflow author can act on."""
    text = text.replace("'<EOF>'", "end of the expression")
    syntax = text.removeprefix("Syntax error: ")
    if syntax != text:
        syntax = re.sub(r"\s*expecting (\{.*\}|'.*')$", "", syntax)
        for pattern, words in (
            (r"missing (.*) at end of the expression", r"missing \1 at the end"),
            (r"mismatched input (.*)", r"unexpected \1"),
            (r"extraneous input (.*)", r"unexpected \1"),
            (r"no viable alternative at input (.*)", r"cannot parse \1"),
            (r"token recognition error at: '(.).*'", r"unexpected character '\1'"),
        ):
            syntax = re.sub(f"^{pattern}$", words, syntax)
        return f"syntax error: {syntax}"
    overload = re.match(r"found no matching overload for '([^']*)' applied to '(.*)'$", text)
    if overload:
        operator = _OPERATORS.get(overload[1], overload[1])
        words = f"'{operator}' cannot be applied to {overload[2]}"
        if "int" in overload[2] and "double" in overload[2]:
            # Literals are typed statically; only context values compare across int and double.
            words += "; write both as int or both as double, or convert with double()"
        return words
    return text


def _eval_failure(message: str) -> EvalFailure:
    detail = _clean(message)
    missing = re.match(r'Key not found in map : "?(.*?)"?$', detail)
    if missing:
        return EvalFailure("missing_key", detail, missing[1])
    absent = re.match(r'No value with name "(.*)" found in Activation', detail)
    if absent:
        return EvalFailure("unknown_name", detail, absent[1])
    if detail.startswith("Applying SELECT to non-message type"):
        return EvalFailure("no_field", detail)
    if detail.startswith("Iteration budget exceeded"):
        return EvalFailure(
            "budget",
            f"comprehensions ran past {ITERATION_BUDGET:,} iterations in one evaluation",
        )
    overload = re.match(r"No matching overloads found : ([^(]*)(\(.*\))?", detail)
    if overload:
        operator = _OPERATORS.get(overload[1], overload[1])
        types = (overload[2] or "").replace("int64", "int").replace("uint64", "uint")
        if not types:
            return EvalFailure("other", f"wrong type for '{operator}'")
        return EvalFailure("other", f"wrong type: '{operator}' cannot be applied to {types}")
    return EvalFailure("other", detail)


def _length_error(message: str) -> str:
    """cel-cpp's ``lists.range`` reserves its list before checking the count it was given."""
    if "reserve" in message:
        return "lists.range(n) needs n >= 0: a negative count was given"
    return _clean(message)


def _clean(message: str) -> str:
    """The first line of an engine message without its status code decorations."""
    first = message.strip().splitlines()[0] if message.strip() else "unknown engine error"
    return _STATUS.sub("", first).strip()
