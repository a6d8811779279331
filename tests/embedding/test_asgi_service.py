"""Acceptance: examples/asgi_service.py serves, streams, cancels and survives a restart.

The example's Starlette app runs under a real uvicorn server on 127.0.0.1 (in
this process, on a socket bound to a free port) over a SQLite store in
tmp_path; a real httpx client talks to it. Twenty runs start at once and park
at their first ``review`` step (``asgi_steps.GATE`` is closed: the test decides
when a run may go on, instead of guessing at delays). One run is followed as
server-sent events to its end, with a message posted to its next draft; one is
cancelled; the service is shut down with the eighteen others in flight, and a
new one on the same store resumes and finishes them without re-running what
they had finished.
"""

from __future__ import annotations

import asyncio
import collections
import importlib
import json
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests._helpers import EXAMPLES, EventStream

RUNS = 20


@dataclass
class Example:
    """The example's two modules: the service, and the handlers with their gate."""

    service: Any
    steps: Any


@dataclass
class Serving:
    """A running example service, its uvicorn server and a client for it."""

    service: Any
    server: Any
    client: httpx.AsyncClient


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> Example:
    """Imports the example (the handlers as the runtime does) with a closed gate."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    steps = importlib.import_module("asgi_steps")
    monkeypatch.setattr(steps, "GATE", steps.Gate(closed=True))
    monkeypatch.setattr(steps, "EXECUTIONS", collections.Counter())
    return Example(importlib.import_module("asgi_service"), steps)


@asynccontextmanager
async def serving(example: Example, store: Path) -> AsyncIterator[Serving]:
    """Serves the example on a free port until the block ends (then stops it cleanly)."""
    service = example.service.Service(store)
    server = example.service.server(service, port=0)
    listener = socket.create_server(("127.0.0.1", 0))  # listening: requests queue up
    port = listener.getsockname()[1]
    task = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        base_url = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
            assert (await client.get("/runs")).status_code == 200  # answered after startup
            yield Serving(service, server, client)
    finally:
        server.should_exit = True
        await task
        listener.close()


async def messages(response: httpx.Response) -> AsyncIterator[dict[str, str]]:
    """The server-sent messages of a response: ``{"id", "event", "data"}`` (as present)."""
    stream = EventStream()
    async for line in response.aiter_lines():
        if (message := stream.feed(line)) is not None:
            yield message


async def follow(client: httpx.AsyncClient, run_id: str) -> list[dict[str, str]]:
    """Every message of the run's event stream, until the server ends it."""
    async with client.stream("GET", f"/runs/{run_id}/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return [message async for message in messages(response)]


def events_of(stream: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The run events a stream carried (its ``end`` message aside)."""
    return [json.loads(m["data"]) for m in stream if "event" not in m]


def ending(stream: list[dict[str, str]]) -> dict[str, Any]:
    """The stream's ``end`` message (the run's final status)."""
    assert stream[-1].get("event") == "end", stream[-3:]
    end: dict[str, Any] = json.loads(stream[-1]["data"])
    return end


async def status(client: httpx.AsyncClient, run_id: str) -> str:
    response = await client.get(f"/runs/{run_id}")
    assert response.status_code == 200
    value: str = response.json()["status"]
    return value


async def test_runs_stream_cancel_and_resume_across_a_restart(
    example: Example, tmp_path: Path
) -> None:
    """20 runs: one streamed to completion, one cancelled, 18 resumed after a restart."""
    gate, store = example.steps.GATE, tmp_path / "runs.db"
    async with serving(example, store) as up:
        client = up.client
        started = await asyncio.gather(
            *(
                client.post("/runs", json={"inputs": {"ticket": f"Ticket {n}: export is down"}})
                for n in range(RUNS)
            )
        )
        assert [response.status_code for response in started] == [201] * RUNS
        ids = [response.json()["runId"] for response in started]
        await gate.until_parked(RUNS)  # each at reply.0.review: intake, triage, draft done
        listed = (await client.get("/runs", params={"limit": 50})).json()["runs"]
        assert sorted(run["runId"] for run in listed) == sorted(ids)
        assert {(run["status"], run["live"]) for run in listed} == {("running", True)}
        watched, cancelled, *unfinished = ids

        # A message for the watched run's next draft, then its events live to the end.
        posted = await client.post(
            f"/runs/{watched}/messages", json={"to": "draft", "text": "Mention the status page."}
        )
        assert posted.status_code == 202, posted.text
        async with client.stream("GET", f"/runs/{watched}/events") as response:
            stream = []
            async for message in messages(response):
                stream.append(message)
                event = json.loads(message["data"]) if "event" not in message else {}
                if event.get("stepId") == "reply.0.review" and event["type"] == "step_start":
                    gate.release(watched)  # caught up with the parked run: let it finish
        events = events_of(stream)
        assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
        assert [m["id"] for m in stream[:-1]] == [str(event["seq"]) for event in events]
        assert events[0]["type"] == "workflow_start"
        assert events[-1]["type"] == "workflow_end"
        assert ending(stream) == {"status": "completed", "seq": events[-1]["seq"]}
        drained = [e for e in events if e["type"] == "agent_inbox_drain"]
        assert [(e["stepId"], e["data"]["from"]) for e in drained] == [
            ("reply.1.draft", "api")  # posted from outside the run (issue 27, item 10b)
        ]

        # One run cancelled: it ends cancelled.
        refused = await client.post(f"/runs/{watched}/cancel", json={})
        assert refused.status_code == 409  # finished: nothing to cancel
        cancelling = await client.post(f"/runs/{cancelled}/cancel", json={"reason": "duplicate"})
        assert cancelling.status_code == 202, cancelling.text
        assert ending(await follow(client, cancelled))["status"] == "cancelled"
        assert await status(client, cancelled) == "cancelled"

        # Shut down with the others in flight; a client following one is let go at once.
        async with client.stream("GET", f"/runs/{unfinished[0]}/events") as response:
            cut = []
            async for message in messages(response):
                cut.append(message)
                if json.loads(message["data"]).get("stepId") == "reply.0.review":
                    up.server.should_exit = True
        assert all("event" not in message for message in cut)  # no `end`: the run goes on

    assert gate.parked == 0  # their reviews were interrupted
    gate.open()
    async with serving(example, store) as up:
        client = up.client
        assert sorted(up.service.resumed) == sorted(unfinished)
        streams = await asyncio.gather(*(follow(client, run) for run in unfinished))
        assert [ending(stream)["status"] for stream in streams] == ["completed"] * len(unfinished)
        assert [await status(client, run) for run in unfinished] == ["completed"] * len(unfinished)
        assert await status(client, cancelled) == "cancelled"
        assert await status(client, watched) == "completed"
        again = (await client.get("/runs", params={"limit": 50})).json()["runs"]
        assert collections.Counter(run["status"] for run in again) == {
            "completed": RUNS - 1,
            "cancelled": 1,
        }

    executions = example.steps.EXECUTIONS
    for run in unfinished:  # finished steps replayed; only the interrupted review ran again
        assert {address: n for (r, address), n in executions.items() if r == run} == {
            "intake": 1,
            "triage": 1,
            "reply.0.review": 2,
            "reply.1.review": 1,
        }
    for stream in streams:
        started_steps = collections.Counter(
            e["stepId"] for e in events_of(stream) if e["type"] == "step_start"
        )
        assert started_steps["reply.0.draft"] == 1  # the agent's draft was not asked again
        replayed = {e["stepId"] for e in events_of(stream) if e["type"] == "step_replayed"}
        assert replayed == {"intake", "triage", "reply.0.draft"}
    assert {address for (r, address) in executions if r == cancelled} == {
        "intake",
        "triage",
        "reply.0.review",
    }


async def test_the_script_serves_until_sigterm(tmp_path: Path) -> None:
    """``python examples/asgi_service.py`` serves a run to its end, and stops on SIGTERM."""
    command = [sys.executable, str(EXAMPLES / "asgi_service.py"), "--port", "0"]
    command += ["--store", str(tmp_path / "service.db")]
    async with await anyio.open_process(command, stdout=subprocess.DEVNULL) as process:
        assert process.stderr is not None
        log = ""
        async for chunk in process.stderr:  # until uvicorn says where it listens
            log += chunk.decode()
            found = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", log)
            if found:
                break
        assert found, log
        async with httpx.AsyncClient(base_url=found.group(1), timeout=30) as client:
            started = await client.post("/runs", json={"inputs": {"ticket": "Login is slow"}})
            assert started.status_code == 201, started.text
            run_id = started.json()["runId"]
            stream = await follow(client, run_id)
            assert ending(stream)["status"] == "completed"
            detail = (await client.get(f"/runs/{run_id}")).json()
        process.send_signal(signal.SIGTERM)
        rest = b"".join([chunk async for chunk in process.stderr]).decode()
        # A clean shutdown; then uvicorn lets the signal end the process, as is customary.
        assert await process.wait() in (0, -signal.SIGTERM), log + rest
    assert "Application shutdown complete" in rest
    assert "Traceback" not in log + rest
    assert detail["result"]["output"]["approved"] is True
    assert detail["result"]["steps"]["triage"]["result"] == {"priority": "normal", "queue": "desk"}
