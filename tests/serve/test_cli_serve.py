"""`cadenza serve` as a user runs it: a real process, its address, its token, its exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

import cadenza.serve


@contextmanager
def serving(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """Runs ``cadenza serve ARGS`` until the block ends (SIGTERM); yields its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "cadenza", "serve", "--port", "0", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    try:
        line = process.stderr.readline()
        assert "listening on http://127.0.0.1:" in line, line
        yield line.split("listening on ", 1)[1].split()[0].rstrip(";").rstrip("/")
    finally:
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=30)
        assert process.returncode == 0, rest


def test_serve_answers_the_page_and_the_api_and_stops_cleanly(tmp_path: Path) -> None:
    """The page, the API; SIGTERM stops it with exit code 0."""
    with serving("--store", "runs.db", cwd=tmp_path) as url:
        page = httpx.get(f"{url}/")
        assert page.status_code == 200
        assert "Cadenza" in page.text
        assert httpx.get(f"{url}/api/runs").json()["runs"] == []
        assert httpx.get(f"{url}/static/js/main.js").status_code == 200


def test_serve_takes_its_token_from_the_environment(tmp_path: Path) -> None:
    """CADENZA_SERVE_TOKEN set: requests without it get 401, with it 200."""
    with serving(cwd=tmp_path, env={"CADENZA_SERVE_TOKEN": "from-env"}) as url:
        assert httpx.get(f"{url}/api/runs").status_code == 401
        headers = {"Authorization": "Bearer from-env"}
        assert httpx.get(f"{url}/api/runs", headers=headers).status_code == 200


def test_serve_refuses_a_public_address_without_a_token(tmp_path: Path) -> None:
    """--host 0.0.0.0 without a token: exit 2, one line that says what to do."""
    done = subprocess.run(
        [sys.executable, "-m", "cadenza", "serve", "--host", "0.0.0.0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "CADENZA_SERVE_TOKEN"},
        timeout=60,
    )
    assert done.returncode == 2
    assert "needs a token" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_package_exports_its_public_names() -> None:
    """Every public name of cadenza.serve is in __all__, sorted."""
    public = {name for name in vars(cadenza.serve) if not name.startswith("_")}
    assert set(cadenza.serve.__all__) == public
    assert cadenza.serve.__all__ == sorted(cadenza.serve.__all__)
