"""One CEL evaluation is bounded in what it builds, not only in its iterations.

cel-cpp caps iterations; it does not cap the values an evaluation builds, and
it cannot be interrupted once it runs. ``content.replace("", content)`` on
40 KB of model output used to take 9 s and 3 GB. Now the work an evaluation
could need is bounded before it starts, and one over the limit fails its step
with a located error naming the limit.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from cadenza.errors import ExpressionEvaluationError
from cadenza.workflow import compile_expression
from tests._helpers import run_flow
from tests.conftest import WriteFlow

from .conftest import LOOP_LIMIT, run_child
from .hostile_cel import HOSTILE, corpus, data_corpus

HOSTILE_SCRIPT = Path(__file__).with_name("hostile_cel.py")


def test_every_hostile_expression_is_evaluated_or_refused_and_the_loop_stays_free() -> None:
    """The 300 builders on 100 KB, the fuzz suite's hostile set, and searches on 1 MB whose
    needle or pattern is data: each holds the event loop under 100 ms of CPU, and the
    process stays small."""
    child = run_child([str(HOSTILE_SCRIPT)], cwd=HOSTILE_SCRIPT.parent)
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout)
    results = report["results"]
    by_set = {name: [r for r in results if r["set"] == name] for name in ("bounds", "fuzz", "data")}
    assert [len(by_set[name]) for name in by_set] == [300, len(HOSTILE), len(data_corpus())]
    assert len(corpus()) == 300
    for name, entries in by_set.items():
        outcomes = Counter(entry["outcome"] for entry in entries)
        # "error": a documented evaluation error (a wrong type, an overflow), never a crash.
        assert set(outcomes) <= {"value", "refused", "error"}, (name, outcomes)
        assert outcomes["refused"] > 0, name
        assert outcomes["value"] > 0, name
    assert report["rssGrowthKiB"] < 64 * 1024
    slowest = max(results, key=lambda entry: entry["loopMs"])
    assert slowest["loopMs"] < LOOP_LIMIT * 1000, slowest
    searches = [entry for entry in by_set["data"] if "half" in entry["source"]]
    assert {entry["outcome"] for entry in searches if "With" not in entry["source"]} == {"refused"}


@pytest.mark.parametrize(
    "source",
    [
        'content.replace("", content) != ""',
        "[1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b,"
        " [1,2,3,4,5,6,7,8,9,10].map(c, content + content))).size() > 0",
        "inputs.items.map(i, i * 2).size() > 0",
    ],
)
def test_a_costly_evaluation_is_refused_naming_the_limit(source: str) -> None:
    expression = compile_expression(source)
    activation = {"content": "x" * 100_000, "inputs": {"items": list(range(8_000))}}
    with pytest.raises(ExpressionEvaluationError) as raised:
        expression.evaluate(activation)
    assert "over the limit of 32 Mi per evaluation" in str(raised.value)
    assert str(raised.value).startswith(f"'{source[:40]}")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('content.replace("\\n", " ").contains("x")', True),
        ("inputs.items.exists(i, i == 4999)", True),
        ("inputs.items.map(i, i * 2).size() == 1000", True),
        ('[1, 2, 3].map(a, content + "!").size() == 3', True),
    ],
)
def test_ordinary_expressions_on_large_values_still_evaluate(source: str, expected: bool) -> None:
    activation = {"content": "x" * 100_000, "inputs": {"items": list(range(1_000))}}
    if "4999" in source:
        activation["inputs"] = {"items": list(range(5_000))}
    assert compile_expression(source).evaluate(activation) is expected


async def test_a_loop_whose_until_would_explode_fails_its_step_with_the_location(
    write_flow: WriteFlow,
) -> None:
    path = write_flow(
        """
name: bomb
steps:
  - id: grow
    command: python3 -c "print('x' * 40000)"
    loop:
      maxIterations: 3
      until: 'content.replace("", content) != ""'
"""
    )
    result = await run_flow(path)
    assert result.status == "failed"
    assert result.error is not None
    assert "over the limit of 32 Mi per evaluation" in result.error.message
    assert 'content.replace("", content)' in result.error.message
