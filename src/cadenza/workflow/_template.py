"""``{{ CEL }}`` templates in strings: instructions, ``env`` values, include inputs.

    template = parse_template("Design {{ inputs.topic }} in {{ inputs.lang }}.")
    template.render({"inputs": {"topic": "loops", "lang": "Python"}})
    # 'Design loops in Python.'

A placeholder ends at the first ``}}`` outside a string literal and outside the
expression's own brackets, so ``{{ {'a': 1} }}`` and ``{{ '}}' }}`` work. There
is no escape for a literal ``{{``; text holding one is a template.

Values render as: strings as they are, null as nothing, booleans as
``true``/``false``, numbers as Python prints them, maps and lists as compact
JSON, timestamps in RFC 3339 and durations in seconds (``90s``), as CEL's
``string()`` does.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Mapping

import msgspec

from cadenza.errors import (
    ExpressionEvaluationError,
    ExpressionSyntaxError,
    ExpressionTooComplex,
    TemplateSyntaxError,
)

from ._cel import CONTEXT_NAMES, Expression, quote
from ._cel_lexer import scan_placeholder
from ._compile import compile_expression

__all__ = ["Template", "TemplateSyntaxError", "has_template", "parse_template"]

_OPEN, _CLOSE = "{{", "}}"


class Template:
    """A parsed template: literal text and compiled expressions, in order.

    Build one with :func:`parse_template`; it is immutable and reusable.

    Attributes:
        source: The template text as written.
        parts: Literal strings and :class:`Expression` placeholders, in order.
    """

    __slots__ = ("_columns", "parts", "source")

    def __init__(
        self, source: str, parts: tuple[str | Expression, ...], columns: tuple[int, ...]
    ) -> None:
        self.source = source
        self.parts = parts
        self._columns = columns

    def __repr__(self) -> str:
        return f"Template({self.source!r})"

    def placeholders(self) -> list[tuple[Expression, int]]:
        """Each placeholder's compiled expression and its 0-based offset in ``source``."""
        expressions = [part for part in self.parts if isinstance(part, Expression)]
        return [(part, column - 1) for part, column in zip(expressions, self._columns, strict=True)]

    @property
    def is_static(self) -> bool:
        """True when the text has no placeholders (render returns it unchanged)."""
        return not self._columns

    def render(self, activation: Mapping[str, object]) -> str:
        """The text with every placeholder replaced by its value.

        Raises:
            ExpressionEvaluationError: A placeholder failed; the message names
                the placeholder and its column in the template.
        """
        if not self._columns:
            return self.source
        out: list[str] = []
        columns = iter(self._columns)
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            column = next(columns)
            try:
                value = part.evaluate(activation)
            except ExpressionEvaluationError as exc:
                reason = exc.message.removeprefix(f"{quote(part.source)}: ")
                raise ExpressionEvaluationError(
                    f"template placeholder {quote(_OPEN + part.source + _CLOSE)}"
                    f" at column {column}: {reason}",
                    source=part.source,
                    name=exc.name,
                ) from None
            out.append(format_value(value))
        return "".join(out)


def format_value(value: object) -> str:
    """How one placeholder value reads in text (see the module docstring)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
        return f"{int(seconds) if seconds.is_integer() else seconds}s"
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    encoded = msgspec.json.encode(value).decode()
    # A timestamp encodes as a JSON string; text wants it without the quotes.
    return encoded[1:-1] if isinstance(value, datetime.datetime) else encoded


def has_template(text: str) -> bool:
    """Whether ``text`` holds a ``{{`` (a placeholder, or the start of a broken one)."""
    return _OPEN in text


def parse_template(
    text: str,
    *,
    step_ids: frozenset[str] = frozenset(),
    names: frozenset[str] = CONTEXT_NAMES,
) -> Template:
    """Parse ``text`` and compile its placeholders; memoized like :func:`compile_expression`.

    Args:
        text: The template text.
        step_ids: As for :func:`compile_expression`.
        names: As for :func:`compile_expression`.

    Raises:
        TemplateSyntaxError: An unclosed ``{{``, an empty ``{{ }}``, or a
            placeholder that does not compile; ``column`` counts in ``text``.
        ExpressionTooComplex: A placeholder exceeds the expression caps
            (``source`` and ``column`` are the template's).
    """
    return _parse(text, step_ids, names)


@functools.lru_cache(maxsize=4096)
def _parse(text: str, step_ids: frozenset[str], names: frozenset[str]) -> Template:
    parts: list[str | Expression] = []
    columns: list[int] = []
    pos = 0
    while (start := text.find(_OPEN, pos)) != -1:
        end = scan_placeholder(text, start + len(_OPEN))
        if end is None:
            raise TemplateSyntaxError(
                f"'{_OPEN}' is never closed with '{_CLOSE}'", source=text, column=start + 1
            )
        inner = text[start + len(_OPEN) : end]
        if not inner.strip():
            raise TemplateSyntaxError(
                f"empty placeholder '{_OPEN}{inner}{_CLOSE}'; put a CEL expression inside",
                source=text,
                column=start + 1,
            )
        if start > pos:
            parts.append(text[pos:start])
        parts.append(_compile(text, inner, start + len(_OPEN), step_ids, names))
        columns.append(start + 1)
        pos = end + len(_CLOSE)
    if pos < len(text) or not parts:
        parts.append(text[pos:])
    return Template(text, tuple(parts), tuple(columns))


def _compile(
    text: str, inner: str, offset: int, step_ids: frozenset[str], names: frozenset[str]
) -> Expression:
    """Compile one placeholder, re-basing a compile error's column onto the template."""
    try:
        return compile_expression(inner, step_ids=step_ids, names=names)
    except ExpressionSyntaxError as exc:
        kind = (
            ExpressionTooComplex if isinstance(exc, ExpressionTooComplex) else TemplateSyntaxError
        )
        raise kind(
            f"{exc.message} (in placeholder {quote(_OPEN + inner + _CLOSE)})",
            source=text,
            column=offset + exc.column,
        ) from None
