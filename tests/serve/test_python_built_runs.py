"""A server that cannot rebuild a run built in Python leaves it to its application.

The run's workflow names a Python predicate this process never registered (as
in a server that serves an application's store): answering its question
records the answer without resuming it, and an explicit resume is refused,
the run left waiting with its answer for the application that built it.
"""

from __future__ import annotations

from pathlib import Path

from cadenza import LoadedWorkflow, Workflow
from cadenza.workflow import Human, Step

from .conftest import OpenViewer

GONE = "@python:my_app.checks:<lambda>"


async def test_a_run_the_server_cannot_rebuild_is_answered_but_not_resumed(
    tmp_path: Path, open_viewer: OpenViewer
) -> None:
    steps = [
        Step(id="approve", human=Human(prompt="Go?")),
        Step(id="ship", handler="json:dumps", depends_on=["approve"], condition=GONE),
    ]
    document = LoadedWorkflow(Workflow(name="built", steps=steps), None, tmp_path)
    async with open_viewer(tmp_path) as (runtime, client):
        assert (await runtime.run(document, run_id="r-12")).status == "waiting"

        answered = await client.post(
            "/api/runs/r-12/signal", json={"address": "approve", "data": {"ok": True}}
        )
        assert answered.status_code == 202
        assert answered.json() == {"runId": "r-12", "address": "approve", "resumed": False}

        refused = await client.post("/api/runs/r-12/resume", json={})
        assert refused.status_code == 409
        assert refused.json()["error"]["type"] == "RunNeedsCode"
        assert (
            "needs the Python predicate 'my_app.checks:<lambda>'"
            in (refused.json()["error"]["message"])
        )
        row = (await client.get("/api/runs/r-12")).json()
        assert row["status"] == "waiting"
        events = [e["type"] for e in (await client.get("/api/runs/r-12/events")).json()["events"]]
        assert events[-1] == "signal_received"  # nothing was written after the answer
