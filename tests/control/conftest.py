"""Fixtures for the control-loop tests: a loop's workflow file with its child workflows."""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

_modules = itertools.count()

PLANNER = """
name: planner
inputs: {objective: {}, criteria: {}, feedback: {}, history: {}}
steps: [{id: plan, handler: "HANDLERS:plan"}]
output: steps.plan.result
"""

ACTOR = """
name: actor
inputs: {objective: {}, plan: {}, feedback: {}, iteration: {type: integer}}
steps: [{id: act, handler: "HANDLERS:act"}]
output: steps.act.result
"""

DELEGATE = """
name: delegate
inputs: {objective: {}, plan: {}, feedback: {}, iteration: {type: integer}}
steps: [{id: act, handler: "HANDLERS:delegate"}]
output: steps.act.result
"""

EVALUATOR = """
name: evaluator
inputs: {objective: {}, criteria: {}, result: {type: object}}
steps: [{id: judge, handler: "HANDLERS:judge"}]
output: steps.judge.result
"""

CHILDREN = {
    "planner.yaml": PLANNER,
    "actor.yaml": ACTOR,
    "delegate.yaml": DELEGATE,
    "evaluator.yaml": EVALUATOR,
}

ControlFlow = Callable[..., Path]


def task(
    *control: str,
    step: str = "",
    inputs: str = "",
    objective: str = "Do it",
    actor: str = "actor.yaml",
) -> str:
    """A workflow whose one step, ``task``, is a control loop of ``actor`` judged by
    ``evaluator.yaml``.

    ``control`` are lines added under ``control:`` (indent nested ones by two
    spaces), ``step`` a line added to the step, ``inputs`` the workflow's inputs
    (a flow map).
    """
    head = ["name: control", *([f"inputs: {inputs}"] if inputs else []), "steps:", "  - id: task"]
    loop = [f'objective: "{objective}"', f"actor: {actor}", "evaluator: evaluator.yaml", *control]
    body = [*([f"    {step}"] if step else []), "    control:", *(f"      {line}" for line in loop)]
    return "\n".join([*head, *body, ""])


@pytest.fixture
def control_flow(tmp_path: Path) -> ControlFlow:
    """Writes a control workflow, its child workflows and a handler module; returns its path.

    The standard children (``planner.yaml``, ``actor.yaml``, ``delegate.yaml``,
    ``evaluator.yaml``) call the handlers ``plan``, ``act``, ``delegate`` and
    ``judge``; ``children`` adds or replaces files. ``HANDLERS`` in any file
    becomes the handler module's unique name.
    """

    def write(flow: str, *, handlers: str = "", children: dict[str, str] | None = None) -> Path:
        module = f"control_handlers_{next(_modules)}"
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(handlers))
        for name, text in {**CHILDREN, **(children or {})}.items():
            (tmp_path / name).write_text(textwrap.dedent(text).replace("HANDLERS", module))
        path = tmp_path / "flow.yaml"
        path.write_text(textwrap.dedent(flow).replace("HANDLERS", module))
        return path

    return write
