"""Load-time checks of CEL expressions and ``{{ }}`` templates, located in the file.

Every expression is compiled once here (the CEL module memoizes), so a syntax
error surfaces at load with the line and column of the offending character in
the document, not when a run first reaches it. Beyond syntax, an expression that
is a constant of the wrong type (``condition: "'yes'"``, ``until: "1 + 2"``) is
caught statically: it could never be the boolean (or list) the field needs.
A Python predicate's marker (``@python:...``, from ``cadenza.build``) stands
where CEL would: it is only checked to name a function registered in this process.

What an expression reads is checked against the document too (`_check_reads`):
a step id that no step declares (with "did you mean"), a field a step result
cannot have (only ``content``, ``result`` and ``status``), an input the
workflow does not declare, ``step.x`` written for ``steps.x``, a top-level
step that is not among the reading step's (transitive) dependencies, a step
declared in a loop body the expression is outside of (its scope cannot see it),
and a comparison of a step's text with a number. Only constant keys are checked:
``steps[name]`` with a variable key is left to run time.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Literal

from cadenza.errors import ExpressionSyntaxError, ExpressionTooComplex, PredicateNotRegistered

from ._cel import Expression
from ._cel_ast import Node, decode_checked, walk
from ._compile import compile_expression
from ._problems import DocPath, Reporter, did_you_mean
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
_STEP_FIELDS = frozenset({"content", "result", "status"})
_ORDERINGS = frozenset({"_<_", "_<=_", "_>_", "_>=_"})
_TEXT_FIELDS = frozenset({"content", "status"})


@functools.lru_cache(maxsize=4096)
def constant_kind(source: str) -> str | None:
    """What a constant expression always yields (``"a string"``...), or ``None``.

    ``None`` means "not provably a constant of one type": anything that names a
    variable, calls a function, compares or combines with logic. Only literals,
    parentheses and arithmetic are judged.
    """
    tokens = _tokens(source)
    if not tokens:
        return None
    first = tokens[0][1]
    kinds: set[str] = set()
    for group, token in tokens:
        if group == "id":
            if token not in ("true", "false", "null"):
                return None
            kinds.add("null" if token == "null" else "a boolean")
        elif group == "op":
            if token not in _ARITHMETIC and not (first in ("[", "{") and token in "[]{},:"):
                return None
        else:
            kinds.add("a string" if group == "str" else "a number")
    if first in ("[", "{"):
        return "a list" if first == "[" else "a map"
    return kinds.pop() if len(kinds) == 1 else None


def _tokens(source: str) -> list[tuple[str, str]] | None:
    """``source`` as (group of `_TOKEN`, text) pairs; None if part of it is no token."""
    tokens = []
    pos = 0
    while pos < len(source):
        match = _TOKEN.match(source, pos)
        if match is None or match.end() == pos:
            return None
        pos = match.end()
        tokens.append((match.lastgroup or "", match.group().strip()))
    return tokens


class ExpressionChecker:
    """Compiles a document's expressions and templates, reporting problems in place.

    Args:
        reporter: Where problems go; offsets map to columns through its source map.
        step_ids: Every step id the document declares (for ``steps.list-services``).
    """

    def __init__(
        self,
        reporter: Reporter,
        step_ids: frozenset[str],
        *,
        inputs: frozenset[str] | None = None,
        top_level: frozenset[str] = frozenset(),
        declared: Mapping[str, list[str]] | None = None,
        loops: Mapping[str, str] | None = None,
    ) -> None:
        self.reporter = reporter
        self.step_ids = step_ids
        self.inputs = inputs
        """The declared input names; None when the workflow declares none (nothing to check)."""
        self.top_level = top_level
        self.visible: frozenset[str] | None = None
        """While a top-level step is checked: the top-level ids it may read (itself and its
        transitive dependencies). None elsewhere: nested scopes are not checked for it."""
        self.scope: frozenset[str] | None = None
        """The step ids the expressions being checked can see at run time: their own list of
        steps and every list enclosing it, not the bodies of the loops in them. None where
        that is not worked out (a loop's own expressions, graphs): nothing is checked."""
        self.declared = declared or {}
        """Each step id with the lists (as paths) that declare it, for the messages."""
        self.loops = loops or {}
        """A loop body step's id -> the id of the loop step that runs it."""

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
            compiled = compile_expression(source, step_ids=self.step_ids)
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
        self._check_reads(path, compiled, field, offset=shift)
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
            template = parse_template(text, step_ids=self.step_ids)
        except ExpressionSyntaxError as exc:
            what = "too complex" if isinstance(exc, ExpressionTooComplex) else "invalid"
            self.reporter.add_rule(
                path,
                f"{what} template in {field}: {exc.message}",
                offset=max(exc.column - 1, 0) if in_value else None,
            )
            return True
        for part, column in template.placeholders():
            self._check_reads(path, part, field, offset=column if in_value else None)
        return True

    def _check_reads(
        self, path: DocPath, expression: Expression, field: str, *, offset: int | None
    ) -> None:
        """Report what ``expression`` reads that the document says cannot be there."""
        add = self.reporter.add_rule
        for root, keys in expression.paths:
            for problem in self._read_problems(field, root, keys):
                add(path, problem, offset=offset)
        if not expression.is_async and type(expression) is Expression:
            for words in _text_compared_with_numbers(decode_checked(expression.checked_tree())):
                add(path, f"{field}: {words}", offset=offset)

    def _read_problems(self, field: str, root: str, keys: Sequence[str]) -> Iterator[str]:
        """Why ``field`` cannot read ``root.keys...``: no such step or input, or not here."""
        if not keys:
            return
        first = keys[0]
        if root == "steps" and "." not in first and "[" not in first:
            yield from self._step_problems(field, first, keys)
        elif root == "inputs" and self.inputs is not None and first not in self.inputs:
            declared = ", ".join(sorted(self.inputs)) or "none"
            yield (
                f"{field} reads inputs.{first}, but the workflow declares no input {first!r} "
                f"(it declares: {declared})" + did_you_mean(first, self.inputs)
            )
        elif root == "step":
            yield (
                f"{field} reads step.{first}, but 'step' is a graph's step number; "
                f"did you mean steps.{first}?"
            )

    def _step_problems(self, field: str, first: str, keys: Sequence[str]) -> Iterator[str]:
        """Why ``steps.<first>...`` cannot be read: no such step, not a dependency, hidden
        in a loop body, or no such field of a step."""
        if first not in self.step_ids:
            found = f"{field} reads steps.{first}, but no step has the id {first!r}"
            yield found + did_you_mean(first, self.step_ids)
        elif self.visible is not None and first in self.top_level and first not in self.visible:
            yield (
                f"{field} reads steps.{first}, but {first!r} is not among this step's "
                f"dependencies: add it to dependsOn (dependsOn: [{first}])"
            )
        elif self.scope is not None and first not in self.scope:
            yield self._hidden(field, first)
        if len(keys) > 1 and keys[1] not in _STEP_FIELDS:
            yield (
                f"{field} reads steps.{first}.{keys[1]}, but a step has only content, "
                f"result and status" + did_you_mean(keys[1], _STEP_FIELDS)
            )

    def _hidden(self, field: str, step_id: str) -> str:
        """Why ``steps.<step_id>`` cannot be read here, and what can be read instead."""
        where = self.declared.get(step_id, ["a loop body"])[0]
        found = (
            f"{field} reads steps.{step_id}, but {step_id!r} is a step of {where}, a loop "
            "body: its steps are visible only inside the loop"
        )
        owner = self.loops.get(step_id)
        while owner is not None and self.scope is not None and owner not in self.scope:
            owner = self.loops.get(owner)
        if owner is None:
            return found
        return f"{found}; read the loop step instead (steps.{owner}.content is the loop's output)"


def _text_compared_with_numbers(root: Node) -> list[str]:
    """Orderings (``<``, ``>=``...) of a step's text against a number: never true or false."""
    found = []
    for node in walk(root):
        if node.kind == "call" and node.name in _ORDERINGS and len(node.args) == 2:
            text = [_step_text(arg) for arg in node.args]
            numeric = [arg.kind == "const" and arg.type in ("int", "double") for arg in node.args]
            for side in (0, 1):
                name = text[side]
                if name is not None and numeric[1 - side]:
                    found.append(
                        f"{name} is text, so comparing it with a number always fails at run "
                        f"time (convert it: int({name}) or double({name}))"
                    )
    return found


def _step_text(node: Node) -> str | None:
    """``steps.<id>.content`` or ``.status`` when ``node`` selects one, else None."""
    if node.kind != "select" or node.name not in _TEXT_FIELDS or node.target is None:
        return None
    owner = node.target
    parent = owner.target
    if owner.kind == "select" and parent is not None and parent.kind == "ident":
        return f"steps.{owner.name}.{node.name}" if parent.name == "steps" else None
    return None
