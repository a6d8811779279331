"""``{{ CEL }}`` templates: parsing, rendering rules, error columns."""

from __future__ import annotations

from typing import Any

import pytest

from cadenza.errors import (
    ExpressionEvaluationError,
    ExpressionSyntaxError,
    ExpressionTooComplex,
    TemplateSyntaxError,
)
from cadenza.workflow import Expression, Template, has_template, parse_template


def context() -> dict[str, Any]:
    """The names a template sees when its step starts."""
    return {
        "inputs": {
            "topic": "loops",
            "count": 3,
            "ratio": 2.5,
            "fast": True,
            "slow": False,
            "none": None,
            "config": {"retries": 2, "tags": ["a", "b"]},
            "tags": ["a", "b"],
        },
        "steps": {"list-services": {"content": "api, web", "result": None}},
        "item": {"name": "api"},
        "index": 1,
    }


def render(text: str) -> str:
    return parse_template(text, step_ids=frozenset({"list-services"})).render(context())


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Design {{ inputs.topic }}.", "Design loops."),
        ("{{inputs.topic}}", "loops"),
        ("{{ inputs.count }} items", "3 items"),
        ("ratio {{ inputs.ratio }}", "ratio 2.5"),
        ("{{ inputs.fast }}/{{ inputs.slow }}", "true/false"),
        ("[{{ inputs.none }}]", "[]"),
        ("{{ inputs.config }}", '{"retries":2,"tags":["a","b"]}'),
        ("{{ inputs.tags }}", '["a","b"]'),
        ("{{ inputs.count * 2 }} and {{ inputs.count > 2 }}", "6 and true"),
        ("Deploy {{ item.name }} (#{{ index + 1 }})", "Deploy api (#2)"),
        ("{{ steps.list-services.content }}", "api, web"),
        ("{{ {'a': {'b': 1}} }}", '{"a":{"b":1}}'),
        ("{{ '}} and {{' }}!", "}} and {{!"),
        ("Don't stop; {{ inputs.topic }} isn't done", "Don't stop; loops isn't done"),
        ("a }} b", "a }} b"),
        ("{{ duration('90s') }} {{ duration('1500ms') }}", "90s 1.5s"),
        ("{{ timestamp('2024-01-01T00:00:00Z') }}", "2024-01-01T00:00:00Z"),
        ("{{ b'hi' }}", "hi"),
        ("line one\n{{ inputs.topic }}\nline three", "line one\nloops\nline three"),
        ("", ""),
    ],
)
def test_renders_values_as_text(text: str, want: str) -> None:
    """Strings as-is, null as nothing, true/false, numbers, compact JSON for maps and lists."""
    assert render(text) == want


def test_parts_alternate_text_and_expressions() -> None:
    """A template keeps its literal text and compiled placeholders in order."""
    template = parse_template("Hello {{ inputs.topic }}, {{ index }}!")
    assert template.source == "Hello {{ inputs.topic }}, {{ index }}!"
    assert [type(p) for p in template.parts] == [str, Expression, str, Expression, str]
    assert template.parts[0] == "Hello "
    assert template.parts[1] == parse_template("{{ inputs.topic }}").parts[0]
    assert not template.is_static
    assert repr(template) == "Template('Hello {{ inputs.topic }}, {{ index }}!')"


@pytest.mark.parametrize("text", ["plain text", "", "braces { } and }} alone"])
def test_text_without_placeholders_is_static(text: str) -> None:
    """Without ``{{`` a template is static and renders to its own text."""
    template = parse_template(text)
    assert template.is_static
    assert template.parts == (text,)
    assert template.render({}) == text


def test_parse_is_memoized() -> None:
    """Parsing the same text twice returns the same template."""
    assert parse_template("x {{ index }}") is parse_template("x {{ index }}")
    assert isinstance(parse_template("x"), Template)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("run {{ inputs.topic }}", True),
        ("broken {{ start", True),
        ("no placeholders", False),
        ("single { brace }", False),
        ("}} closing only", False),
    ],
)
def test_has_template_spots_placeholders(text: str, want: bool) -> None:
    """Any ``{{`` counts, even unclosed, so command strings cannot smuggle one in."""
    assert has_template(text) is want


@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        ("ab {{ inputs.topic", 4, "'{{' is never closed with '}}'"),
        ("ab {{ }}", 4, "empty placeholder '{{ }}'; put a CEL expression inside"),
        ("ab {{}}", 4, "empty placeholder '{{}}'"),
        ("ab {{ 1 + }}", 11, "syntax error: unexpected end of the expression (in placeholder"),
        ("x {{ index }} and {{ inptus.topic }}", 22, "unknown name 'inptus' (did you mean"),
        ("{{ 'abc }}", 4, 'unterminated string literal (in placeholder "{{ \'abc }}")'),
        ("line one\n  {{ index + }}", 23, "syntax error: unexpected end of the expression"),
    ],
)
def test_syntax_errors_point_into_the_template(text: str, column: int, message: str) -> None:
    """Errors carry the column in the template text: the placeholder's start plus the offset."""
    with pytest.raises(TemplateSyntaxError) as caught:
        parse_template(text)
    assert caught.value.message.startswith(message), caught.value.message
    assert caught.value.column == column
    assert caught.value.source == text
    assert isinstance(caught.value, ExpressionSyntaxError)


def test_multi_line_template_error_has_line_and_column() -> None:
    """In a multi-line template the error's line and column within the line are available."""
    with pytest.raises(TemplateSyntaxError) as caught:
        parse_template("line one\n  {{ index + }}")
    assert (caught.value.line, caught.value.line_column) == (2, 14)


def test_too_complex_placeholder_is_located_in_the_template() -> None:
    """A placeholder over the caps raises ExpressionTooComplex with the template's column."""
    text = "x {{ " + "(" * 33 + "1" + ")" * 33 + " }}"
    with pytest.raises(ExpressionTooComplex) as caught:
        parse_template(text)
    assert caught.value.column == 6 + 32
    assert caught.value.source == text
    assert caught.value.message.startswith("brackets nest more than 32 deep (in placeholder")


@pytest.mark.parametrize(
    ("text", "message", "name"),
    [
        (
            "Deploy {{ inputs.missing }} now",
            "template placeholder '{{ inputs.missing }}' at column 8: no such key 'missing' in"
            " inputs (it has: config, count, fast, none, ratio, slow, tags, topic)",
            "missing",
        ),
        (
            "{{ index }}: {{ inputs.topic > 1 }}",
            "template placeholder '{{ inputs.topic > 1 }}' at column 14: wrong type:"
            " '>' cannot be applied to (string, int)",
            None,
        ),
        (
            "{{ state }}",
            "template placeholder '{{ state }}' at column 1: 'state' is not available here",
            "state",
        ),
    ],
)
def test_render_errors_name_the_placeholder(text: str, message: str, name: str | None) -> None:
    """A failing placeholder is named, with its column, and the reason."""
    with pytest.raises(ExpressionEvaluationError) as caught:
        parse_template(text).render(context())
    assert caught.value.message.startswith(message), caught.value.message
    assert caught.value.name == name


def test_computed_maps_render_with_sorted_keys() -> None:
    """A map built inside a placeholder renders the same in every run: keys sorted."""
    assert render("{{ {'b': 1, 'a': [inputs.count]} }}") == '{"a":[3],"b":1}'
