"""Searches whose needle or regular expression comes from the data: bounded before they start.

cel-cpp compares a needle at every position of the text and runs RE2 on the
pattern it is given: ``content.matches(content)`` on 100 KB took 32 s, and
``content.contains(needle)`` with a 500 KB needle from the data 5 s on 1 MB,
all of it holding the event loop (the engine keeps the GIL, so a worker thread
would not free it). Now such an evaluation is charged the product of the sizes,
or the pattern's program size times the text's, and refused before it starts
when that is over the limit; what fits takes a few tens of milliseconds at most.

Blocking is measured the way a step suffers it: the expression is evaluated on
the event loop beside a `LoopProbe`, and the longest stretch without a tick is
read in CPU time, which other jobs on a busy machine do not inflate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from cadenza.errors import ExpressionEvaluationError, ExpressionTooComplex
from cadenza.workflow import compile_expression
from cadenza.workflow._cel_regex import program_bound
from tests._helpers import run_flow
from tests.conftest import WriteFlow

from .conftest import LOOP_LIMIT
from .hostile_cel import DATA_SIZE, LoopProbe, data_activation

LIMIT = "over the limit of 32 Mi per evaluation"


async def evaluate_on_the_loop(source: str, activation: Mapping[str, Any]) -> tuple[Any, float]:
    """(value or the error raised, the longest CPU stretch the loop went without a tick)."""
    expression = compile_expression(source)
    probe = LoopProbe()
    outcome: Any = None
    async with anyio.create_task_group() as group:
        group.start_soon(probe.run)
        await probe.ticked()
        probe.reset()
        try:
            outcome = await expression.evaluate_async(activation)
        except ExpressionEvaluationError as error:
            outcome = error
        await probe.ticked()
        group.cancel_scope.cancel()
    return outcome, probe.longest_cpu


SEARCHES = [
    "content.contains(inputs.half)",
    "content.indexOf(inputs.half) >= 0",
    "content.lastIndexOf(inputs.half) >= 0",
    "content.indexOf(inputs.half, 10) >= 0",
    "size(content.split(inputs.half)) > 0",
    'size(content.replace(inputs.half, "z")) > 0',
    "content.contains(steps.a.content)",
    'content.contains(inputs.half + "y")',
    "content.contains(inputs.wide)",
    "inputs.words.exists(w, content.contains(w))",
    "content.matches(inputs.bomb)",
    'content.matches("^(" + inputs.bomb + ")")',
    "content.matches(inputs.unicode)",
    "inputs.ab.matches(inputs.ambiguous)",
]


@pytest.mark.parametrize("source", SEARCHES)
async def test_a_search_too_costly_for_its_data_is_refused_without_blocking(source: str) -> None:
    """500 KB needles, RE2 programs of thousands of instructions: each was seconds, now refused."""
    outcome, blocked = await evaluate_on_the_loop(source, data_activation())
    assert isinstance(outcome, ExpressionEvaluationError)
    assert str(outcome).startswith(repr(source)[:40])
    assert LIMIT in str(outcome)
    assert blocked < LOOP_LIMIT, f"the loop was held {blocked * 1000:.0f} ms of CPU"


@pytest.mark.parametrize(
    "source", ["content.matches(content)", "matches(steps.a.content, inputs.half)"]
)
async def test_a_regular_expression_from_data_past_4_kib_is_refused(source: str) -> None:
    """1 MB of data as a pattern: refused for its length, naming where it came from."""
    outcome, blocked = await evaluate_on_the_loop(source, data_activation())
    assert isinstance(outcome, ExpressionEvaluationError)
    message = str(outcome)
    assert "the regular expression from" in message
    assert "over the limit of 4,096 for a pattern that is not written in the workflow" in message
    assert blocked < LOOP_LIMIT


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("content.contains(inputs.near)", False),  # the largest needle 1 MB may be searched for
        ("content.lastIndexOf(inputs.near, 999999) >= 0", False),
        ("content.startsWith(inputs.half)", False),  # linear: any size
        ("content.endsWith(steps.a.content)", True),
        ("content.matches(inputs.small)", True),  # a short pattern from data on 1 MB
        ("content.matches('^(x+x+)+y$')", False),  # written in the workflow: the author's
        ("content.contains('APPROVED')", False),
    ],
)
async def test_searches_that_fit_still_run_and_leave_the_loop_free(
    source: str, expected: object
) -> None:
    outcome, blocked = await evaluate_on_the_loop(source, data_activation())
    assert outcome == expected
    assert blocked < LOOP_LIMIT, f"the loop was held {blocked * 1000:.0f} ms of CPU"


async def test_a_hostile_pattern_is_refused_on_a_megabyte_and_runs_on_a_kilobyte() -> None:
    """``((a|b){1000})c`` took 11 s on 1 MB; on 1 KB it is cheap, and it is allowed."""
    small = {"text": "ab" * 500, "pattern": "((a|b){1000})c"}
    assert (
        compile_expression("text.matches(pattern)", names=frozenset(small)).evaluate(small) is False
    )
    large = {**small, "text": "ab" * (DATA_SIZE // 2)}
    with pytest.raises(ExpressionEvaluationError, match=LIMIT):
        compile_expression("text.matches(pattern)", names=frozenset(large)).evaluate(large)


def test_a_pattern_computed_beyond_reading_back_is_refused_when_the_workflow_loads() -> None:
    """A comprehension variable or a function's result as a pattern cannot be measured."""
    with pytest.raises(ExpressionTooComplex, match="the pattern of matches\\(\\) is computed"):
        compile_expression("inputs.patterns.exists(p, content.matches(p))")
    with pytest.raises(ExpressionTooComplex):
        compile_expression("content.matches(string(inputs.n))")


@pytest.mark.parametrize(
    ("pattern", "instructions"),
    [
        # RE2's own ProgramSize for each (google-re2 1.1).
        ("x", 5),
        ("x" * 100, 104),
        ("((a|b){1000})c", 3007),
        ("a[ab]{1000}c", 1006),
        ("(x{10}){100}", 1204),
        ("[^y]{1000}", 8004),
        (".{1000}", 8004),
        ("x{2,5}", 12),
        ("\\pL", 1200),
        ("(?i)\\pL", 1201),
        ("[\\pL\\pN]", 1346),
        ("\\W", 15),
        ("(?i)k", 8),
        ("[\\x{0}-\\x{10FFFF}]", 11),
    ],
)
def test_the_program_bound_is_never_below_re2s_program(pattern: str, instructions: int) -> None:
    assert instructions <= program_bound(pattern) <= 50 * instructions


async def test_a_step_whose_condition_searches_for_a_huge_needle_fails_naming_it(
    write_flow: WriteFlow,
) -> None:
    path = write_flow(
        """
name: search
inputs:
  needle: {type: string}
steps:
  - id: grow
    command: python3 -c "print('x' * 1000000)"
  - id: check
    dependsOn: [grow]
    condition: 'steps.grow.content.contains(inputs.needle)'
    command: echo found
"""
    )
    result = await run_flow(path, inputs={"needle": "x" * 500_000 + "y"})
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.address == "check"
    assert "'steps.grow.content.contains(inputs.needle)': refused" in result.error.message
    assert LIMIT in result.error.message


async def test_a_loop_until_matching_a_pattern_from_data_fails_its_step(
    write_flow: WriteFlow,
) -> None:
    path = write_flow(
        """
name: bomb
inputs:
  pattern: {type: string}
steps:
  - id: grow
    command: python3 -c "print('ab' * 500000)"
    loop:
      maxIterations: 3
      until: 'content.matches(inputs.pattern)'
"""
    )
    result = await run_flow(path, inputs={"pattern": "((a|b){1000})c"})
    assert result.status == "failed"
    assert result.error is not None
    assert "'content.matches(inputs.pattern)': refused" in result.error.message
    assert LIMIT in result.error.message
