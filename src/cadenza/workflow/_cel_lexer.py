"""What Cadenza reads off CEL text before the engine sees it: tokens, caps, rewrites.

All on tokens, so that string literals and comments are never mistaken for code:

- the compile-time caps (length, bracket nesting, macro nesting) that bound
  what one evaluation can cost;
- the rewrite of ``steps.list-services.result`` into CEL's quoted field
  ``steps.`list-services`.result`` for hyphenated step ids (SPEC section 4
  reads it as ``steps['list-services']``; the quoted field also works in
  ``has()``, which refuses an index);
- the end of a ``{{ }}`` template placeholder.

What an expression reads from the context is worked out in ``_cel_paths``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = [
    "MAX_BRACKET_NESTING",
    "MAX_MACRO_NESTING",
    "MAX_SOURCE_LENGTH",
    "TextError",
    "Token",
    "check_length",
    "check_nesting",
    "is_root",
    "original_position",
    "plain_string",
    "rewrite_step_ids",
    "scan_placeholder",
    "tokenize",
]

MAX_SOURCE_LENGTH = 4096
"""Characters in one expression; a long one belongs in a step, not a condition."""
MAX_BRACKET_NESTING = 32
"""Open brackets at once; cel-cpp's own parser stops at the same depth."""
MAX_MACRO_NESTING = 3
"""Comprehension macros inside one another; each level multiplies the work."""

_MACROS = frozenset(
    {"all", "exists", "exists_one", "existsOne", "map", "filter", "transformList", "transformMap"}
)

_TOKEN = re.compile(
    r"""
      (?P<space>\s+|//[^\n]*)
    | (?P<string>
          (?:[rR][bB]?|[bB][rR])(?:'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|'[^'\n]*'|"[^"\n]*")
        | [bB]?(?:'''(?:\\[\s\S]|[^\\])*?'''|\"\"\"(?:\\[\s\S]|[^\\])*?\"\"\"
                 |'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")
      )
    | (?P<number>0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.\d+|\.\d+|\d+)(?:[eE][+-]?\d+)?[uU]?)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<quoted>`[^`\n]*`)
    | (?P<punct>==|!=|<=|>=|&&|\|\||[-+*/%!<>?:.,()\[\]{}])
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_STEP_ID_RUN = re.compile(r"[a-z][a-z0-9_-]*")
_PLAIN_STRING = re.compile(r"""[rR]?(?:'([^'\\\n]*)'|"([^"\\\n]*)")""")


class TextError(Exception):
    """A problem found in the text itself, at ``position`` (0-based)."""

    def __init__(self, message: str, position: int, *, too_complex: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.position = position
        self.too_complex = too_complex


@dataclass(frozen=True, slots=True)
class Token:
    """One lexical token.

    ``kind`` is string, number, ident, quoted (a field name in backticks),
    punct or other; whitespace and comments are dropped.
    """

    kind: str
    text: str
    start: int

    @property
    def end(self) -> int:
        """The position just after the token."""
        return self.start + len(self.text)


def tokenize(source: str) -> list[Token]:
    """The tokens of ``source`` without whitespace and comments.

    Raises:
        TextError: A string literal is not closed.
    """
    tokens = []
    for match in _TOKEN.finditer(source):
        kind = match.lastgroup or "other"
        if kind == "space":
            continue
        if kind == "other" and match.group() in "'\"":
            raise TextError("unterminated string literal", match.start())
        tokens.append(Token(kind, match.group(), match.start()))
    return tokens


def scan_placeholder(text: str, start: int) -> int | None:
    """Where the ``}}`` closing a template placeholder whose CEL starts at ``start`` is.

    The closing ``}}`` is the first one outside string literals and outside
    the expression's own brackets. An unterminated string falls back to the
    first ``}}`` (the compiler then reports the string). None when unclosed.
    """
    depth = 0
    pos = start
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        assert match is not None  # the "other" group matches any character
        token = match.group()
        if match.lastgroup == "other" and token in "'\"":
            found = text.find("}}", start)
            return None if found == -1 else found
        if token in ("(", "[", "{"):
            depth += 1
        elif token in (")", "]", "}"):
            if depth == 0 and text.startswith("}}", match.start()):
                return match.start()
            depth = max(depth - 1, 0)
        pos = match.end()
    return None


def check_length(source: str) -> None:
    """Refuse text over the length cap (before spending time on it).

    Raises:
        TextError: With ``too_complex`` set, at the first character past the cap.
    """
    if len(source) > MAX_SOURCE_LENGTH:
        raise TextError(
            f"it is {len(source):,} characters long; the limit is {MAX_SOURCE_LENGTH:,}",
            MAX_SOURCE_LENGTH,
            too_complex=True,
        )


def check_nesting(tokens: list[Token]) -> None:
    """Refuse brackets or comprehension macros nested past their caps.

    Raises:
        TextError: With ``too_complex`` set, at the token that crossed a cap.
    """
    # One entry per open bracket: whether it opened a macro's argument list.
    stack: list[bool] = []
    macros = 0
    for i, token in enumerate(tokens):
        if token.text in ("(", "[", "{"):
            is_macro = (
                token.text == "("
                and i >= 2
                and tokens[i - 1].kind == "ident"
                and tokens[i - 1].text in _MACROS
                and tokens[i - 2].text == "."
            )
            stack.append(is_macro)
            macros += is_macro
            if len(stack) > MAX_BRACKET_NESTING:
                raise TextError(
                    f"brackets nest more than {MAX_BRACKET_NESTING} deep",
                    token.start,
                    too_complex=True,
                )
            if macros > MAX_MACRO_NESTING:
                raise TextError(
                    f"comprehension macros nest more than {MAX_MACRO_NESTING} deep"
                    f" (this '{tokens[i - 1].text}' is inside {MAX_MACRO_NESTING} others)",
                    tokens[i - 1].start,
                    too_complex=True,
                )
        elif token.text in (")", "]", "}") and stack:
            macros -= stack.pop()


@functools.lru_cache(maxsize=64)
def _hyphenated_longest_first(step_ids: frozenset[str]) -> tuple[str, ...]:
    """The ids holding a ``-``, longest first: once per set of ids, not per expression
    (a document with thousands of steps and expressions would otherwise be quadratic)."""
    return tuple(sorted((sid for sid in step_ids if "-" in sid), key=len, reverse=True))


def rewrite_step_ids(
    source: str, tokens: list[Token], step_ids: frozenset[str]
) -> tuple[str, list[tuple[int, int, int]]]:
    """Turn ``steps.<hyphenated-id>`` into the quoted field ``steps.`<hyphenated-id>```.

    Only ids in ``step_ids`` that hold a ``-`` are rewritten, the longest that
    fits first, and only when the id is written without spaces and does not
    run on into more identifier characters (``steps.a-bc`` is not ``a-b``).

    Returns:
        The new text and its edits as ``(start, old_length, new_length)``, in
        order, for mapping engine columns back to ``source``.
    """
    if "-" not in source:
        return source, []
    longest_first = _hyphenated_longest_first(step_ids)
    if not longest_first:
        return source, []
    edits = _step_id_edits(source, tokens, longest_first)
    if not edits:
        return source, []
    parts, last = [], 0
    for start, length, text in edits:
        parts += [source[last:start], text]
        last = start + length
    parts.append(source[last:])
    return "".join(parts), [(start, length, len(text)) for start, length, text in edits]


def _step_id_edits(
    source: str, tokens: list[Token], longest_first: tuple[str, ...]
) -> list[tuple[int, int, str]]:
    """Where `rewrite_step_ids` quotes an id: (start, old length, new text), in order."""
    edits: list[tuple[int, int, str]] = []
    for i in range(len(tokens) - 2):
        if not (tokens[i].text == "steps" and is_root(tokens, i) and tokens[i + 1].text == "."):
            continue
        field = tokens[i + 2]
        run = _STEP_ID_RUN.match(source, field.start)
        if field.kind != "ident" or run is None or "-" not in run.group():
            continue
        for sid in longest_first:
            end = field.start + len(sid)
            if run.group().startswith(sid) and not _continues(source, end):
                edits.append((field.start, len(sid), f"`{sid}`"))
                break
    return edits


def _continues(source: str, end: int) -> bool:
    return end < len(source) and (source[end].isalnum() or source[end] == "_")


def original_position(position: int, edits: list[tuple[int, int, int]]) -> int:
    """Map a position in rewritten text back to the text the user wrote."""
    shift = 0
    for start, old_length, new_length in edits:
        new_start = start + shift
        if position < new_start:
            break
        if position < new_start + new_length:
            return start
        shift += new_length - old_length
    return position - shift


def plain_string(token: Token) -> str | None:
    """The value of a string literal without escapes or a bytes prefix, else None."""
    literal = _PLAIN_STRING.fullmatch(token.text) if token.kind == "string" else None
    if literal is None:
        return None
    return literal[1] if literal[1] is not None else literal[2]


def is_root(tokens: list[Token], i: int) -> bool:
    """Whether ``tokens[i]`` names a variable rather than a field after a dot."""
    return tokens[i].kind == "ident" and (i == 0 or tokens[i - 1].text != ".")
