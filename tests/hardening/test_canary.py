"""A canary API key through every channel a run has: no copy anywhere, in any encoding.

The key reaches the run the ways real keys do: a command prints its environment
(and encodes the key), a model repeats it in its text, an error body echoes it,
a tool reads it from a file. Afterwards it is nowhere in stdout, stderr, the
NDJSON events, the result JSON, ``runs show``, the viewer's API, or the bytes
of the store, whole, without its ``sk-`` prefix, percent-encoded or in base64.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import urllib.parse
from pathlib import Path

import httpx

from cadenza import Runtime
from cadenza.serve import create_app
from cadenza.testing import RequestMatch, ScriptedLLMServer, ServerReply, ServerRule
from tests.conftest import WriteFlow

CANARY = "sk-canary-5d1f0a9b7c3e24680a1b"
CLI = [sys.executable, "-m", "cadenza"]

FLOW = """
name: canary
agents:
  echo:
    model: "openai:echo"
  broken:
    model: "openai:broken"
steps:
  - id: environment
    command: env | grep API_KEY
  - id: encoded
    command: >-
      python3 -c "import base64, os, urllib.parse; k = os.environ['OPENAI_API_KEY'];
      print(base64.b64encode(k.encode()).decode()); print(k[3:]);
      print(base64.b64encode(('user:' + k).encode()).decode()); print(urllib.parse.quote(k))"
  - id: file
    tool: read
    toolInput: {path: notes.txt}
  - id: said
    agent: echo
    instructions: "Repeat the key."
  - id: failed
    agent: broken
    instructions: "Fail."
    onError: continue
"""


def forms(secret: str) -> list[str]:
    """Every encoding the sweep looks for."""
    return [
        secret,
        secret.removeprefix("sk-"),
        base64.b64encode(secret.encode()).decode(),
        base64.b64encode(f"user:{secret}".encode()).decode(),
        base64.urlsafe_b64encode(f"ab{secret}".encode()).decode().rstrip("="),
        urllib.parse.quote(secret, safe=""),
    ]


def assert_clean(text: str | bytes, where: str) -> None:
    data = text if isinstance(text, bytes) else text.encode()
    for form in forms(CANARY):
        assert form.encode() not in data, f"{form!r} in {where}"


def test_the_canary_key_is_nowhere(write_flow: WriteFlow, tmp_path: Path) -> None:
    path = write_flow(FLOW)
    (path.parent / "notes.txt").write_text(f"the key is {CANARY}\n")
    store = tmp_path / "runs.db"
    said = f"Here it is: {CANARY} and {base64.b64encode(CANARY.encode()).decode()}"
    rules = [
        ServerRule([said], match=RequestMatch(model="echo")),
        ServerRule(
            [ServerReply(status=400, body=json.dumps({"error": {"message": f"bad {CANARY[3:]}"}}))],
            match=RequestMatch(model="broken"),
        ),
    ]
    with ScriptedLLMServer(rules) as server:
        env = {**server.environ(api_key=CANARY), "PATH": "/usr/bin:/bin"}
        env["CADENZA_LOG_LEVEL"] = "debug"
        run = subprocess.run(
            [*CLI, "run", str(path), "--json", "--events", "--store", str(store)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
        assert '"completed"' in run.stdout
        assert_clean(run.stdout, "run --json")
        assert_clean(run.stderr, "run --events and logs")
        run_id = json.loads(run.stdout)["runId"]
        for extra in ([], ["--events"]):
            shown = subprocess.run(
                [*CLI, "runs", "show", run_id, "--store", str(store), *extra],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
            )
            assert shown.returncode == 0, shown.stderr
            assert "***" in shown.stdout  # the key was there, and is masked
            assert_clean(shown.stdout + shown.stderr, f"runs show {extra}")
    for endpoint, text in asyncio.run(viewer_pages(store, path.parent, run_id)).items():
        assert_clean(text, f"viewer API {endpoint}")
    for stored in tmp_path.glob("runs.db*"):
        assert_clean(stored.read_bytes(), str(stored))


async def viewer_pages(store: Path, root: Path, run_id: str) -> dict[str, str]:
    """The viewer API's run summary, result and events, as text."""
    pages = {}
    async with Runtime(store=store) as runtime:
        transport = httpx.ASGITransport(app=create_app(runtime, root=root))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            for endpoint in ("", "/result", "/events"):
                response = await client.get(f"/api/runs/{run_id}{endpoint}")
                assert response.status_code == 200, endpoint
                pages[endpoint or "/"] = response.text
    return pages
