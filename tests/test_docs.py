"""The quick start runs as written: every block of docs/quickstart.md, in order."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parent.parent / "docs" / "quickstart.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)
FILE = re.compile(r"^# file: (\S+)\n")


def test_every_quickstart_block_runs(tmp_path: Path) -> None:
    """sh blocks exit 0, python blocks run, file blocks are written where they say."""
    bin_dir = Path(sys.executable).parent
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    ran = 0
    for language, body in BLOCK.findall(QUICKSTART.read_text()):
        named = FILE.match(body)
        if named is not None:
            (tmp_path / named.group(1)).write_text(body)
            continue
        if language == "sh":
            for line in body.strip().splitlines():
                if line.startswith("pip install"):
                    continue  # the test runs inside an installed environment
                proc = subprocess.run(
                    line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True
                )
                assert proc.returncode == 0, (line, proc.stdout, proc.stderr)
                assert "Traceback" not in proc.stderr, (line, proc.stderr)
                ran += 1
        elif language == "python":
            proc = subprocess.run(
                [sys.executable, "-c", body], cwd=tmp_path, env=env, capture_output=True, text=True
            )
            assert proc.returncode == 0, proc.stderr
            ran += 1
    assert ran >= 8


README = QUICKSTART.parent.parent / "README.md"
PATH_LIKE = re.compile(r"(?<![\w'\[])(?:[\w.-]*/[\w./-]+|[\w.-]+\.(?:py|txt|toml|sh))")


def test_the_readme_development_commands_name_files_of_this_repository() -> None:
    """A clone can run what README's Development section says: no file outside it."""
    root = README.parent.resolve()
    section = README.read_text().split("## Development", 1)[1]
    commands = BLOCK.search(section)
    assert commands is not None
    assert commands.group(1) == "sh"
    named = [
        token
        for line in commands.group(2).splitlines()
        for token in PATH_LIKE.findall(line.split(" #", 1)[0])
    ]
    assert named  # the check sees the files the commands name
    for token in named:
        path = (root / token).resolve()
        assert path.is_relative_to(root), f"README names {token!r}, outside the repository"
        assert path.exists(), f"README names {token!r}, which does not exist"
