"""cel-cpp's math and lists extensions: in every expression, and charged by the cost bound.

``lists.range(n)`` builds a list of n numbers from one small value, so the size of
what an expression reads no longer bounds what it builds: the bound reads n itself.
"""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

import pytest

from cadenza.errors import ExpressionEvaluationError, ExpressionTooComplex
from cadenza.workflow import compile_expression, load_workflow_text


def evaluate(source: str, **names: Any) -> object:
    return compile_expression(source).evaluate(names)


@pytest.mark.parametrize(
    ("source", "want"),
    [
        ("math.greatest(1, 5, 3)", 5),
        ("math.least(inputs.xs)", -2),
        ("math.greatest(inputs.xs)", 7),
        ("math.greatest(2.5, 1)", 2.5),
        ("math.abs(-3)", 3),
        ("math.ceil(1.2)", 2.0),
        ("lists.range(4)", [0, 1, 2, 3]),
        ("lists.range(inputs.n).map(i, i * 10)", [0, 10, 20]),
        ("size(lists.range(size(inputs.xs)))", 3),
        ("lists.range(0)", []),
        ("inputs.xs.sort()", [-2, 4, 7]),
        ("[3, 1, 3, 2].distinct()", [3, 1, 2]),
        ("[[1], [2, 3]].flatten()", [1, 2, 3]),
        ("[1, 2, 3, 4].slice(1, 3)", [2, 3]),
        ("[1, 2, 3].reverse()", [3, 2, 1]),
        ("['bb', 'a', 'ccc'].sortBy(w, size(w))", ["a", "bb", "ccc"]),
    ],
)
def test_math_and_lists_functions(source: str, want: object) -> None:
    got = evaluate(source, inputs={"xs": [4, -2, 7], "n": 3})
    assert got == want, f"{source!r} gave {got!r}"


def test_a_range_as_long_as_the_data_says_is_refused_before_it_is_built() -> None:
    """lists.range(inputs.n) with n = 10**9 would reserve 16 GB: refused before the engine runs,
    and the process does not grow."""
    expression = compile_expression("size(lists.range(inputs.n)) > 0")
    assert expression.evaluate({"inputs": {"n": 1_000}}) is True
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ExpressionEvaluationError) as raised:
        expression.evaluate({"inputs": {"n": 1_000_000_000}})
    assert "refused before evaluating" in str(raised.value)
    assert "over the limit of 32 Mi per evaluation" in str(raised.value)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < 64 * 1024  # KiB


@pytest.mark.parametrize(
    "source",
    [
        "size(lists.range(inputs.n + inputs.n)) > 0",
        "size(lists.range(inputs.n * 2)) > 0",
        "size(lists.range(2 - inputs.neg)) > 0",  # minus a negative number is a sum
        "size(lists.range(-inputs.neg)) > 0",
        "size(lists.range(inputs.flag ? inputs.n : 1)) > 0",
        "size(lists.range(inputs.n).map(i, i)) > 0",
    ],
)
def test_every_way_of_computing_a_range_length_from_data_is_charged(source: str) -> None:
    activation = {"inputs": {"n": 600_000_000, "neg": -900_000_000, "flag": True}}
    with pytest.raises(ExpressionEvaluationError) as raised:
        compile_expression(source).evaluate(activation)
    assert "over the limit of 32 Mi per evaluation" in str(raised.value)


def test_a_range_length_that_cannot_be_bounded_is_refused_at_load() -> None:
    """A length computed from a comprehension's variable or a conversion has no bound."""
    for source in (
        "inputs.xs.map(x, size(lists.range(x)))",
        "size(lists.range(int(inputs.text))) > 0",
    ):
        with pytest.raises(ExpressionTooComplex) as raised:
            compile_expression(source)
        assert "lists.range" in str(raised.value)


def test_a_literal_range_over_the_limit_is_refused_when_the_workflow_loads(
    tmp_path: Path,
) -> None:
    text = (
        "name: r\nsteps:\n  - id: a\n    command: echo\n"
        "    condition: size(lists.range(100000000)) > 0\n"
    )
    with pytest.raises(Exception) as raised:
        load_workflow_text(text, filename="r.yaml", base_dir=tmp_path)
    message = str(raised.value)
    assert message.startswith("r.yaml:5:"), message
    assert "32 Mi" in message


def test_a_negative_range_is_an_evaluation_error_not_a_crash() -> None:
    with pytest.raises(ExpressionEvaluationError) as raised:
        evaluate("lists.range(inputs.n)", inputs={"n": -1})
    assert "lists.range" in str(raised.value)
    assert "-1" in str(raised.value) or "negative" in str(raised.value)


@pytest.mark.parametrize(
    "source",
    [
        "size(inputs.items.sort()) > 0",
        "size(inputs.items.distinct()) > 0",
        "size(inputs.items.sortBy(i, -i)) > 0",
    ],
)
def test_sorting_large_lists_is_charged(source: str) -> None:
    """Each sorts a copy of its input (4 units a unit, measured): a huge input is refused.

    (``flatten``, ``slice`` and ``reverse`` copy once, linear in what the run already
    holds, like ``lowerAscii``: charged as copies, never refused on their own.)
    """
    expression = compile_expression(source)
    assert expression.evaluate({"inputs": {"items": list(range(100))}}) is True
    huge = {"inputs": {"items": list(range(1_000_000))}}
    with pytest.raises(ExpressionEvaluationError) as raised:
        expression.evaluate(huge)
    assert "over the limit of 32 Mi per evaluation" in str(raised.value)


def test_math_functions_on_scalars_are_not_measured() -> None:
    """math.greatest over numbers builds nothing: no measurement before each evaluation."""
    expression = compile_expression("math.greatest(iteration, 3) < 10")
    assert expression._cost is None
