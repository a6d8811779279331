"""The import contracts of pyproject.toml hold, and `lint-imports` refuses a tree that breaks one.

.ci/run runs ``lint-imports`` on the project; these tests run it on a copy of
``src/cadenza`` with a violation planted, to show the contracts are not
vacuous: a lower layer importing a higher one, a private module imported from
another package, and a circle between two modules.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(project: Path) -> subprocess.CompletedProcess[str]:
    command = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "NO_COLOR": "1"}
    return subprocess.run(
        [command, "--config", str(project / "pyproject.toml"), "--no-cache"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "src" / "cadenza", tmp_path / "src" / "cadenza")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def plant(project: Path, module: str, line: str) -> None:
    path = project / "src" / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_tree_keeps_every_contract(project: Path) -> None:
    checked = lint_imports(project)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "0 broken" in checked.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        (
            "cadenza.kernel._clock",
            "import cadenza.cli  # noqa",
            "Layers: a package imports only the packages below it BROKEN",
        ),
        (
            "cadenza.actors.run._journal",
            "from cadenza.actors.steps import StepActor  # noqa",
            "actors: the run's roles, each on the ones below BROKEN",
        ),
        (
            "cadenza.serve._routes",
            "from cadenza.api._resume import prepare_resume  # noqa",
            "Private modules are imported only inside their own package BROKEN",
        ),
        (
            "cadenza.workflow._yaml",
            "from cadenza.workflow import _loader  # noqa",
            "No import circles between sibling modules or packages BROKEN",
        ),
        (  # an import for annotations only counts too
            "cadenza.kernel._clock",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import cadenza.cli  # noqa",
            "Layers: a package imports only the packages below it BROKEN",
        ),
        (
            "cadenza.actors.run._journal",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from cadenza.actors.steps import StepActor  # noqa",
            "actors: the run's roles, each on the ones below BROKEN",
        ),
    ],
)
def test_a_planted_violation_breaks_its_contract(
    project: Path, module: str, line: str, contract: str
) -> None:
    plant(project, module, line)
    checked = lint_imports(project)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert contract in checked.stdout
