"""Following runs live over a real server: event streams, other processes, shutdown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx

from cadenza.serve import BackgroundServer, ServeOptions
from tests._helpers import EventStream

from .conftest import REFLECTION, HeldCritic, write


def messages(response: httpx.Response) -> Iterator[dict[str, str]]:
    """The server-sent messages of a streamed response, as they arrive."""
    stream = EventStream()
    for line in response.iter_lines():
        if (message := stream.feed(line)) is not None:
            yield message


def until_step_starts(stream: Iterator[dict[str, str]], address: str) -> list[dict[str, str]]:
    """Reads messages up to the ``step_start`` of ``address``; returns them."""
    seen = []
    for message in stream:
        seen.append(message)
        event = json.loads(message["data"])
        if event.get("type") == "step_start" and event.get("stepId") == address:
            return seen
    raise AssertionError(f"the stream ended before {address} started: {seen}")


def test_the_stream_follows_a_run_as_it_happens(tmp_path: Path, critic: HeldCritic) -> None:
    """Events arrive while the critic's answer is held, then the rest, then `end`."""
    write(tmp_path, "flow.yaml", REFLECTION)
    options = ServeOptions(store=tmp_path / "runs.db", root=tmp_path, port=0)
    with (
        BackgroundServer(options) as server,
        httpx.Client(base_url=server.url, headers=server.headers) as client,
    ):
        started = client.post("/api/runs", json={"path": "flow.yaml", "runId": "live"})
        assert started.status_code == 201, started.text
        with client.stream("GET", "/api/runs/live/events/stream", timeout=30) as response:
            stream = messages(response)
            before = until_step_starts(stream, "reflection.0.critique")
            assert json.loads(before[0]["data"])["type"] == "workflow_start"
            # The writer's model streamed its draft: the viewer gets it as it was written.
            streamed = [json.loads(m["data"]) for m in before if m.get("event") == "output"]
            assert all("id" not in m for m in before if m.get("event") == "output")
            assert "".join(e["delta"] for e in streamed) == "Draft one"
            assert {e["stepId"] for e in streamed} == {"reflection.0.write"}
            assert streamed[-1]["done"] is True
            state = client.get("/api/runs/live").json()
            assert (state["status"], state["live"]) == ("running", True)

            critic.first.set()
            until_step_starts(stream, "reflection.1.critique")
            critic.second.set()
            rest = list(stream)
        assert rest[-1]["event"] == "end"
        assert json.loads(rest[-1]["data"])["status"] == "waiting"
        ids = [int(m["id"]) for m in rest[:-1] if "id" in m]
        assert ids == sorted(ids)
        waiting = json.loads(rest[-2]["data"])
        assert (waiting["type"], waiting["data"]["status"]) == ("workflow_end", "waiting")


def test_a_run_driven_by_another_process_is_followed_through_the_store(
    tmp_path: Path, critic: HeldCritic
) -> None:
    """`cadenza run` in another process; the viewer streams its events from the store."""
    write(tmp_path, "flow.yaml", REFLECTION)
    store = tmp_path / "runs.db"
    command = [sys.executable, "-m", "cadenza", "run", "flow.yaml", "--store", str(store)]
    command += ["--run-id", "elsewhere", "--json", "--events"]
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:  # its own event stream: wait until the critic is asked
            event = json.loads(line)
            if event["type"] == "step_start" and event.get("stepId") == "reflection.0.critique":
                break
        options = ServeOptions(store=store, root=tmp_path, port=0, poll=0.05)
        with (
            BackgroundServer(options) as server,
            httpx.Client(base_url=server.url, headers=server.headers) as client,
        ):
            with client.stream("GET", "/api/runs/elsewhere/events/stream", timeout=30) as response:
                stream = messages(response)
                until_step_starts(stream, "reflection.0.critique")
                assert client.get("/api/runs/elsewhere").json()["live"] is False
                critic.first.set()
                critic.second.set()
                rest = list(stream)
            assert json.loads(rest[-1]["data"])["status"] == "waiting"
    finally:
        critic.release()
        output, _ = process.communicate(timeout=30)
    assert json.loads(output)["status"] == "waiting"


def test_stopping_the_server_ends_open_streams_and_leaves_its_runs_resumable(
    tmp_path: Path, critic: HeldCritic
) -> None:
    """A held run: stopping the server closes the stream; the run is left interrupted."""
    write(tmp_path, "flow.yaml", REFLECTION)
    store = tmp_path / "runs.db"
    server = BackgroundServer(ServeOptions(store=store, root=tmp_path, port=0)).start()
    stopper = threading.Thread(target=server.stop)
    try:
        with httpx.Client(base_url=server.url, headers=server.headers) as client:
            started = client.post("/api/runs", json={"path": "flow.yaml", "runId": "held"})
            assert started.status_code == 201, started.text
            with client.stream("GET", "/api/runs/held/events/stream", timeout=30) as response:
                stream = messages(response)
                until_step_starts(stream, "reflection.0.critique")
                stopper.start()
                rest = list(stream)  # ends: the server closes it while stopping
        assert all(m.get("event") != "end" for m in rest)
    finally:
        if stopper.ident is None:  # the test failed before it stopped the server
            server.stop()
        else:
            stopper.join()
    options = ServeOptions(store=store, root=tmp_path, port=0)
    with (
        BackgroundServer(options) as again,
        httpx.Client(base_url=again.url, headers=again.headers) as client,
    ):
        assert client.get("/api/runs/held").json()["status"] == "running"  # resumable
