"""CEL expressions: semantics, step-id rewriting, caps, error messages, evaluation cost."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import cadenza
from cadenza.errors import (
    CadenzaError,
    ExpressionError,
    ExpressionEvaluationError,
    ExpressionSyntaxError,
    ExpressionTooComplex,
)
from cadenza.workflow import Expression, compile_expression

STEP_IDS = frozenset({"build", "test", "review", "list-services", "list"})


def context() -> dict[str, Any]:
    """A context as the runtime builds it, for every test to read."""
    return {
        "inputs": {"topic": "loops", "count": 3, "tags": ["a", "b"], "flags": {"fast": True}},
        "steps": {
            "build": {"content": "built ok", "result": None, "status": "completed"},
            "test": {
                "content": "3 passed",
                "result": {"exitCode": 0, "stdout": "ok\n"},
                "status": "completed",
            },
            "review": {"content": "LGTM", "result": {"score": 1}, "status": "completed"},
            "list-services": {
                "content": "",
                "result": {"services": ["api", "web"]},
                "status": "completed",
            },
        },
        "iteration": 3,
        "item": {"name": "api", "port": 8080},
        "index": 0,
        "content": "Status: APPROVED",
        "result": {"passed": True, "score": 0.85},
        "status": "completed",
        "state": "analyze",
        "step": 3,
        "visits": {"analyze": 2},
    }


def evaluate(source: str, activation: Mapping[str, object] | None = None) -> object:
    expression = compile_expression(source, step_ids=STEP_IDS)
    return expression.evaluate(context() if activation is None else activation)


def same(got: object, want: object) -> bool:
    """Equal and of the same type all the way down (True is not 1, 3.0 is not 3)."""
    if type(got) is not type(want):
        return False
    if isinstance(want, list):
        assert isinstance(got, list)
        return len(got) == len(want) and all(map(same, got, want))
    if isinstance(want, dict):
        assert isinstance(got, dict)
        return got.keys() == want.keys() and all(same(got[k], want[k]) for k in want)
    return got == want


VALUES: list[tuple[str, object]] = [
    ("1 + 2 * 3", 7),
    ("7 / 2", 3),
    ("7 % 3", 1),
    ("7.0 / 2.0", 3.5),
    ("-inputs.count", -3),
    ("'a' + 'b'", "ab"),
    ("content.contains('APPROVED')", True),
    ("content.startsWith('Status')", True),
    ("content.endsWith('APPROVED')", True),
    ("content.matches('^Status: [A-Z]+$')", True),
    ("size(content)", 16),
    ("size('h\u00e9llo')", 5),
    ("content.lowerAscii()", "status: approved"),
    ("'a' in inputs.tags", True),
    ("'fast' in inputs.flags", True),
    ("'slow' in inputs.flags", False),
    ("has(steps.test.result.exitCode)", True),
    ("has(steps.nope)", False),
    ("{'a': 1, 'b': [1, 2]}", {"a": 1, "b": [1, 2]}),
    ("[1, 'two', 3.0, null, true]", [1, "two", 3.0, None, True]),
    ("[1, 2, 3].all(x, x > 0)", True),
    ("[1, 2, 3].exists(x, x > 2)", True),
    ("[1, 2, 3].exists_one(x, x > 1)", False),
    ("[1, 2, 3].map(x, x * 2)", [2, 4, 6]),
    ("[1, 2, 3].filter(x, x % 2 == 1)", [1, 3]),
    ("steps.all(k, steps[k].status == 'completed')", True),
    ("iteration > 2 ? 'many' : 'few'", "many"),
    ("steps.build.result == null", True),
    ("steps.test.result != null", True),
    ("steps['list-services'].result.services", ["api", "web"]),
    ("steps.test.status == 'completed' && steps.test.content.contains('passed')", True),
    ("steps.test.result.exitCode == 0", True),
    ("item.name == 'api' && item.port == 8080", True),
    ("visits.analyze < 3 && state == 'analyze' && step == 3 && index == 0", True),
    ("true || 1 / 0 == 1", True),
    ("int('42') + 1", 43),
    ("double(inputs.count) / 2.0", 1.5),
    ("string(iteration)", "3"),
    ("steps.test.result", {"exitCode": 0, "stdout": "ok\n"}),
    ("steps", context()["steps"]),
    ("duration('90m') == duration('1h30m')", True),
    ("timestamp('2024-03-01T12:00:00Z').getFullYear()", 2024),
    ("b'hi'", b"hi"),
    ("type(1)", "int"),
    ("1u", 1),
]


@pytest.mark.parametrize(("source", "want"), VALUES)
def test_evaluates_to_plain_python(source: str, want: object) -> None:
    """Each expression yields the plain Python value CEL's spec gives, with its exact type."""
    got = evaluate(source)
    assert same(got, want), f"{source!r} gave {got!r}"


@pytest.mark.parametrize(
    ("source", "want"),
    [
        ("iteration > 2.5", True),
        ("iteration < 2.5", False),
        ("steps.review.result.score >= 0.8", True),
        ("result.score > 0", True),
        ("inputs.count == 3.0", True),
        ("inputs.count in [1.0, 3.0]", True),
        ("result.score < inputs.count", True),
    ],
)
def test_compares_int_and_double_from_the_context(source: str, want: bool) -> None:
    """Context values compare across int and double as users expect."""
    assert compile_expression(source).evaluate_bool(context()) is want


def test_timestamps_and_durations_become_datetime_and_timedelta() -> None:
    """Time values come back as the standard library's types."""
    assert evaluate("timestamp('2024-01-01T00:00:00Z') + duration('1h')") == datetime.datetime(
        2024, 1, 1, 1, tzinfo=datetime.UTC
    )
    assert evaluate("duration('90s')") == datetime.timedelta(seconds=90)


def flow_steps(steps: dict[str, object], **names: object) -> dict[str, object]:
    """A context whose ``steps`` are ``steps``, plus extra top-level names."""
    return {"steps": steps, **names}


ABC = frozenset({"a", "a-b", "a-b-c"})


@pytest.mark.parametrize(
    ("source", "step_ids", "activation", "want"),
    [
        ("steps.list-services.result.services", STEP_IDS, context(), ["api", "web"]),
        ("size(steps.list-services.result.services) == 2", STEP_IDS, context(), True),
        ("steps.a-b-c.x", ABC, flow_steps({"a-b": {"x": 1}, "a-b-c": {"x": 2}}), 2),
        ("steps.a-b.x", ABC, flow_steps({"a-b": {"x": 1}, "a-b-c": {"x": 2}}), 1),
        ("steps.a-b-c.x - 1", frozenset({"a-b-c"}), flow_steps({"a-b-c": {"x": 10}}), 9),
        ("steps.a-b.x + '/steps.a-b.x'", ABC, flow_steps({"a-b": {"x": "v"}}), "v/steps.a-b.x"),
        ("steps.a - b", frozenset({"a-b"}), flow_steps({"a": 3}, b=2), 1),
        ("steps.a-bc", frozenset({"a-b"}), flow_steps({"a": 3}, bc=1), 2),
        ("has(steps.a-b) && !has(steps.a-b-c)", ABC, flow_steps({"a-b": {}}), True),
    ],
)
def test_hyphenated_step_ids_read_as_fields(
    source: str, step_ids: frozenset[str], activation: dict[str, object], want: object
) -> None:
    """``steps.a-b`` means ``steps['a-b']`` for an id in scope, longest first, never in strings."""
    names = frozenset({"steps", "b", "bc"})
    expression = compile_expression(source, step_ids=step_ids, names=names)
    assert same(expression.evaluate(activation), want)


def test_undeclared_hyphenated_id_stays_subtraction() -> None:
    """Without the id in scope, ``steps.list-services`` is the subtraction CEL says it is."""
    with pytest.raises(ExpressionSyntaxError) as caught:
        compile_expression("steps.list-services.result")
    assert caught.value.message.startswith("unknown name 'services'")
    assert caught.value.column == 12


def test_columns_point_into_the_text_as_written() -> None:
    """An error after a rewritten step id is located in the original text."""
    source = "steps.list-services.result == = 1"
    with pytest.raises(ExpressionSyntaxError) as caught:
        compile_expression(source, step_ids=STEP_IDS)
    assert source[caught.value.column - 1] == "="
    assert caught.value.column == 31


@pytest.mark.parametrize(
    ("source", "column", "message"),
    [
        ("1 +", 4, "syntax error: unexpected end of the expression"),
        ("content.contains('x'", 21, "syntax error: missing ')' at the end"),
        ("steps.test..result", 12, "syntax error: cannot parse '..'"),
        ("iteration > > 2", 13, "syntax error: unexpected '>'"),
        ("'unterminated", 1, "unterminated string literal"),
        ("content + #", 11, "syntax error: unexpected character '#'"),
        ("inptus.topic == 'x'", 1, "unknown name 'inptus' (did you mean 'inputs'?)"),
        ("x == 1", 1, "unknown name 'x' (the context has: content, index, inputs,"),
        ("content.size() > 2.5", 16, "'>' cannot be applied to (int, double); write both"),
        ("'a' + 1", 5, "'+' cannot be applied to (string, int)"),
        ("", 1, "the expression is empty"),
        ("   ", 1, "the expression is empty"),
        ("content &&\n  (1 +)", 18, "syntax error: unexpected ')'"),
    ],
)
def test_syntax_errors_say_what_and_where(source: str, column: int, message: str) -> None:
    """A compile error names the problem in words and gives its 1-based column."""
    with pytest.raises(ExpressionSyntaxError) as caught:
        compile_expression(source)
    assert caught.value.message.startswith(message), caught.value.message
    assert caught.value.column == column
    assert caught.value.source == source
    assert not isinstance(caught.value, ExpressionTooComplex)


def test_syntax_error_line_and_column_within_line() -> None:
    """For multi-line text the error also says which line and column of that line."""
    with pytest.raises(ExpressionSyntaxError) as caught:
        compile_expression("content &&\n  (1 +)")
    assert (caught.value.line, caught.value.line_column) == (2, 7)


@pytest.mark.parametrize(
    ("source", "column", "message"),
    [
        ("'" + "x" * 4095 + "'", 4097, "it is 4,097 characters long; the limit is 4,096"),
        ("(" * 33 + "1" + ")" * 33, 33, "brackets nest more than 32 deep"),
        ("[" * 33 + "]" * 33, 33, "brackets nest more than 32 deep"),
        (
            "[1].map(a, [1].map(b, [1].map(c, [1].filter(d, d > 0))))",
            38,
            "comprehension macros nest more than 3 deep (this 'filter' is inside 3 others)",
        ),
        ("+".join(["iteration"] * 40), 1, "it nests (or chains operators) more than 32 deep"),
    ],
)
def test_caps_refuse_expressions_that_are_too_complex(
    source: str, column: int, message: str
) -> None:
    """Length, nesting and macro nesting are capped at compile time, with a clear error."""
    with pytest.raises(ExpressionTooComplex) as caught:
        compile_expression(source)
    assert caught.value.message == message
    assert caught.value.column == column


def test_three_nested_macros_are_allowed() -> None:
    """The macro cap allows three levels; brackets inside a macro count only as brackets."""
    source = "[1].map(a, [2].map(b, [3].map(c, [a, b, c])))"
    assert evaluate(source) == [[[[1, 2, 3]]]]


@pytest.mark.parametrize(
    ("source", "fragments"),
    [
        (
            "steps.missing.content",
            ["'steps.missing.content'", "no such key 'missing' in steps", "build, list-services"],
        ),
        ("inputs.nokey == 1", ["'inputs.nokey == 1'", "no such key 'nokey' in inputs (it has:"]),
        (
            "steps.build.result.exitCode == 0",
            ["steps.build.result is null, so it has no field 'exitCode'"],
        ),
        (
            "steps['list-services'].result.nothing",
            ["no such key 'nothing' in steps['list-services'].result (it has: services)"],
        ),
        ("content.foo", ["content is string, so it has no field 'foo'"]),
        ("content > 1", ["wrong type: '>' cannot be applied to (string, int)"]),
        ("!content", ["wrong type for '!'"]),
        ("1 / (iteration - 3)", ["divide by zero"]),
        ("inputs.tags[5]", ["index"]),
        ("content.matches('[')", ["invalid regular expression"]),
    ],
)
def test_evaluation_errors_name_the_expression_and_the_problem(
    source: str, fragments: list[str]
) -> None:
    """A runtime failure quotes the expression and names the missing key or wrong type."""
    with pytest.raises(ExpressionEvaluationError) as caught:
        evaluate(source)
    for fragment in fragments:
        assert fragment in caught.value.message, caught.value.message
    assert caught.value.source == source
    assert str(caught.value) == caught.value.message


def test_missing_key_error_carries_the_name() -> None:
    """The missing key is also available as ``.name`` for structured reporting."""
    with pytest.raises(ExpressionEvaluationError) as caught:
        evaluate("steps.missing.content")
    assert caught.value.name == "missing"


def test_name_absent_from_this_context_is_an_evaluation_error() -> None:
    """A context name that this evaluation does not provide fails naming it and what exists."""
    with pytest.raises(ExpressionEvaluationError) as caught:
        compile_expression("item.name").evaluate({"inputs": {}, "steps": {}})
    assert (
        caught.value.message
        == "'item.name': 'item' is not available here (the context has: inputs, steps)"
    )
    assert caught.value.name == "item"


@pytest.mark.parametrize(
    ("source", "what", "message"),
    [
        ("content", "condition", "'content': the condition must be true or false, but it"),
        ("iteration", "until", "'iteration': the until must be true or false, but it gave int 3"),
        ("steps.build.result", "edge condition", "the edge condition must be true or false"),
        ("inputs.tags", "condition", "but it gave list ['a', 'b']"),
        ("steps.build.result", "condition", "but it gave null None"),
    ],
)  # fmt: skip
def test_evaluate_bool_refuses_other_types(source: str, what: str, message: str) -> None:
    """A condition that is not a bool fails naming what it was expected to be and the type."""
    with pytest.raises(ExpressionEvaluationError) as caught:
        compile_expression(source).evaluate_bool(context(), what=what)
    assert message in caught.value.message


def test_cost_is_bounded() -> None:
    """A hostile nest of comprehensions that builds lists is refused before it runs."""
    expression = compile_expression("inputs.xs.map(a, inputs.xs.map(b, inputs.xs.map(c, a + b)))")
    with pytest.raises(ExpressionEvaluationError) as caught:
        expression.evaluate({"inputs": {"xs": list(range(100))}})
    assert "over the limit of 32 Mi per evaluation" in caught.value.message


def test_iterations_are_bounded() -> None:
    """A comprehension that builds nothing but runs long stops at the engine's iteration budget."""
    expression = compile_expression("inputs.xs.all(a, a >= 0)")
    with pytest.raises(ExpressionEvaluationError) as caught:
        expression.evaluate({"inputs": {"xs": list(range(20_000))}})
    assert "comprehensions ran past 10,000 iterations in one evaluation" in caught.value.message


def test_unsupported_context_value_is_an_evaluation_error() -> None:
    """A value that is not plain JSON-like Python fails with an error, not a crash."""
    with pytest.raises(ExpressionEvaluationError) as caught:
        compile_expression("size(inputs) > 0").evaluate({"inputs": {1, 2}})
    assert "set" in caught.value.message


def test_compile_is_memoized() -> None:
    """Compiling the same text twice returns the same compiled expression."""
    first = compile_expression("steps.test.status == 'completed'", step_ids=STEP_IDS)
    again = compile_expression("steps.test.status == 'completed'", step_ids=STEP_IDS)
    assert first is again
    assert isinstance(first, Expression)
    assert first.source == "steps.test.status == 'completed'"
    assert repr(first) == "Expression(\"steps.test.status == 'completed'\")"


@pytest.mark.parametrize(
    "source",
    [
        "steps.all(k, steps[k].status == 'completed')",
        "size(steps) == 4",
        "'test' in steps && has(steps.test.result.exitCode)",
        "steps[inputs.topic == 'loops' ? 'test' : 'build'].status == 'completed'",
        "steps.test.result.exitCode == 0 && steps.test.result.stdout + 'x' == 'ok\\nx'",
        "[1].exists(steps, steps == 1) && steps.test.status == 'completed'",
    ],
)
def test_reads_whole_values_when_the_expression_needs_them(source: str) -> None:
    """Handing the engine only what an expression reads never changes its value."""
    assert compile_expression(source).evaluate_bool(context()) is True


def test_evaluation_leaves_the_context_untouched() -> None:
    """The activation the caller passed is not modified."""
    activation = context()
    compile_expression("steps.test.result.exitCode == 0").evaluate(activation)
    assert activation == context()


def test_evaluation_is_thread_safe() -> None:
    """One compiled expression evaluates correctly from many threads at once."""
    expression = compile_expression("item.port + index")

    def run(i: int) -> object:
        return expression.evaluate({"item": {"port": 8000}, "index": i})

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, range(2_000)))
    assert results == [8000 + i for i in range(2_000)]


def test_recursion_limit_is_left_alone() -> None:
    """Importing, compiling and evaluating never change ``sys.getrecursionlimit()``."""
    code = (
        "import sys; before = sys.getrecursionlimit();"
        "from cadenza.workflow import compile_expression;"
        "compile_expression('[1, 2].map(x, x * 2).size() == 2').evaluate({});"
        "print(before, sys.getrecursionlimit())"
    )
    # A fresh interpreter, so that the import itself is observed; it finds cadenza where we do.
    src = str(Path(cadenza.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert out[0] == out[1]
    before = sys.getrecursionlimit()
    compile_expression("[1, 2, 3].filter(x, x > 1).size() == 2").evaluate({})
    assert sys.getrecursionlimit() == before


def test_errors_share_one_root() -> None:
    """Every expression error is an ExpressionError and a CadenzaError."""
    for kind in (ExpressionSyntaxError, ExpressionTooComplex, ExpressionEvaluationError):
        assert issubclass(kind, ExpressionError)
        assert issubclass(kind, CadenzaError)


def test_context_values_come_back_as_copies_in_their_order() -> None:
    """A path into the context returns the value with its key order, not the caller's object."""
    activation = context()
    activation["inputs"]["config"] = {"zeta": 1, "alpha": {"b": 2, "a": 1}}
    value = compile_expression("inputs.config").evaluate(activation)
    assert isinstance(value, dict)
    assert list(value) == ["zeta", "alpha"]
    assert list(value["alpha"]) == ["b", "a"]
    value["alpha"]["c"] = 3
    assert activation["inputs"]["config"] == {"zeta": 1, "alpha": {"b": 2, "a": 1}}


def test_maps_built_by_an_expression_have_sorted_keys() -> None:
    """CEL maps have no order; results list their keys sorted, the same in every process."""
    value = evaluate("{'b': 1, 'c': {'z': 1, 'y': 2}, 'a': 2}")
    assert isinstance(value, dict)
    assert list(value) == ["a", "b", "c"]
    assert list(value["c"]) == ["y", "z"]
