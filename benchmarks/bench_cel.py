"""CEL figures: evaluations per second of typical conditions, beside a plain-Python floor.

Each condition is measured the way the runtime uses it (compiled once, then
``evaluate_bool`` per decision; and through the memoized ``compile_expression``
call the runtime makes each time) on a typical run state and on a ~50 KB one
(forty earlier steps with 1 KB outputs). The floor is the same test written as
a Python lambda over the same dicts: what no expression engine can beat.
Template rendering is measured beside an f-string.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import msgspec

from _harness import Figure, best_of, now
from cadenza.workflow import compile_expression, parse_template

GROUP = "cel"
TARGET = 100_000

# Any: the conditions' Python floors index into the state freely.
State = dict[str, Any]


def typical_state() -> State:
    """What a condition sees mid-run: inputs, two steps, a single-step loop's output."""
    return {
        "inputs": {"topic": "loops", "maxScore": 10},
        "steps": {
            "build": {"content": "built", "result": None, "status": "completed"},
            "test": {
                "content": "12 passed",
                "result": {"exitCode": 0, "stdout": "12 passed\n", "stderr": ""},
                "status": "completed",
            },
        },
        "iteration": 2,
        "content": "Looks good to me. APPROVED",
        "result": None,
        "status": "completed",
    }


def big_state() -> State:
    """The typical state plus forty earlier steps: about 50 KB of JSON."""
    state = typical_state()
    steps = state["steps"]
    assert isinstance(steps, dict)
    for i in range(40):
        steps[f"earlier-{i}"] = {
            "content": "x" * 1000,
            "result": {"items": list(range(20)), "note": "y" * 50},
            "status": "completed",
        }
    return state


CONDITIONS: list[tuple[str, Callable[[State], bool]]] = [
    (
        "steps.test.result.exitCode == 0",
        lambda s: s["steps"]["test"]["result"]["exitCode"] == 0,
    ),
    ("content.contains('APPROVED')", lambda s: "APPROVED" in s["content"]),
]


def _lookup_and_evaluate(source: str, state: State) -> bool:
    """What the runtime does per decision: the memoized compile, then the evaluation."""
    return compile_expression(source).evaluate_bool(state)


def _rate(call: Callable[[], object], n: int, repeats: int) -> float:
    """Calls per second, the median of ``repeats`` timed batches of ``n``."""

    def batch() -> float:
        start = now()
        for _ in range(n):
            call()
        return now() - start

    return n / best_of(repeats, batch)


def run(quick: bool) -> list[Figure]:
    """Measure CEL evaluation; ``quick`` shrinks the batches for a smoke run."""
    n = 20_000 if quick else 200_000
    repeats = 3 if quick else 5
    figures = []
    for label, state in (("typical state", typical_state()), ("50 KB state", big_state())):
        size = len(msgspec.json.encode(state))
        assert label == "typical state" or size > 40_000
        for source, floor in CONDITIONS:
            expression = compile_expression(source)
            assert expression.evaluate_bool(state) is True
            raw = _rate(partial(floor, state), n, repeats)
            value = _rate(partial(expression.evaluate_bool, state), n, repeats)
            figures.append(
                Figure(GROUP, f"{source} on a {label}", value, "ops/s", raw,
                       "Python lambda", f">= {TARGET:,}/s", value >= TARGET)
            )  # fmt: skip
        # The runtime looks the expression up again for each decision.
        source, floor = CONDITIONS[0]
        raw = _rate(partial(floor, state), n, repeats)
        cached = _rate(partial(_lookup_and_evaluate, source, state), n, repeats)
        figures.append(
            Figure(GROUP, f"compile_expression (cached) + evaluate on a {label}", cached, "ops/s",
                   raw, "Python lambda", f">= {TARGET:,}/s", cached >= TARGET)
        )  # fmt: skip
    state = typical_state()
    inputs, steps = state["inputs"], state["steps"]
    # Paths alone are looked up in Python; a computed placeholder goes to the engine.
    templates: list[tuple[str, str, Callable[[], str]]] = [
        (
            "template render, two path placeholders",
            "Write about {{ inputs.topic }}; the test said {{ steps.test.content }}.",
            lambda: f"Write about {inputs['topic']}; the test said {steps['test']['content']}.",
        ),
        (
            "template render, a path and a computed placeholder",
            "Attempt {{ iteration + 1 }} on {{ inputs.topic }}.",
            lambda: f"Attempt {state['iteration'] + 1} on {inputs['topic']}.",
        ),
    ]
    for name, text, direct in templates:
        template = parse_template(text)
        assert template.render(state) == direct()
        raw = _rate(direct, n, repeats)
        rendered = _rate(partial(template.render, state), n, repeats)
        figures.append(
            Figure(GROUP, name, rendered, "ops/s", raw, "f-string", ">= 20,000/s",
                   rendered >= 20_000)
        )  # fmt: skip
    return figures
