"""Two `cadenza serve` replicas on one PostgreSQL store act as one service.

A run started through one replica is followed live, answered and cancelled
through the other: the events come from the store, the answer is recorded and
the run resumed where it was asked, and the cancel travels through the store to
the replica that drives the run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from cadenza.serve import BackgroundServer, ServeOptions

from .conftest import SCRIPTED, write, write_parked
from .test_live import messages, until_step_starts

DEADLINE = 30.0


def status_becomes(client: httpx.Client, run_id: str, status: str) -> None:
    """Polls the run until it has ``status``; fails after `DEADLINE` seconds."""
    give_up = time.monotonic() + DEADLINE
    while (seen := client.get(f"/api/runs/{run_id}").json()["status"]) != status:
        assert time.monotonic() < give_up, f"{run_id} is still {seen}, not {status}"
        time.sleep(0.05)


@contextmanager
def replicas(postgres_url: str, root: Path) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """Two servers on one database, and a client of each."""
    options = ServeOptions(store=postgres_url, root=root, port=0, poll=0.05)
    with (
        BackgroundServer(options) as a,
        BackgroundServer(options) as b,
        httpx.Client(base_url=a.url, headers=a.headers) as first,
        httpx.Client(base_url=b.url, headers=b.headers) as second,
    ):
        yield first, second


def test_a_run_started_on_one_replica_is_followed_and_answered_on_the_other(
    postgres_url: str, tmp_path: Path
) -> None:
    """B streams A's run from the store; B's answer resumes it; A sees it complete."""
    write(tmp_path, "flow.yaml", SCRIPTED)
    with replicas(postgres_url, tmp_path) as (a, b):
        started = a.post("/api/runs", json={"path": "flow.yaml", "runId": "shared"})
        assert started.status_code == 201, started.text
        with b.stream("GET", "/api/runs/shared/events/stream", timeout=DEADLINE) as response:
            streamed = list(messages(response))
        assert streamed[-1]["event"] == "end"
        assert json.loads(streamed[-1]["data"])["status"] == "waiting"
        kinds = [json.loads(m["data"])["type"] for m in streamed[:-1]]
        assert kinds[0] == "workflow_start"
        assert kinds[-1] == "workflow_end"

        answered = b.post(
            "/api/runs/shared/signal", json={"address": "approve", "data": {"publish": True}}
        )
        assert answered.status_code == 202, answered.text
        assert answered.json()["resumed"] is True
        status_becomes(a, "shared", "completed")
        assert json.loads(a.get("/api/runs/shared/result").json()["output"]) == {"publish": True}


def test_a_cancel_sent_to_one_replica_stops_the_run_the_other_drives(
    postgres_url: str, tmp_path: Path
) -> None:
    """B does not drive the run; its cancel reaches A through the store."""
    write_parked(tmp_path)
    with replicas(postgres_url, tmp_path) as (a, b):
        started = a.post("/api/runs", json={"path": "park.yaml", "runId": "parked"})
        assert started.status_code == 201, started.text
        with b.stream("GET", "/api/runs/parked/events/stream", timeout=DEADLINE) as response:
            stream = messages(response)
            until_step_starts(stream, "park")
            assert b.get("/api/runs/parked").json()["live"] is False
            cancelled = b.post("/api/runs/parked/cancel", json={"reason": "from replica b"})
            assert cancelled.status_code == 202, cancelled.text
            rest = list(stream)
        assert json.loads(rest[-1]["data"])["status"] == "cancelled"
        result = a.get("/api/runs/parked/result").json()
        assert "from replica b" in result["steps"]["park"]["error"]["message"]
        again = b.post("/api/runs/parked/cancel", json={})
        assert again.status_code == 409
        assert "finished" in again.json()["error"]["message"]
