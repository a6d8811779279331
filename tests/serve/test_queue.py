"""``POST /api/runs`` with ``"queue": true``: the run waits, queued, for a server that pulls.

One server (no ``--recover``) queues a run and lists it ``queued``; nothing
starts it there. A second server on the same PostgreSQL store, with recovery
and a capacity, takes it from the queue and drives it to completion.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from cadenza.serve import BackgroundServer, ServeOptions

from .conftest import write
from .test_replicas import status_becomes

ECHO = """
name: echo
steps:
  - id: say
    command: echo queued-and-done
"""


def test_a_run_queued_through_one_server_is_started_by_the_one_that_pulls(
    postgres_url: str, tmp_path: Path
) -> None:
    write(tmp_path, "echo.yaml", ECHO)
    front = ServeOptions(store=postgres_url, root=tmp_path, port=0, poll=0.05)
    with BackgroundServer(front) as a, httpx.Client(base_url=a.url, headers=a.headers) as client:
        queued = client.post(
            "/api/runs",
            json={"path": "echo.yaml", "runId": "later", "queue": True, "priority": 3},
        )
        assert queued.status_code == 201, queued.text
        assert queued.json()["status"] == "queued"
        listed = client.get("/api/runs", params={"status": "queued"}).json()
        assert [run["runId"] for run in listed["runs"]] == ["later"]
        assert client.get("/api/runs/later").json()["status"] == "queued"

        puller = ServeOptions(
            store=postgres_url, root=tmp_path, port=0, poll=0.05, recover=True, capacity=2
        )
        with BackgroundServer(puller):
            status_becomes(client, "later", "completed")
        result = client.get("/api/runs/later/result").json()
        assert result["output"] == "queued-and-done\n"
