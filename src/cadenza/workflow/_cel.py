"""CEL expressions: compiled once when a workflow loads, evaluated with plain Python values.

    expression = compile_expression("steps.test.result.exitCode == 0", step_ids=ids)
    if expression.evaluate_bool(activation, what="condition"):
        ...

:func:`compile_expression` memoizes, so the runtime may call it again with the
same text and get the compiled expression back for free. Compilation applies
the caps of ``_cel_lexer``, rewrites hyphenated step ids written as fields
(``steps.list-services.result`` becomes ``steps.`list-services`.result``), and
type-checks against the context names of SPEC section 4, so a misspelt name
fails at load rather than mid-run.

An expression that is only a path into the context (``inputs.topic``,
``steps['list-services'].result``: most template placeholders) is looked up in
Python and returns a copy of the value as the caller built it, keys in their
order. Anything else goes to the engine, which is handed only the parts of the
context the expression can reach (``steps.test.result.exitCode`` needs ``steps["test"]["result"]
["exitCode"]``, not the other forty steps), which keeps its cost independent of
the size of the run's state. Failures become :class:`ExpressionEvaluationError`
messages that quote the expression and name the missing key, with the keys that
do exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from cadenza.errors import (
    ExpressionError,
    ExpressionEvaluationError,
    ExpressionSyntaxError,
    ExpressionTooComplex,
)

from ._cel_ast import decode_checked
from ._cel_cost import (
    PATTERN_LIMIT,
    SEARCH_WEIGHT,
    WORK_LIMIT,
    CostBound,
    PatternTooLong,
    TooCostly,
    bound_of,
)
from ._cel_cpp import CompileFailure, EvalFailure, Program, compile_program
from ._cel_lexer import (
    TextError,
    Token,
    check_length,
    check_nesting,
    original_position,
    rewrite_step_ids,
    tokenize,
)
from ._cel_paths import Path, Plan, access_paths, is_one_path, plan_of

__all__ = [
    "CONTEXT_NAMES",
    "Expression",
    "ExpressionError",
    "ExpressionEvaluationError",
    "ExpressionSyntaxError",
    "ExpressionTooComplex",
    "compile_cel",
    "preview",
    "quote",
    "type_name",
]

CONTEXT_NAMES = frozenset(
    {
        "inputs",
        "steps",
        "iteration",
        "item",
        "index",
        "content",
        "result",
        "status",
        "state",
        "step",
        "visits",
    }
)
"""The names an expression may use (SPEC section 4); which are set depends on where it runs."""

_MISSING = object()


class Expression:
    """A compiled CEL expression: immutable, reusable, and safe to evaluate from any thread.

    Build one with :func:`compile_expression`.

    Attributes:
        source: The expression as the user wrote it.
        is_async: False: CEL evaluates synchronously. True only for a Python
            predicate whose function is ``async def`` (``_python.py``): a call site
            that sees it awaits `evaluate_async`/`evaluate_bool_async` instead, so
            CEL keeps its plain synchronous path.
    """

    __slots__ = ("_cost", "_path", "_paths", "_plan", "_program", "source")
    is_async: ClassVar[bool] = False

    def __init__(
        self,
        source: str,
        program: Program,
        paths: list[Path],
        plan: Plan,
        *,
        is_path: bool,
        cost: CostBound | None = None,
    ) -> None:
        self.source = source
        self._program = program
        self._cost = cost
        self._paths = tuple(paths)
        self._plan = _freeze(plan)
        # When the whole expression is one constant path, this is it.
        self._path = paths[0] if is_path else None

    def __repr__(self) -> str:
        return f"Expression({self.source!r})"

    @property
    def paths(self) -> tuple[Path, ...]:
        """Every use of a context name with the constant keys right after it (``_cel_paths``)."""
        return self._paths

    def checked_tree(self) -> bytes:
        """The engine's checked tree of the expression, for `_cel_ast` (load-time checks)."""
        return self._program.checked_tree()

    def evaluate(self, activation: Mapping[str, object]) -> object:
        """The expression's value over ``activation``, as plain Python.

        Args:
            activation: Context names to plain values (dict, list, str, int,
                float, bool, None).

        Returns:
            Plain Python: CEL maps and lists become dicts and lists; timestamps
            and durations become ``datetime`` and ``timedelta``; bytes, ``bytes``.

        Raises:
            ExpressionEvaluationError: A missing name or key, a wrong type, or
                too much work; the message quotes the expression.
        """
        if self._path is not None:
            value = self._lookup(activation, self._path)
            if value is not _MISSING:
                return _copy(value)
        return self._run(activation)

    def evaluate_bool(self, activation: Mapping[str, object], *, what: str = "condition") -> bool:
        """Evaluate an expression that must yield true or false.

        Args:
            activation: As for :meth:`evaluate`.
            what: The role of the expression for the error message
                (``condition``, ``until``, ``edge condition``...).

        Raises:
            ExpressionEvaluationError: As :meth:`evaluate`, and when the value is
                not a bool (the message names the type it was).
        """
        value = _MISSING if self._path is None else self._lookup(activation, self._path)
        if value is _MISSING:
            value = self._run(activation)
        if value is True or value is False:  # the hot path: no call
            return value
        return self._bool(value, what)

    def _bool(self, value: object, what: str) -> bool:
        """``value`` if it is a bool, else the error that names what it was."""
        if value is True or value is False:
            return value
        raise ExpressionEvaluationError(
            f"{quote(self.source)}: the {what} must be true or false,"
            f" but it gave {type_name(value)} {preview(value)}",
            source=self.source,
        )

    async def evaluate_async(self, activation: Mapping[str, object]) -> object:
        """`evaluate`, awaitable: the one call that serves CEL and async Python alike."""
        return self.evaluate(activation)

    async def evaluate_bool_async(
        self, activation: Mapping[str, object], *, what: str = "condition"
    ) -> bool:
        """`evaluate_bool`, awaitable: the one call that serves CEL and async Python alike."""
        return self.evaluate_bool(activation, what=what)

    def _run(self, activation: Mapping[str, object]) -> object:
        """The engine's value over what ``activation`` holds for it, within the cost bound."""
        data = self._select(activation)
        if self._cost is not None:
            self._check_cost(self._cost, data)
        try:
            return self._program.run(data)
        except EvalFailure as failure:
            raise self._explain(failure, activation) from None

    def _check_cost(self, cost: CostBound, data: dict[str, object]) -> None:
        """Refuse, before the engine starts, an evaluation that could take too long.

        The engine holds the GIL until it returns and cannot be interrupted, so
        a worker thread would not free the event loop: the only bound is not to
        start (docs/hardening.md, "Bounds").
        """
        try:
            work = cost.estimate(data)
        except PatternTooLong as long:
            raise ExpressionEvaluationError(
                f"{quote(self.source)}: refused before evaluating: the regular expression from"
                f" {long.where} is {long.length:,} characters, over the limit of"
                f" {PATTERN_LIMIT:,} for a pattern that is not written in the workflow",
                source=self.source,
            ) from None
        if work > WORK_LIMIT:
            raise ExpressionEvaluationError(
                f"{quote(self.source)}: refused before evaluating: on these values it could"
                f" take {_about(work)} units of work, over the limit of"
                f" {_units(WORK_LIMIT)} per evaluation (a unit is about a byte built or scanned;"
                f" a search counts text x needle / {1 / SEARCH_WEIGHT:.0f}, a regular"
                " expression from data its program x text)",
                source=self.source,
            )

    @staticmethod
    def _lookup(activation: Mapping[str, object], path: Path) -> object:
        """The value at ``path``, or _MISSING for the engine to explain why not."""
        value = activation.get(path[0], _MISSING)
        for key in path[1]:
            if not isinstance(value, dict) or key not in value:
                return _MISSING
            value = value[key]
        return value

    def _select(self, activation: Mapping[str, object]) -> dict[str, object]:
        """The part of ``activation`` this expression can reach."""
        data: dict[str, object] = {}
        for name, node in self._plan:
            value = activation.get(name, _MISSING)
            if value is not _MISSING:
                data[name] = value if node is None else _project(value, node)
        return data

    def _explain(
        self, failure: EvalFailure, activation: Mapping[str, object]
    ) -> ExpressionEvaluationError:
        name = failure.name
        if failure.kind in ("missing_key", "no_field"):
            found = self._diagnose(failure, activation)
            if found is not None:
                message, name = found
            elif failure.kind == "missing_key":
                message = f"no such key '{name}'"
            else:
                message = "a field was selected on a value that is not a map"
        elif failure.kind == "unknown_name":
            message = f"'{name}' is not available here (the context has: {_keys(activation)})"
        else:
            message = failure.detail
        return ExpressionEvaluationError(
            f"{quote(self.source)}: {message}", source=self.source, name=name
        )

    def _diagnose(
        self, failure: EvalFailure, activation: Mapping[str, object]
    ) -> tuple[str, str] | None:
        """Walk the expression's constant paths to the key or field that is not there."""
        for root, keys in self._paths:
            value = activation.get(root, _MISSING)
            shown = root
            for key in keys:
                if isinstance(value, dict):
                    if key not in value:
                        if failure.kind == "missing_key" and failure.name in (None, key):
                            return f"no such key '{key}' in {shown} (it has: {_keys(value)})", key
                        break
                    value = value[key]
                    shown += f".{key}" if key.isidentifier() else f"[{key!r}]"
                else:
                    if failure.kind == "no_field" and value is not _MISSING:
                        return f"{shown} is {type_name(value)}, so it has no field '{key}'", key
                    break
        return None


def _copy(value: object) -> object:
    """A copy of a plain value's containers, so callers never share the context's."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


_Frozen = tuple[tuple[str, "_Frozen | None"], ...]


def _freeze(plan: Plan) -> _Frozen:
    """A plan as nested tuples: cheaper to walk on every evaluation than dicts."""
    return tuple((key, None if child is None else _freeze(child)) for key, child in plan.items())


def _project(value: object, node: _Frozen) -> object:
    """``value`` cut down to the keys in ``node``; non-dicts pass whole (the engine judges)."""
    if not isinstance(value, dict):
        return value
    out = {}
    for key, child in node:
        if key in value:
            item = value[key]
            out[key] = item if child is None else _project(item, child)
    return out


def compile_cel(source: str, step_ids: frozenset[str], names: frozenset[str]) -> Expression:
    """Compiles CEL ``source`` (see `compile_expression`, which caches this)."""
    try:
        check_length(source)
        tokens = tokenize(source)
        check_nesting(tokens)
    except TextError as exc:
        kind = ExpressionTooComplex if exc.too_complex else ExpressionSyntaxError
        raise kind(exc.message, source=source, column=exc.position + 1) from None
    if not tokens:
        raise ExpressionSyntaxError("the expression is empty", source=source, column=1)
    text, edits = rewrite_step_ids(source, tokens, step_ids)
    if edits:
        tokens = tokenize(text)
    try:
        program = compile_program(text, names)
    except CompileFailure as failure:
        position = _position(text, failure.line, failure.column)
        if failure.unknown is not None:
            position = _name_position(tokens, failure.unknown, position)
        kind = ExpressionTooComplex if failure.too_complex else ExpressionSyntaxError
        column = original_position(position, edits) + 1
        raise kind(failure.description, source=source, column=column) from None
    try:
        cost = bound_of(decode_checked(program.checked_tree()))
    except TooCostly as exc:
        raise ExpressionTooComplex(str(exc), source=source, column=1) from None
    fixed = cost.fixed if cost is not None else None
    if fixed is not None and fixed > WORK_LIMIT:  # literals only: refused on any values
        raise ExpressionTooComplex(
            f"it would take {_about(fixed)} units of work on any values, over the"
            f" limit of {_units(WORK_LIMIT)} per evaluation",
            source=source,
            column=1,
        )
    paths = access_paths(tokens, names)
    is_path = is_one_path(tokens, names)
    return Expression(source, program, paths, plan_of(paths), is_path=is_path, cost=cost)


def _about(amount: float) -> str:
    """``about 1.2 Gi`` (or ``more than 1e18``) units."""
    units = _units(amount)
    return units if units.startswith("more") else f"about {units}"


def _units(amount: float) -> str:
    """``amount`` units for a person: 1.2 Gi, 64 Mi, 300 Ki."""
    for size, suffix in ((2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki")):
        if amount >= size:
            return f"{amount / size:.3g} {suffix}" if amount < 1e18 else "more than 1e18"
    return f"{amount:.0f}"


def _name_position(tokens: list[Token], name: str, near: int) -> int:
    """Where the unknown ``name`` starts: cel-cpp points at the end of its dotted chain."""
    starts = [t.start for t in tokens if t.text == name and t.start <= near]
    return starts[-1] if starts else near


def _position(text: str, line: int, column: int) -> int:
    """The 0-based position of an engine's 1-based line and column (0 when unknown)."""
    if line < 1 or column < 1:
        return 0
    start = 0
    for _ in range(line - 1):
        start = text.find("\n", start) + 1
    return min(start + column - 1, len(text))


def quote(source: str, limit: int = 100) -> str:
    """``source`` quoted for a message, shortened past ``limit`` characters."""
    text = " ".join(source.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def type_name(value: object) -> str:
    """The CEL name of a plain value's type: null, bool, int, double, string, list, map."""
    names = {bool: "bool", int: "int", float: "double", str: "string", bytes: "bytes"}
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "list"
    return names.get(type(value), type(value).__name__)


def preview(value: object, limit: int = 60) -> str:
    """A short rendering of ``value`` for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _keys(mapping: Mapping[str, object], limit: int = 12) -> str:
    keys = sorted(str(k) for k in mapping)
    if not keys:
        return "nothing"
    shown = ", ".join(keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")
