"""Data nested too deeply for a run is refused where it enters, never reaches CEL.

The CEL engine crashes the process on values nested 5,000-10,000 deep
(docs/cel-engine.md), so everything entering a run's state passes through msgspec
first: run inputs (Python API, ``--input``, ``--inputs-file``) and handler results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cadenza import InputError, Runtime
from tests._helpers import run_flow
from tests.conftest import WriteFlow

from .conftest import run_child

FLOW = """
name: deep
inputs:
  x: {type: any}
steps:
  - id: look
    command: printf ok
    condition: "size(inputs.x) > 0"
"""


def deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


async def test_deep_inputs_through_the_api_are_an_input_error(write_flow: WriteFlow) -> None:
    """10,000 levels of nesting: `InputError` before the run starts, and no run is stored."""
    path = write_flow(FLOW)
    async with Runtime() as runtime:
        with pytest.raises(InputError, match="nests too deeply"):
            await runtime.run(path, inputs={"x": deep(10_000)})
        with pytest.raises(InputError, match="not JSON data"):
            await runtime.run(path, inputs={"x": [object()]})
        assert await runtime.list_runs() == []
        result = await runtime.run(path, inputs={"x": deep(500)})  # deep, but data
    assert result.status == "completed", result.error


def test_deep_inputs_on_the_command_line_exit_2(write_flow: WriteFlow, tmp_path: Path) -> None:
    """``--input`` and ``--inputs-file`` nested 10,000 deep: exit 2, one line, no traceback."""
    write_flow(FLOW)
    (tmp_path / "inputs.yaml").write_text("x: " + "[" * 10_000 + "]" * 10_000 + "\n")
    for option in (
        ["--input", "x=" + "[" * 10_000 + "]" * 10_000],
        ["--inputs-file", "inputs.yaml"],
    ):
        child = run_child(
            ["-m", "cadenza", "run", "flow.yaml", "--store", "runs.db", *option], cwd=tmp_path
        )
        assert child.returncode == 2, child.stderr[-2000:]
        assert "Traceback" not in child.stderr
        assert "nests too deeply" in child.stderr


async def test_a_handler_returning_deep_data_fails_its_step(write_flow: WriteFlow) -> None:
    """A result nested 10,000 deep fails the step with a message; later CEL never sees it."""
    path = write_flow(
        """
name: deep-result
steps:
  - id: make
    handler: "HANDLERS:make"
  - id: read
    dependsOn: [make]
    command: printf never
    condition: "size(steps.make.result.v) > 0"
""",
        handlers="""
def make(ctx):
    value = []
    for _ in range(10_000):
        value = [value]
    return {"v": value}
""",
    )
    result = await run_flow(path)
    assert result.status == "failed"
    make = result.steps["make"]
    assert make.status == "failed"
    assert make.error is not None
    assert "recursion" in make.error.message.lower()
    assert "read" not in result.steps or result.steps["read"].status != "completed"
