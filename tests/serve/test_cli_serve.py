"""`cadenza serve` as a user runs it: a real process, its address, its token, its exit."""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx

import cadenza.serve
from cadenza.serve import Limits
from tests._helpers import assert_refused
from tests._helpers import cadenza as cadenza_cli

from .conftest import SCRIPTED, write
from .test_live import messages

NO_TOKEN_ENV = {k: v for k, v in os.environ.items() if k != "CADENZA_SERVE_TOKEN"}


@dataclass(frozen=True)
class Served:
    """A running ``cadenza serve``: what it printed, split up, and its process."""

    line: str  # the line it printed once listening
    url: str  # http://127.0.0.1:PORT
    token: str | None  # the token in the printed address, if it showed one
    process: subprocess.Popen[str]

    @property
    def headers(self) -> dict[str, str]:
        """The printed token as a bearer header."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


@contextmanager
def serving(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Iterator[Served]:
    """Runs ``cadenza serve ARGS`` until the block ends (SIGTERM); yields what it printed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "cadenza", "serve", "--port", "0", *args],
        cwd=cwd,
        env={**NO_TOKEN_ENV, **(env or {})},
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    rest: list[str] = []
    # Read on, or a server that logs much (a flood's warnings) would block on a full pipe.
    reader = threading.Thread(target=lambda: rest.extend(process.stderr or ()), daemon=True)
    try:
        line = process.stderr.readline()
        assert "listening on http://127.0.0.1:" in line, line
        reader.start()
        address = urlsplit(line.split("listening on ", 1)[1].split()[0])
        assert address.path == "/", line
        token = parse_qs(address.query).get("token", [None])[0]
        yield Served(line, f"{address.scheme}://{address.netloc}", token, process)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
        if reader.ident is not None:
            reader.join(timeout=30)
        process.stderr.close()
        assert process.returncode == 0, "".join(rest)


def test_serve_answers_the_page_and_the_api_and_stops_cleanly(tmp_path: Path) -> None:
    """The page (by the printed address), the API; SIGTERM stops it with exit code 0."""
    with serving("--store", "runs.db", cwd=tmp_path) as served:
        with httpx.Client() as browser:
            page = browser.get(served.line.split("listening on ", 1)[1].split()[0])
            assert page.status_code == 200
            assert "Cadenza" in page.text
            assert browser.get(f"{served.url}/api/runs").json()["runs"] == []  # by its cookie
        assert httpx.get(f"{served.url}/static/js/main.js", headers=served.headers).is_success


def test_serve_makes_a_token_and_refuses_requests_without_it(tmp_path: Path) -> None:
    """No flags: a random token, shown in the address; without it, 401 for everything."""
    with serving("--store", "runs.db", cwd=tmp_path) as served:
        assert served.token is not None
        assert len(served.token) >= 32
        for path in ("/", "/api/runs", "/openapi.json", "/static/js/main.js"):
            assert httpx.get(f"{served.url}{path}").status_code == 401, path
        refused = httpx.post(f"{served.url}/api/runs", json={"path": "x.yaml"})
        assert refused.status_code == 401
        assert httpx.get(f"{served.url}/api/runs", headers=served.headers).status_code == 200
    with serving("--store", "runs.db", cwd=tmp_path) as again:
        assert again.token != served.token  # made anew at each start
        assert httpx.get(f"{again.url}/api/runs", headers=served.headers).status_code == 401


def test_a_local_process_without_the_token_cannot_approve_a_human_step(tmp_path: Path) -> None:
    """The probe's attack: answer a waiting `human:` step. Without the token (none,
    wrong, other case, in the query of a POST, in a cookie as is) it is refused and the
    run still waits; the event stream refuses it too. With the token it goes through."""
    write(tmp_path, "review.yaml", SCRIPTED)
    with serving("--store", "runs.db", cwd=tmp_path) as served, httpx.Client() as attacker:
        assert served.token is not None
        with httpx.Client(base_url=served.url, headers=served.headers, timeout=30) as owner:
            started = owner.post("/api/runs", json={"path": "review.yaml", "runId": "r"})
            assert started.status_code == 201, started.text
            with owner.stream("GET", "/api/runs/r/events/stream") as response:
                end = [m for m in messages(response) if m.get("event") == "end"]
            assert '"waiting"' in end[0]["data"]

            answer = {"address": "approve", "data": {"publish": True}}
            signal_url = f"{served.url}/api/runs/r/signal"
            forged = [
                {},
                {"Authorization": "Bearer wrong"},
                {"Authorization": f"Bearer {served.token.upper()}"},
                {"Authorization": f"Bearer {served.token.swapcase()}"},
                {"Authorization": f"Bearer {served.token[:-1]}"},
                {"Authorization": f"Bearer {served.token}x"},
                {"Authorization": f"Basic {served.token}"},
                {"Cookie": f"cadenza_token={served.token}"},
            ]
            for headers in forged:
                refused = attacker.post(signal_url, json=answer, headers=headers)
                assert refused.status_code == 401, headers
                stream = attacker.get(f"{served.url}/api/runs/r/events/stream", headers=headers)
                assert stream.status_code == 401, headers
            in_query = attacker.post(signal_url, params={"token": served.token}, json=answer)
            assert in_query.status_code == 401  # the address trades for a cookie on GET only
            assert owner.get("/api/runs/r").json()["status"] == "waiting"
            assert [q["address"] for q in owner.get("/api/runs/r/inputs").json()] == ["approve"]

            accepted = owner.post("/api/runs/r/signal", json=answer)
            assert accepted.status_code == 202, accepted.text
            with owner.stream("GET", "/api/runs/r/events/stream") as response:
                end = [m for m in messages(response) if m.get("event") == "end"]
            assert '"completed"' in end[0]["data"]


def test_serve_takes_its_token_from_the_environment(tmp_path: Path) -> None:
    """CADENZA_SERVE_TOKEN set: requests without it get 401, with it 200; never printed."""
    with serving(cwd=tmp_path, env={"CADENZA_SERVE_TOKEN": "from-env-0123456789"}) as served:
        assert served.token is None
        assert "from-env" not in served.line
        assert httpx.get(f"{served.url}/api/runs").status_code == 401
        headers = {"Authorization": "Bearer from-env-0123456789"}
        assert httpx.get(f"{served.url}/api/runs", headers=headers).status_code == 200


def test_no_token_is_an_explicit_choice_on_loopback(tmp_path: Path) -> None:
    """--no-token: requests need none, and the banner says so."""
    with serving("--no-token", cwd=tmp_path) as served:
        assert served.token is None
        assert "no token" in served.line
        assert httpx.get(f"{served.url}/api/runs").status_code == 200


def test_serve_refuses_no_token_on_a_public_address(tmp_path: Path) -> None:
    """--host 0.0.0.0 --no-token: exit 2, one line that says why; no traceback."""
    done = cadenza_cli("serve", "--host", "0.0.0.0", "--no-token", cwd=tmp_path, env=NO_TOKEN_ENV)
    assert_refused(done, "--no-token is allowed on a loopback address only")


def test_serve_documents_the_limits_defaults_it_leaves_to_cadenza_serve() -> None:
    """`cadenza serve --help` names the defaults `Limits` has (the CLI cannot import it)."""
    done = subprocess.run(
        [sys.executable, "-m", "cadenza", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    text = " ".join(done.stdout.split())
    limits = Limits()
    assert f"larger ones get 413 (default: {limits.max_body})" in text
    assert f"more get 503 (default: {limits.max_streams})" in text
    assert f"on more get 503 (default: {limits.max_connections})" in text
    assert f"slower ones get 408 (default: {limits.request_timeout:g})" in text


def test_serve_package_exports_its_public_names() -> None:
    """Every public name of cadenza.serve is in __all__, sorted (its module
    cadenza.serve.mcp, once imported, is an attribute but no name of it)."""
    public = {
        name
        for name, value in vars(cadenza.serve).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert set(cadenza.serve.__all__) == public
    assert cadenza.serve.__all__ == sorted(cadenza.serve.__all__)


PRICED = """\
name: priced
options: {maxCost: 1.0}
agents:
  writer: {prompt: "You write.", script: ["a draft"]}
steps:
  - {id: write, agent: writer, instructions: "Write."}
"""


def test_serve_prices_the_runs_it_starts_from_its_prices_file(tmp_path: Path) -> None:
    """A workflow under a cost budget on an unpriced model is refused (422) by a server
    without prices, and runs, its call priced, on one started with ``--prices FILE``."""
    (tmp_path / "priced.yaml").write_text(PRICED)
    (tmp_path / "prices.yaml").write_text("scripted: {input: 1000, output: 1000}\n")
    with serving("--store", "runs.db", cwd=tmp_path) as served:
        refused = httpx.post(
            f"{served.url}/api/runs", json={"path": "priced.yaml"}, headers=served.headers
        )
        assert refused.status_code == 422, refused.text
        assert any("no price" in p for p in refused.json()["error"]["problems"]), refused.text
    with serving("--store", "runs.db", "--prices", "prices.yaml", cwd=tmp_path) as served:
        started = httpx.post(
            f"{served.url}/api/runs",
            json={"path": "priced.yaml", "runId": "priced"},
            headers=served.headers,
        )
        assert started.status_code == 201, started.text
        result = httpx.get(f"{served.url}/api/runs/priced/result", headers=served.headers).json()
        for _ in range(600):  # a bound for a hang only: the run is one scripted call
            if result["status"] != "running":
                break
            time.sleep(0.05)
            result = httpx.get(
                f"{served.url}/api/runs/priced/result", headers=served.headers
            ).json()
    assert result["status"] == "completed", result
    assert result["usage"]["cost"] > 0
