"""Located problems: what the loader and validator report, and where.

Every rule reports a :class:`Problem` instead of raising, so that one pass over a
document finds all of its mistakes. A :class:`Reporter` turns a document path
(``("steps", 2, "loop", "until")``) into a file position through the
:class:`~cadenza.workflow._source.SourceMap` the YAML loader recorded; workflows
built in Python have no source map and get line 0, column 0 with the path filled.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator, Sequence, Sized
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final, Literal

import msgspec

from cadenza.errors import CadenzaError

from ._source import DocPath, SourceMap

__all__ = [
    "MAX_PROBLEMS",
    "SUGGESTION_BUDGET",
    "DocPath",
    "Problem",
    "Reporter",
    "WorkflowError",
    "did_you_mean",
    "format_path",
    "suggestion_budget",
]


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")

MAX_PROBLEMS = 200
"""Problems reported per file; one more says the rest were left out (a hostile or
generated document can hold hundreds of thousands, and reporting them all costs more
than reading it)."""
SUGGESTION_BUDGET = 20_000
"""Candidates ``did_you_mean`` may compare per document; past that it suggests nothing.
Each comparison costs microseconds, and a 1 MiB document can ask for thousands of
suggestions among thousands of names."""

_budget: ContextVar[list[int] | None] = ContextVar("cadenza_suggestion_budget", default=None)


@contextmanager
def suggestion_budget(comparisons: int = SUGGESTION_BUDGET) -> Iterator[None]:
    """Bounds the fuzzy matching of every ``did_you_mean`` inside the block."""
    token = _budget.set([comparisons])
    try:
        yield
    finally:
        _budget.reset(token)


class Problem(msgspec.Struct, frozen=True):
    """One thing wrong with a workflow, located in its file.

    Attributes:
        file: The file name as the user gave it (``<string>``/``<python>`` without one).
        line: 1-based line, or 0 when the problem has no position (a missing file,
            a workflow built in Python).
        column: 1-based column, or 0 like ``line``.
        path: Where in the document, as ``steps[2].loop.until``; empty for the whole file.
        message: What is wrong, in words, and how to fix it when that is not obvious.
        severity: ``error`` makes the document invalid; a ``warning`` names what a run
            would lack where the document is checked (an unset API key) but may have
            where it runs. Only checks given a caller's `ModelRules` warn.
    """

    file: str
    line: int
    column: int
    path: str
    message: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}:"
        message = self.message if self.severity == "error" else f"warning: {self.message}"
        return f"{where} {self.path}: {message}" if self.path else f"{where} {message}"


class WorkflowError(CadenzaError):
    """A workflow document (or one it includes) is invalid.

    Raised by :func:`~cadenza.workflow.load_workflow` and friends with every problem
    found, not just the first; fix them and load again. ``str()`` lists the problems
    one per line in ``FILE:LINE:COL: path: message`` form.

    Attributes:
        problems: The problems, in file order and then by position.
    """

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def format_path(path: DocPath) -> str:
    """Render a document path as ``steps[2].loop.until`` (odd keys as ``['a b']``)."""
    out: list[str] = []
    for part in path:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _PLAIN_KEY.match(part):
            out.append(f".{part}" if out else part)
        else:
            out.append(f"[{part!r}]")
    return "".join(out)


def did_you_mean(word: str, choices: Iterable[str], *, cutoff: float = 0.6) -> str:
    """A ``"; did you mean 'x'?"`` suffix naming the closest choice, or ``""``.

    ``cutoff`` is difflib's similarity threshold; a case or separator slip always counts.
    Inside `suggestion_budget`, once the budget is spent it returns ``""``.
    """
    left = _budget.get()
    if left is not None:
        size = len(choices) if isinstance(choices, Sized) else 0
        if size > left[0]:
            return ""
        left[0] -= size
    pool = list(choices)
    lowered = {c.lower().replace("_", "").replace("-", ""): c for c in pool}
    folded = word.lower().replace("_", "").replace("-", "")
    # Case and separator slips (`depends_on`, `MaxIterations`) are the most common typos.
    if folded in lowered and lowered[folded] != word:
        return f"; did you mean {lowered[folded]!r}?"
    close = difflib.get_close_matches(word, pool, n=1, cutoff=cutoff)
    if not close and _MEANT.get(folded) in pool:  # not a typo: another word for a choice
        close = [_MEANT[folded]]
    return f"; did you mean {close[0]!r}?" if close else ""


_MEANT: Final[dict[str, str]] = {
    # The words other tools use for a thinking level (OpenAI's minimal and xhigh, say).
    "none": "off",
    "disabled": "off",
    "minimal": "low",
    "max": "high",
    "maximum": "high",
    "xhigh": "high",
    "extreme": "high",
}
"""Words that are not a misspelling of any choice, and the choice they stand for where
it is one."""


class Reporter:
    """Collects the problems of one file, locating each through its source map.

    Args:
        file: The file name to report.
        source: Positions recorded by the YAML loader; ``None`` for Python-built workflows.
    """

    def __init__(self, file: str, source: SourceMap | None = None) -> None:
        self.file = file
        self.source = source
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []
        # Objects whose schema problems were already reported (every prefix of their
        # paths, so the check is one lookup): later rules stay quiet about them, so a
        # typo'd key yields one message, not a cascade of follow-ups.
        self._quiet: set[DocPath] = set()

    def add(self, path: DocPath, message: str, *, offset: int | None = None) -> None:
        """Report ``message`` at ``path``; ``offset`` is a character offset inside its value.

        Past `MAX_PROBLEMS` one last problem says the rest were left out.
        """
        if len(self.problems) > MAX_PROBLEMS:
            return
        if len(self.problems) == MAX_PROBLEMS:
            message = f"more than {MAX_PROBLEMS} problems; the rest are not reported"
        line, column = self._locate(path, offset)
        self.problems.append(Problem(self.file, line, column, format_path(path), message))

    def warn(self, path: DocPath, message: str) -> None:
        """Note what a run would lack at ``path``; it does not make the document invalid."""
        if len(self.warnings) < MAX_PROBLEMS:
            line, column = self._locate(path, None)
            where = format_path(path)
            self.warnings.append(Problem(self.file, line, column, where, message, "warning"))

    def add_rule(self, path: DocPath, message: str, *, offset: int | None = None) -> None:
        """Like :meth:`add`, unless a schema problem was reported inside ``path``."""
        if path in self._quiet:
            return
        self.add(path, message, offset=offset)

    def quiet(self, paths: Sequence[DocPath]) -> None:
        """Mark objects holding schema problems (see :meth:`add_rule`)."""
        for path in paths:
            self._quiet.update(path[:end] for end in range(len(path) + 1))

    def _locate(self, path: DocPath, offset: int | None) -> tuple[int, int]:
        if self.source is None:
            return 0, 0
        if offset is not None:
            return self.source.locate_offset(path, offset)
        return self.source.locate(path)
