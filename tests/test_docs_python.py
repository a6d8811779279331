"""Every Python snippet in docs/ runs as written.

A block that starts with ``# file: NAME`` is a file another block or command
uses (written, not run). A block right after ``<!-- not-runnable: why -->`` is
a fragment on purpose and is skipped, reason given. A block that defines
``test_`` functions is run by pytest. Any other block runs as a script from the
project's root (so ``examples/`` is there); if it defines a Starlette ``app``,
the app is also started with its lifespan and must answer ``/runs/api/runs``.
docs/quickstart.md is a walk-through run block by block, in order, by
test_docs.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(
    r"(?:<!-- not-runnable: (?P<why>[^>]+?) -->\n)?```python\n(?P<code>.*?)```", re.S
)

SERVE_APP = """
import runpy, sys
from starlette.testclient import TestClient

names = runpy.run_path(sys.argv[1])
with TestClient(names["app"], base_url="http://127.0.0.1") as client:  # runs the lifespan
    response = client.get("/runs/api/runs")
    assert response.status_code == 200, (response.status_code, response.text)
"""


def snippets() -> list[tuple[str, str]]:
    found = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name == "quickstart.md":
            continue  # a walk-through whose blocks build on each other: test_docs.py
        for number, match in enumerate(BLOCK.finditer(page.read_text()), 1):
            code = match.group("code")
            if match.group("why") or code.startswith("# file: "):
                continue
            found.append((f"{page.name}#{number}", code))
    return found


@pytest.mark.parametrize(("where", "code"), snippets(), ids=[w for w, _ in snippets()])
def test_the_snippet_runs(where: str, code: str, tmp_path: Path) -> None:
    script = tmp_path / ("test_snippet.py" if "def test_" in code else "snippet.py")
    script.write_text(code)
    if "def test_" in code:
        # As a reader runs it: no project configuration (asyncio_mode), nothing but what
        # the snippet says; and every test must pass, none skipped.
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"]
        command += ["--rootdir", str(tmp_path), str(script)]
    elif "Starlette(" in code:
        command = [sys.executable, "-c", SERVE_APP, str(script)]
    else:
        command = [sys.executable, str(script)]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, f"{where}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert "skipped" not in done.stdout, f"{where}\n{done.stdout[-2000:]}"


def test_every_skipped_snippet_says_why() -> None:
    """The escape hatch stays visible: a reason per fragment, and few of them."""
    skipped = [
        match.group("why")
        for page in (ROOT / "docs").glob("*.md")
        for match in BLOCK.finditer(page.read_text())
        if match.group("why")
    ]
    assert all(len(why) > 10 for why in skipped)
    assert len(skipped) <= 5
