"""Handlers for the loop, forEach and graph examples: plain Python functions.

A handler takes a `cadenza.StepContext` and returns a string (the step's
content) or a dict (its result, with the JSON as content). Inside loops the
context says where it is: ``iteration`` (repeat-until), ``item``/``index``
(forEach), and ``brief`` (revision feedback, the graph state that routed here).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from cadenza import StepContext

# -- retry-until-valid ------------------------------------------------------------


def produce_config(context: StepContext) -> dict[str, Any]:
    """A flaky producer: broken output first, then too small, then good."""
    if context.iteration == 0:
        raise ValueError("upstream returned truncated JSON")
    return {"replicas": 1 if context.iteration == 1 else 3, "image": "app:1.4"}


# -- test -> fix -> retest --------------------------------------------------------

BUGGY_CALC = '''"""A tiny module with two bugs for the test-fix-retest example."""


def add(a: int, b: int) -> int:
    return a - b


def mean(values: list[float]) -> float:
    return sum(values) / (len(values) + 1)
'''

TESTS = """from calc import add, mean


def test_add() -> None:
    assert add(2, 3) == 5


def test_add_negative() -> None:
    assert add(-1, 1) == 0


def test_mean() -> None:
    assert mean([1.0, 2.0, 3.0]) == 2.0
"""

# What "fixing" means here: one known patch per failing test, applied one per round.
FIXES = {
    "test_add": ("return a - b", "return a + b"),
    "test_mean": ("/ (len(values) + 1)", "/ len(values)"),
}


def make_workspace(context: StepContext) -> str:
    """Copies the buggy module and its tests into a fresh scratch directory."""
    workdir = Path(tempfile.mkdtemp(prefix="cadenza-test-fix-"))
    (workdir / "calc.py").write_text(BUGGY_CALC)
    (workdir / "test_calc.py").write_text(TESTS)
    return str(workdir)


async def run_pytest(context: StepContext) -> dict[str, Any]:
    """Runs the real pytest on the workspace; the result says what failed."""
    workdir = context.steps["workspace"].content or "."
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        workdir,
        cwd=workdir,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    text = output.decode(errors="replace")
    failed = sorted(set(re.findall(r"FAILED \S*::(\w+)", text)))
    summary = text.strip().splitlines()[-1] if text.strip() else ""
    return {"exitCode": process.returncode, "failed": failed, "summary": summary}


def fix_one_bug(context: StepContext) -> str:
    """Patches the bug behind the first failing test (one fix per round)."""
    workdir = Path(context.steps["workspace"].content or ".")
    failed: list[str] = context.steps["test"].result["failed"]
    module = workdir / "calc.py"
    for test in failed:
        patch = FIXES.get(test) or FIXES.get(test.rsplit("_", 1)[0])
        if patch is not None and patch[0] in module.read_text():
            module.write_text(module.read_text().replace(*patch))
            return f"fixed the bug behind {test}: {patch[0]!r} -> {patch[1]!r}"
    return "nothing I know how to fix"


def report(context: StepContext) -> str:
    """Says how the repair loop ended, and removes the scratch directory."""
    shutil.rmtree(context.steps["workspace"].content or "", ignore_errors=True)
    result = context.steps["repair"].result or {}
    return f"green: {result.get('summary', '')}"


# -- forEach deploy ---------------------------------------------------------------


def list_services(context: StepContext) -> dict[str, Any]:
    """The services to deploy (a real one would ask a registry)."""
    return {"services": ["auth", "billing", "search", "email"]}


async def deploy(context: StepContext) -> str:
    """Deploys one service; ``item`` and ``index`` say which."""
    await asyncio.sleep(0)
    return f"deployed {context.item} (#{context.index}) to {context.inputs['environment']}"


def summarize_deploys(context: StepContext) -> str:
    """One line over every iteration of the forEach."""
    iterations = context.steps["deploy-each"].result["iterations"]
    done = [str(i["item"]) for i in iterations if i["status"] == "completed"]
    return f"{len(done)} services deployed: {', '.join(done)}"


# -- tool router ------------------------------------------------------------------


def search(context: StepContext) -> str:
    """A search tool; the brief says which state routed here."""
    return f"search (asked by {context.brief.routed_from}): the answer is six times seven"
