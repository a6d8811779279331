"""Paths a workflow names: confined to its tree, never a traceback, never endless reads.

``include: /etc/shadow`` made validation quote a line of that file; an include
path longer than the OS allows, or holding a NUL byte, gave a traceback;
``cadenza validate /dev/zero`` read without limit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "cadenza"]
SECRET_LINE = "root:do-not-show-this-line"


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "validate", str(path)], capture_output=True, text=True, timeout=60, stdin=None
    )


def flow(tmp_path: Path, step: str) -> Path:
    path = tmp_path / "tree" / "flow.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"name: x\nsteps:\n  - id: a\n{step}")
    return path


@pytest.mark.parametrize(
    ("step", "words"),
    [
        ("    include: " + "a" * 5000 + ".yaml\n", "the path cannot be used"),
        ('    include: "a\\0b.yaml"\n', "NUL byte"),
    ],
)
def test_an_unusable_include_path_is_one_located_problem(
    tmp_path: Path, step: str, words: str
) -> None:
    done = validate(flow(tmp_path, step))
    assert done.returncode == 2
    assert ":4:5: steps[0].include:" in done.stderr
    assert words in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "step",
    [
        "    include: ../outside.yaml\n",
        '    instructions: "@../outside.yaml"\n',
        "    include: link.yaml\n",  # a link inside the tree that points out of it
    ],
)
def test_files_outside_the_tree_are_refused_unread(tmp_path: Path, step: str) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text(f"{SECRET_LINE}\n")
    path = flow(tmp_path, step)
    os.symlink(outside, path.parent / "link.yaml")
    done = validate(path)
    assert done.returncode == 2
    assert "leads outside the workflow's directory" in done.stderr
    assert "do-not-show" not in done.stdout + done.stderr


def test_an_include_inside_the_tree_still_works(tmp_path: Path) -> None:
    path = flow(tmp_path, "    include: parts/child.yaml\n")
    (path.parent / "parts").mkdir()
    (path.parent / "parts" / "child.yaml").write_text(
        "name: c\nsteps:\n  - {id: s, command: echo}\n"
    )
    done = validate(path)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_only_regular_files_are_read(tmp_path: Path, special: str) -> None:
    if special == "fifo":
        special = str(tmp_path / "fifo.yaml")
        os.mkfifo(special)
    done = validate(Path(special))
    assert done.returncode == 2
    assert "it is not a regular file" in done.stderr
    assert "Traceback" not in done.stderr
