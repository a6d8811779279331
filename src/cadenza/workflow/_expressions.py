"""Load-time checks of CEL expressions and ``{{ }}`` templates, located in the file.

Every expression is compiled once here (the CEL module memoizes), so a syntax
error surfaces at load with the line and column of the offending character in
the document, not when a run first reaches it. Beyond syntax, an expression that
is a constant of the wrong type (``condition: "'yes'"``, ``until: "1 + 2"``) is
caught statically: it could never be the boolean (or list) the field needs.
A Python predicate's marker (``@python:...``, from ``cadenza.build``) stands
where CEL would: it is only checked to name a function registered in this process.
"""

from __future__ import annotations

import functools
import re
from typing import Literal

from cadenza.errors import ExpressionSyntaxError, ExpressionTooComplex, PredicateNotRegistered

from ._cel import compile_expression
from ._problems import DocPath, Reporter
from ._python import is_python, not_registered
from ._template import has_template, parse_template

__all__ = ["ExpressionChecker", "constant_kind"]

Want = Literal["bool", "list", "string", "any"]

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<str>[rRbB]{0,2}(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'))
    | (?P<num>0x[0-9a-fA-F]+[uU]?|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?[uU]?|\.\d+)
    | (?P<id>[A-Za-z_]\w*)
    | (?P<op>&&|\|\||==|!=|<=|>=|[-+*/%<>!?:()\[\]{},.])
    )\s*""",
    re.VERBOSE,
)
_ARITHMETIC = frozenset("+-*/%()")


@functools.lru_cache(maxsize=4096)
def constant_kind(source: str) -> str | None:
    """What a constant expression always yields (``"a string"``...), or ``None``.

    ``None`` means "not provably a constant of one type": anything that names a
    variable, calls a function, compares or combines with logic. Only literals,
    parentheses and arithmetic are judged.
    """
    kinds: set[str] = set()
    pos = 0
    first = ""
    while pos < len(source):
        match = _TOKEN.match(source, pos)
        if match is None or match.end() == pos:
            return None
        pos = match.end()
        token = match.group().strip()
        first = first or token
        if match.group("str"):
            kinds.add("a string")
        elif match.group("num"):
            kinds.add("a number")
        elif match.group("id"):
            if token not in ("true", "false", "null"):
                return None
            kinds.add("null" if token == "null" else "a boolean")
        elif token not in _ARITHMETIC:
            if first in ("[", "{") and token in "[]{},:":
                continue
            return None
    if first == "[":
        return "a list"
    if first == "{":
        return "a map"
    return kinds.pop() if len(kinds) == 1 else None


class ExpressionChecker:
    """Compiles a document's expressions and templates, reporting problems in place.

    Args:
        reporter: Where problems go; offsets map to columns through its source map.
        step_ids: Every step id the document declares (for ``steps.list-services``).
    """

    def __init__(self, reporter: Reporter, step_ids: frozenset[str]) -> None:
        self.reporter = reporter
        self.step_ids = step_ids

    def expression(
        self, path: DocPath, source: str, *, field: str, want: Want, shift: int = 0
    ) -> None:
        """Check the CEL ``source`` of ``field`` at ``path``; ``want`` is its result type.

        ``shift`` is where ``source`` starts inside the value (1 after a ``$`` prefix).
        """
        if not source.strip():
            self.reporter.add_rule(path, f"{field} is empty; write a CEL expression")
            return
        if is_python(source):  # a callable from cadenza.build: what it returns is seen at run time
            try:
                compile_expression(source)
            except PredicateNotRegistered:
                self.reporter.add_rule(path, f"{field}: {not_registered(source)}")
            return
        try:
            compile_expression(source, step_ids=self.step_ids)
        except ExpressionTooComplex as exc:
            self.reporter.add_rule(path, f"{field} is too complex: {exc.message}")
            return
        except ExpressionSyntaxError as exc:
            self.reporter.add_rule(
                path,
                f"invalid CEL in {field}: {exc.message}",
                offset=shift + max(exc.column - 1, 0),
            )
            return
        kind = constant_kind(source)
        if want == "bool" and kind not in (None, "a boolean"):
            self.reporter.add_rule(
                path, f"{field} must be true or false, but {source.strip()!r} is always {kind}"
            )
        elif want == "list" and kind not in (None, "a list"):
            self.reporter.add_rule(
                path, f"{field} must yield a list, but {source.strip()!r} is always {kind}"
            )
        elif want == "string" and kind not in (None, "a string"):
            self.reporter.add_rule(
                path,
                f"{field} must give a string, but {source.strip()!r} is always {kind} "
                "(convert it with string(...), or drop the '$' to pass the value as written)",
            )

    def template(self, path: DocPath, text: str, *, field: str, in_value: bool = True) -> bool:
        """Parse the ``{{ }}`` placeholders of ``text``; True when it holds any.

        ``in_value`` is False for text read in from an ``@file``: its columns are not
        the document's, so the problem is placed at the value as a whole.
        """
        if not has_template(text):
            return False
        try:
            parse_template(text, step_ids=self.step_ids)
        except ExpressionSyntaxError as exc:
            what = "too complex" if isinstance(exc, ExpressionTooComplex) else "invalid"
            self.reporter.add_rule(
                path,
                f"{what} template in {field}: {exc.message}",
                offset=max(exc.column - 1, 0) if in_value else None,
            )
        return True
