"""Python predicates: callables standing where a workflow has a CEL expression.

A workflow built in Python (``cadenza.build``) may give ``until``, ``condition``,
edge conditions, ``forEach`` and ``output`` as Python callables. The document
stays data: the callable is registered here, for the life of the process, and
the field holds a marker, ``@python:module:qualname`` (``#2``, ``#3``... for
another function of the same name). ``@`` starts no CEL expression, so a marker
is never mistaken for one. Markers are deterministic: the same code building
the same workflow registers the same markers, so a run stored with its document
can be resumed in a new process once the workflow has been built there again.

`compile_expression` hands back a `PythonExpression` for a marker, with the
interface of a CEL `Expression`. An ``async def`` callable gives an
`AsyncPythonExpression`, whose ``is_async`` tells a call site to await
``evaluate_async``/``evaluate_bool_async``; CEL expressions never take that path.
The callable gets one argument, built from what a CEL expression would see
there (the activation) by the adapter it was registered with.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import msgspec

from cadenza.errors import ExpressionEvaluationError, PredicateNotRegistered

from ._cel import Expression, quote, type_name

__all__ = [
    "PREFIX",
    "Adapter",
    "AsyncPythonExpression",
    "PythonExpression",
    "is_python",
    "is_registered",
    "not_registered",
    "python_expression",
    "register_python",
]

PREFIX = "@python:"
"""How a marker starts; no CEL expression can."""

Adapter = Callable[[Mapping[str, Any]], Any]
"""Turns the names a CEL expression would see into the callable's one argument."""


@dataclass(frozen=True, slots=True)
class _Entry:
    function: Callable[[Any], Any]
    adapter: Adapter
    is_async: bool


_lock = threading.Lock()  # builders may run in several threads of a service
_entries: dict[str, _Entry] = {}
# (id(function), id(adapter)) -> marker: one marker per function. The entries hold
# both objects, so their ids cannot be reused while the key exists.
_markers: dict[tuple[int, int], str] = {}


def register_python(function: Callable[[Any], Any], adapter: Adapter) -> str:
    """The marker that stands for ``function`` in a document (registering it once).

    The same function (with the same adapter) always gets the same marker.
    """
    key = (id(function), id(adapter))
    with _lock:
        marker = _markers.get(key)
        if marker is not None:
            return marker
        base = PREFIX + _name_of(function)
        marker, n = base, 1
        while marker in _entries:
            n += 1
            marker = f"{base}#{n}"
        _entries[marker] = _Entry(function, adapter, _is_async(function))
        _markers[key] = marker
        return marker


def _name_of(function: Callable[[Any], Any]) -> str:
    module = getattr(function, "__module__", None) or "?"
    name = getattr(function, "__qualname__", None) or type(function).__qualname__
    return f"{module}:{name}"


def _is_async(function: Callable[[Any], Any]) -> bool:
    # A callable object's coroutine-ness is its class's __call__'s.
    call = type(function).__call__
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call)


def is_python(source: str) -> bool:
    """True when ``source`` is a Python predicate's marker rather than CEL."""
    return source.startswith(PREFIX)


def is_registered(source: str) -> bool:
    """True when this process has the function the marker ``source`` stands for."""
    return source in _entries


def not_registered(source: str) -> str:
    """Why a marker cannot be used here, and what to do about it."""
    return (
        f"{source!r} names a Python function that is not registered in this process: "
        "a workflow with Python predicates runs in the process that built it. Build the "
        "workflow again in this process (the same code registers the same markers), then "
        "run or resume it"
    )


def python_expression(source: str) -> PythonExpression:
    """The expression that calls the function ``source`` marks.

    Raises:
        PredicateNotRegistered: No function is registered under that marker here.
    """
    entry = _entries.get(source)
    if entry is None:
        raise PredicateNotRegistered(not_registered(source), source=source)
    kind = AsyncPythonExpression if entry.is_async else PythonExpression
    return kind(source, entry)


class PythonExpression(Expression):
    """A Python callable behind the interface of a compiled CEL `Expression`.

    Its function is a plain one: it runs on the event loop when evaluated, like
    CEL, so it should be quick. A raised exception becomes an
    `ExpressionEvaluationError` quoting the marker, as a failing CEL expression's
    does; a value that is not the bool a condition needs is refused the same way.
    """

    __slots__ = ("_entry",)

    def __init__(self, source: str, entry: _Entry) -> None:  # no CEL program to hold
        self.source = source
        self._entry = entry

    def __repr__(self) -> str:
        return f"PythonExpression({self.source!r})"

    def evaluate(self, activation: Mapping[str, object]) -> object:
        """The function's value over ``activation``, as plain data (dicts, lists...).

        Raises:
            ExpressionEvaluationError: The function raised, or returned what is
                not JSON-like data.
        """
        return self._plain(self._call(activation, "expression"))

    def evaluate_bool(self, activation: Mapping[str, object], *, what: str = "condition") -> bool:
        """The function's value, which must be True or False.

        Raises:
            ExpressionEvaluationError: The function raised, or gave something else.
        """
        return self._bool(self._call(activation, what), what)

    def _call(self, activation: Mapping[str, object], what: str) -> Any:
        entry = self._entry
        try:
            value = entry.function(entry.adapter(activation))
        except Exception as error:
            raise self._raised(error) from error
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()  # never awaited: say so here rather than in a warning
            raise ExpressionEvaluationError(
                f"{quote(self.source)}: the {what} returned an awaitable; "
                "declare the function with 'async def' so that it is awaited",
                source=self.source,
            )
        return value

    def _raised(self, error: Exception) -> ExpressionEvaluationError:
        return ExpressionEvaluationError(
            f"{quote(self.source)}: {type(error).__name__}: {error}", source=self.source
        )

    def _plain(self, value: object) -> object:
        try:
            return msgspec.to_builtins(value)
        except (TypeError, ValueError) as error:
            raise ExpressionEvaluationError(
                f"{quote(self.source)}: it gave {type_name(value)}, which is not plain data"
                f" (str, int, float, bool, None, lists and dicts of them): {error}",
                source=self.source,
            ) from error


class AsyncPythonExpression(PythonExpression):
    """A Python predicate whose function is ``async def``: call sites await it."""

    __slots__ = ()
    is_async: ClassVar[bool] = True

    def __repr__(self) -> str:
        return f"AsyncPythonExpression({self.source!r})"

    def _call(self, activation: Mapping[str, object], what: str) -> Any:
        raise ExpressionEvaluationError(
            f"{quote(self.source)}: the {what} is an async function, but it is evaluated "
            "synchronously here; give a plain function",
            source=self.source,
        )

    async def evaluate_async(self, activation: Mapping[str, object]) -> object:
        """Awaits the function over ``activation``; as `PythonExpression.evaluate`."""
        return self._plain(await self._await(activation))

    async def evaluate_bool_async(
        self, activation: Mapping[str, object], *, what: str = "condition"
    ) -> bool:
        """Awaits the function, whose value must be True or False."""
        return self._bool(await self._await(activation), what)

    async def _await(self, activation: Mapping[str, object]) -> Any:
        entry = self._entry
        try:
            return await entry.function(entry.adapter(activation))
        except Exception as error:
            raise self._raised(error) from error
