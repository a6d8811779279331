"""Compiling a workflow expression: CEL, or the marker of a Python predicate.

Every expression of a document goes through `compile_expression`, which caches
what it compiles. CEL text goes to ``_cel``; a marker that ``cadenza.build``
wrote for a Python callable (``@python:...``) becomes that callable
(``_python``), behind the same `Expression` interface.
"""

from __future__ import annotations

import functools

from ._cel import CONTEXT_NAMES, Expression, compile_cel
from ._python import is_python, python_expression

__all__ = ["compile_expression"]


def compile_expression(
    source: str,
    *,
    step_ids: frozenset[str] = frozenset(),
    names: frozenset[str] = CONTEXT_NAMES,
) -> Expression:
    """Compile CEL ``source`` once; later calls with the same arguments return the same object.

    Args:
        source: The expression text.
        step_ids: Step ids in scope; ``steps.list-services`` is read as
            ``steps['list-services']`` when ``list-services`` is one of them
            (longest id first; never inside string literals).
        names: The context names the expression may use.

    A Python predicate's marker (``@python:...``, written by ``cadenza.build``)
    gives an expression that calls the registered function instead.

    Raises:
        ExpressionTooComplex: Longer than 4,096 characters, brackets nested
            deeper than 32, comprehension macros deeper than 3, or a ``matches``
            pattern computed in a way whose cost cannot be bounded.
        ExpressionSyntaxError: A syntax error, an unknown name, or operands
            whose types can never fit; ``column`` points at the problem.
        PredicateNotRegistered: A marker whose function this process does not have.
    """
    return _compile(source, step_ids, names)


@functools.lru_cache(maxsize=4096)
def _compile(source: str, step_ids: frozenset[str], names: frozenset[str]) -> Expression:
    if is_python(source):
        return python_expression(source)
    return compile_cel(source, step_ids, names)
