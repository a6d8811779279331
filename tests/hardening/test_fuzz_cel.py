"""Random and hostile CEL: each expression is refused or evaluated in bounded time.

Expressions come from a small CEL grammar (names, literals, operators, the five
macros, nested as deep as hypothesis likes) and from raw text. Compiling must
raise `ExpressionSyntaxError` (or its `ExpressionTooComplex`) or succeed;
evaluating must return plain data or raise `ExpressionEvaluationError`; nothing
else, never a hang, and the process recursion limit never moves. The hostile set
is the CEL specification's own warning: macros nested inside macros, whose cost is
the product of the list sizes.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cadenza.errors import ExpressionEvaluationError, ExpressionSyntaxError, ExpressionTooComplex
from cadenza.workflow import compile_expression

from .conftest import CPU_LIMIT, FUZZ
from .hostile_cel import HOSTILE, HUNDRED

STEP_IDS = frozenset({"build", "list-services", "a"})


def context(items: list[Any]) -> dict[str, Any]:
    return {
        "inputs": {
            "topic": "loops",
            "n": 3,
            "huge": 10**12,
            "list": items,
            "config": {"a": {"b": [1, 2]}},
        },
        "steps": {
            "build": {"content": "APPROVED", "result": {"exitCode": 0}, "status": "completed"},
            "list-services": {"content": "", "result": None, "status": "failed"},
        },
        "iteration": 2,
        "item": items[0] if items else None,
        "index": 0,
        "content": "x" * 1000,
        "result": {"score": 0.5},
        "status": "completed",
        "state": "a",
        "step": 1,
        "visits": {"a": 1},
    }


def exercise(source: str, items: list[Any]) -> None:
    """Compile and evaluate ``source``: only the documented errors, within the CPU bound."""
    limit = sys.getrecursionlimit()
    started = time.process_time()
    refused: ExpressionSyntaxError | None = None
    failed: ExpressionEvaluationError | None = None
    try:
        expression = compile_expression(source, step_ids=STEP_IDS)
    except ExpressionSyntaxError as error:
        refused = error
    else:
        try:
            value = expression.evaluate(context(items))
        except ExpressionEvaluationError as error:
            failed = error
        else:
            json.dumps(value, default=str)  # plain data (timestamps and durations as objects)
    if refused is not None:
        assert 1 <= refused.column <= max(len(source), 1) + 1, (source, refused.column)
        assert refused.message
    if failed is not None:
        assert source in failed.message or failed.source == source
    spent = time.process_time() - started
    assert spent < CPU_LIMIT, f"{spent:.2f}s of CPU for {source!r}"
    assert sys.getrecursionlimit() == limit


NAMES = st.sampled_from(
    [
        "inputs",
        "inputs.topic",
        "inputs.n",
        "inputs.huge",
        "inputs.list",
        "inputs.config.a.b",
        "inputs.missing",
        "steps.build.content",
        "steps.build.result.exitCode",
        "steps.list-services.status",
        "steps['list-services'].result",
        "steps.nope.content",
        "iteration",
        "item",
        "index",
        "content",
        "result.score",
        "status",
        "visits.a",
        "x",
        "y",
    ]
)
LITERALS = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(max_size=12).map(lambda s: json.dumps(s)),
    st.sampled_from(["true", "false", "null", "[]", "{}", "[1, 2, 3]", "{'k': 1}", "b'ab'"]),
    st.sampled_from(["1u", "0x1F", "-0", "1e308", "9223372036854775808", "duration('1s')"]),
)
OPERATORS = st.sampled_from(
    ["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "in"]
)
MACROS = st.sampled_from(["all", "exists", "exists_one", "map", "filter", "sortBy"])
FUNCTIONS = st.sampled_from(
    [
        "size", "int", "uint", "double", "string", "bool", "type", "has", "bytes", "dyn",
        "lists.range", "math.greatest", "math.least", "math.abs", "math.sqrt", "math.ceil",
    ]
)  # fmt: skip
METHODS = st.sampled_from(["contains", "startsWith", "endsWith", "matches", "size", "flatten"])
NULLARY = st.sampled_from(["sort", "distinct", "reverse", "flatten"])


def expressions() -> st.SearchStrategy[str]:
    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, OPERATORS, inner).map(lambda t: f"{t[0]} {t[1]} {t[2]}"),
            inner.map(lambda e: f"({e})"),
            inner.map(lambda e: f"!{e}"),
            inner.map(lambda e: f"-{e}"),
            st.tuples(inner, inner, inner).map(lambda t: f"{t[0]} ? {t[1]} : {t[2]}"),
            st.tuples(FUNCTIONS, inner).map(lambda t: f"{t[0]}({t[1]})"),
            st.tuples(inner, METHODS, inner).map(lambda t: f"{t[0]}.{t[1]}({t[2]})"),
            st.tuples(inner, NULLARY).map(lambda t: f"{t[0]}.{t[1]}()"),
            st.tuples(inner, MACROS, inner).map(lambda t: f"{t[0]}.{t[1]}(x, {t[2]})"),
            st.lists(inner, max_size=3).map(lambda xs: f"[{', '.join(xs)}]"),
            st.tuples(inner, inner).map(lambda t: f"{t[0]}[{t[1]}]"),
            st.tuples(inner, inner).map(lambda t: f"{{{t[0]}: {t[1]}}}"),
        )

    return st.recursive(st.one_of(NAMES, LITERALS), extend, max_leaves=20)


ITEMS = st.lists(
    st.one_of(st.integers(-5, 5), st.text(max_size=3), st.booleans(), st.none()), max_size=100
)


@FUZZ
@given(source=expressions(), items=ITEMS)
def test_grammar_expressions_are_refused_or_evaluated(source: str, items: list[Any]) -> None:
    """Grammar-built CEL over real-looking state: a value or a documented error."""
    exercise(source, items)


@FUZZ
@given(source=st.text(max_size=200), items=ITEMS)
def test_random_text_is_refused_or_evaluated(source: str, items: list[Any]) -> None:
    """Arbitrary text (unicode, control characters, stray quotes) never crashes the engine."""
    exercise(source, items)


@pytest.mark.parametrize("source", HOSTILE)
def test_hostile_expressions_are_bounded(source: str) -> None:
    """Exponential macros, regex bombs, overflow and giant literals: bounded, never a hang."""
    exercise(source, list(range(100)))


def test_nested_macros_past_the_cap_are_refused_at_compile() -> None:
    """Four macros deep is refused when the workflow loads, naming the cap."""
    source = f"{HUNDRED}.map(a, {HUNDRED}.map(b, {HUNDRED}.map(c, {HUNDRED}.map(d, d))))"
    with pytest.raises(ExpressionTooComplex):
        compile_expression(source)


def test_the_iteration_budget_stops_a_cubic_evaluation() -> None:
    """One million comprehension steps are refused as too much work, not run: over
    literals only, the work is known when the expression compiles, so it never loads."""
    source = f"{HUNDRED}.map(a, {HUNDRED}.map(b, {HUNDRED}.map(c, a + b + c)))"
    started = time.process_time()
    with pytest.raises(ExpressionTooComplex, match="on any values, over the limit of 32 Mi"):
        compile_expression(source)
    assert time.process_time() - started < CPU_LIMIT
