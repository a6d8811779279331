"""The viewer's HTTP API as a client sees it: runs, results, events, workflows, actions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import msgspec
from starlette.applications import Starlette
from starlette.routing import Mount

from cadenza import Runtime
from cadenza.protocols import Event
from cadenza.serve import create_app
from tests._helpers import EXAMPLES, sse_messages

from .conftest import ECHO, SCRIPTED, OpenViewer, ViewRun, write, write_parked

JSON = {"content-type": "application/json"}


async def test_run_list_is_newest_first_filtered_and_paged(
    tmp_path: Path, view_run: ViewRun
) -> None:
    """Runs come newest first; ?status= filters; limit/offset page; total counts the filter."""
    write(tmp_path, "review.yaml", SCRIPTED)
    async with view_run("echo.yaml", ECHO, "run-1") as (runtime, client, first):
        waiting = await runtime.run(tmp_path / "review.yaml", run_id="run-2")
        last = await runtime.run(tmp_path / "echo.yaml", run_id="run-3")
        assert (first.status, waiting.status, last.status) == ("completed", "waiting", "completed")

        page = (await client.get("/api/runs")).json()
        assert [r["runId"] for r in page["runs"]] == ["run-3", "run-2", "run-1"]
        assert page["total"] == 3
        assert page["runs"][0]["workflow"] == "echo"

        only = (await client.get("/api/runs", params={"status": "waiting"})).json()
        assert [r["runId"] for r in only["runs"]] == ["run-2"]
        both = await client.get("/api/runs", params=[("status", "waiting"), ("status", "failed")])
        assert both.json()["total"] == 1

        second = (await client.get("/api/runs", params={"limit": 1, "offset": 1})).json()
        assert [r["runId"] for r in second["runs"]] == ["run-2"]
        assert (second["limit"], second["offset"], second["total"]) == (1, 1, 3)

        bad = await client.get("/api/runs", params={"status": "sleeping"})
        assert bad.status_code == 400
        assert "sleeping" in bad.json()["error"]["message"]
        assert (await client.get("/api/runs", params={"limit": "lots"})).status_code == 400


async def test_result_and_event_pages_of_a_finished_run(view_run: ViewRun) -> None:
    """The result is the run's result JSON; events page by seq with next/more."""
    async with view_run("echo.yaml", ECHO, "done") as (runtime, client, result):
        stored = await runtime.stored_events("done")

        body = (await client.get("/api/runs/done/result")).json()
        assert body == json.loads(msgspec.json.encode(result))
        assert body["output"].strip() == "hello"

        seen: list[int] = []
        after, more = 0, True
        while more:
            page = await client.get("/api/runs/done/events", params={"after": after, "limit": 2})
            data = page.json()
            seen += [e["seq"] for e in data["events"]]
            after, more = data["next"], data["more"]
        assert seen == [e.seq for e in stored]
        summary = (await client.get("/api/runs/done")).json()
        assert (summary["status"], summary["live"]) == ("completed", False)


async def test_event_stream_of_a_finished_run_replays_and_ends(view_run: ViewRun) -> None:
    """SSE: one message per event (id = seq), then `end` with the status; after skips."""
    async with view_run("echo.yaml", ECHO, "done") as (runtime, client, _):
        stored = await runtime.stored_events("done")

        response = await client.get("/api/runs/done/events/stream")
        assert response.headers["content-type"].startswith("text/event-stream")
        messages = sse_messages(response.text)
        events = [msgspec.json.decode(m["data"], type=Event) for m in messages[:-1]]
        assert events == stored
        assert [int(m["id"]) for m in messages[:-1]] == [e.seq for e in stored]
        assert messages[-1]["event"] == "end"
        assert json.loads(messages[-1]["data"]) == {"status": "completed", "seq": stored[-1].seq}

        later = sse_messages((await client.get("/api/runs/done/events/stream?after=3")).text)
        assert [int(m["id"]) for m in later[:-1]] == [e.seq for e in stored if e.seq > 3]
        resumed = await client.get(
            "/api/runs/done/events/stream", headers={"Last-Event-ID": str(stored[-2].seq)}
        )
        assert [m.get("id") for m in sse_messages(resumed.text)] == [str(stored[-1].seq), None]


async def test_workflow_structure_carries_prompts_questions_and_control_roles(
    view_run: ViewRun,
) -> None:
    """The workflow the run started with: graph JSON plus agents, instructions, roles."""
    async with view_run("review.yaml", SCRIPTED, "review") as (runtime, client, _):
        tagline = await runtime.run(EXAMPLES / "control-tagline.yaml", run_id="tagline")
        assert tagline.status == "completed"

        review = (await client.get("/api/runs/review/workflow")).json()
        assert review["agents"]["writer"]["prompt"] == "You are a writer."
        loop = review["steps"][0]["loop"]
        assert loop["until"] == "steps.critique.content.contains('APPROVED')"
        assert [s["instructions"] for s in loop["steps"]] == ["Write.", "Review."]
        assert review["steps"][1]["human"]["prompt"] == "Publish it?"

        control = (await client.get("/api/runs/tagline/workflow")).json()["steps"][0]["control"]
        assert [role["id"] for role in control["roles"]] == ["actor", "evaluator"]
        actor = control["roles"][0]["workflow"]
        assert actor["steps"][0]["id"] == "draft"
        assert "taglines" in actor["agents"]["copywriter"]["prompt"]
        assert [c["expr"] for c in control["checks"]] == [
            "size(result.text) <= 120",
            "result.text.contains('fast')",
        ]


async def test_starting_a_run_is_confined_to_the_root(
    tmp_path: Path, open_viewer: OpenViewer
) -> None:
    """Paths escaping the root are refused (403); missing 404; not a workflow 422."""
    root = tmp_path / "root"
    root.mkdir()
    write(root, "echo.yaml", ECHO)
    write(tmp_path, "outside.yaml", ECHO)
    (root / "link.yaml").symlink_to(tmp_path / "outside.yaml")
    (root / "notes.txt").write_text("hello")
    broken = "name: broken\nsteps:\n  - {id: a, dependsOn: [nowhere], command: x}\n"
    write(root, "broken.yaml", broken)
    async with open_viewer(root, store=tmp_path / "runs.db") as (runtime, client):
        started = await client.post("/api/runs", json={"path": "echo.yaml", "runId": "mine"})
        assert started.status_code == 201
        assert started.json()["runId"] == "mine"
        assert (await runtime.result("mine")).status == "completed"

        for path in ("../outside.yaml", str(tmp_path / "outside.yaml"), "link.yaml"):
            refused = await client.post("/api/runs", json={"path": path})
            assert refused.status_code == 403, path
            assert "outside" in refused.json()["error"]["message"]
        assert (await client.post("/api/runs", json={"path": "nope.yaml"})).status_code == 404
        assert (await client.post("/api/runs", json={"path": "notes.txt"})).status_code == 404

        invalid = await client.post("/api/runs", json={"path": "broken.yaml"})
        assert invalid.status_code == 422
        assert invalid.json()["error"]["type"] == "WorkflowError"
        assert any("nowhere" in p for p in invalid.json()["error"]["problems"])

        bad_input = await client.post("/api/runs", json={"path": "echo.yaml", "inputs": {"x": 1}})
        assert bad_input.status_code == 422
        taken = await client.post("/api/runs", json={"path": "echo.yaml", "runId": "mine"})
        assert taken.status_code == 422
        assert "taken" in taken.json()["error"]["message"]
        typo = await client.post("/api/runs", json={"path": "echo.yaml", "input": {}})
        assert typo.status_code == 422
        garbled = await client.post("/api/runs", content=b"{", headers=JSON)
        assert garbled.status_code == 400

        listed = (await client.get("/api/workflows")).json()
        assert [w["path"] for w in listed["workflows"]] == ["broken.yaml", "echo.yaml", "link.yaml"]


async def test_answering_a_waiting_step_resumes_the_run_to_its_end(view_run: ViewRun) -> None:
    """inputs lists the question; a bad answer is refused; a good one finishes the run."""
    async with view_run("review.yaml", SCRIPTED, "review") as (runtime, client, waiting):
        assert waiting.status == "waiting"

        questions = (await client.get("/api/runs/review/inputs")).json()
        assert questions == [
            {
                "address": "approve",
                "prompt": "Publish it?",
                "schema": {
                    "type": "object",
                    "properties": {"publish": {"type": "boolean"}},
                    "required": ["publish"],
                },
            }
        ]
        wrong_place = await client.post(
            "/api/runs/review/signal", json={"address": "reflection", "data": {}}
        )
        assert wrong_place.status_code == 409
        assert "approve" in wrong_place.json()["error"]["message"]
        misfit = await client.post(
            "/api/runs/review/signal", json={"address": "approve", "data": {"publish": "yes"}}
        )
        assert misfit.status_code == 422
        assert "publish" in misfit.json()["error"]["message"]

        answered = await client.post(
            "/api/runs/review/signal", json={"address": "approve", "data": {"publish": True}}
        )
        assert answered.status_code == 202
        assert answered.json() == {"runId": "review", "address": "approve", "resumed": True}
        result = await runtime.result("review")
        assert result.status == "completed"
        assert json.loads(result.output) == {"publish": True}
        again = await client.post(
            "/api/runs/review/signal", json={"address": "approve", "data": {"publish": True}}
        )
        assert again.status_code == 409
        assert (await client.get("/api/runs/review/inputs")).json() == []


async def test_resume_continues_an_answered_run_and_refuses_a_finished_one(
    view_run: ViewRun,
) -> None:
    """signal with resume=false only records; POST resume then finishes the run."""
    async with view_run("review.yaml", SCRIPTED, "review") as (runtime, client, _):
        recorded = await client.post(
            "/api/runs/review/signal",
            json={"address": "approve", "data": {"publish": False}, "resume": False},
        )
        assert recorded.json()["resumed"] is False
        assert (await client.get("/api/runs/review")).json()["status"] == "waiting"

        resumed = await client.post("/api/runs/review/resume", json={})
        assert resumed.status_code == 202
        assert (await runtime.result("review")).status == "completed"
        finished = await client.post("/api/runs/review/resume", json={})
        assert finished.status_code == 409
        assert "finished" in finished.json()["error"]["message"]


TWO_STEPS = """\
name: two
steps:
  - {id: first, command: "echo first"}
  - {id: second, command: "echo second", dependsOn: [first]}
output: "steps.second.content"
"""


async def test_fork_starts_a_new_run_and_both_runs_show_the_lineage(view_run: ViewRun) -> None:
    """POST fork: 201 with the new run's summary (its parent named); the source's detail
    lists it; an address never started or an output for a step run again is 409."""
    async with view_run("two.yaml", TWO_STEPS, "source") as (runtime, client, _):
        forked = await client.post(
            "/api/runs/source/fork",
            json={"at": "second", "set": {"first": "edited"}, "runId": "child"},
        )
        assert forked.status_code == 201, forked.text
        body = forked.json()
        assert (body["runId"], body["parentRunId"], body["parentAddress"]) == (
            "child",
            "source",
            "second",
        )
        assert "forks" not in body  # a summary; the detail of a run lists its forks
        result = await runtime.result("child")
        assert (result.steps["first"].content, result.status) == ("edited", "completed")

        child = (await client.get("/api/runs/child")).json()
        assert (child["parentRunId"], child["parentAddress"], child["forks"]) == (
            "source",
            "second",
            [],
        )
        source = (await client.get("/api/runs/source")).json()
        assert source["parentRunId"] is None
        assert [(f["runId"], f["at"], f["status"]) for f in source["forks"]] == [
            ("child", "second", "completed")
        ]
        listed = (await client.get("/api/runs")).json()["runs"]
        assert {r["runId"]: r["parentRunId"] for r in listed} == {"child": "source", "source": None}

        never = await client.post("/api/runs/source/fork", json={"at": "third"})
        assert never.status_code == 409
        assert never.json()["error"] == {
            "type": "ForkRefused",
            "message": "run 'source' never started 'third'; it started first, second",
            "problems": [],
        }
        redone = await client.post(
            "/api/runs/source/fork", json={"at": "first", "set": {"second": "x"}}
        )
        assert redone.status_code == 409
        assert "cannot set the output of 'second'" in redone.json()["error"]["message"]
        unknown = await client.post("/api/runs/source/fork", json={"at": "first", "when": 1})
        assert unknown.status_code == 422
        assert [r.run_id for r in await runtime.forks("source")] == ["child"]


async def test_cancel_stops_a_run_this_server_drives(
    tmp_path: Path, open_viewer: OpenViewer
) -> None:
    """A live run is cancelled (recorded `cancelled`); a finished one cannot be (409)."""
    write_parked(tmp_path)
    async with open_viewer(tmp_path) as (runtime, client):
        started = await client.post("/api/runs", json={"path": "park.yaml", "runId": "parked"})
        assert started.json()["live"] is True
        handle = runtime.handle("parked")
        assert handle is not None
        async for event in handle.events():
            if event.type == "step_start" and event.step_id == "park":
                break
        listed = (await client.get("/api/runs", params={"status": "running"})).json()
        assert [(r["runId"], r["live"]) for r in listed["runs"]] == [("parked", True)]

        cancelled = await client.post("/api/runs/parked/cancel", json={"reason": "enough"})
        assert cancelled.status_code == 202
        assert (await handle.result()).status == "cancelled"
        again = await client.post("/api/runs/parked/cancel", json={})
        assert again.status_code == 409


async def test_a_run_that_does_not_exist_is_404_everywhere(
    tmp_path: Path, open_viewer: OpenViewer
) -> None:
    """Every run endpoint answers 404 with a JSON error naming the run."""
    async with open_viewer(tmp_path) as (_, client):
        for path in ("", "/result", "/events", "/events/stream", "/workflow", "/inputs"):
            response = await client.get(f"/api/runs/ghost{path}")
            assert response.status_code == 404, path
            assert "ghost" in response.json()["error"]["message"]
        bodies: dict[str, Any] = {
            "signal": {"address": "a"},
            "cancel": {},
            "resume": {},
            "fork": {"at": "a"},
        }
        for action, body in bodies.items():
            response = await client.post(f"/api/runs/ghost/{action}", json=body)
            assert response.status_code == 404, action


async def test_runs_of_a_shared_store_are_listed_with_their_results(
    tmp_path: Path, open_viewer: OpenViewer
) -> None:
    """A run recorded by another runtime on the same store shows up, not live."""
    write(tmp_path, "echo.yaml", ECHO)
    async with Runtime(store=tmp_path / "runs.db") as other:
        await other.run(tmp_path / "echo.yaml", run_id="elsewhere")
    async with open_viewer(tmp_path) as (_, client):
        runs = (await client.get("/api/runs")).json()["runs"]
        assert [(r["runId"], r["live"]) for r in runs] == [("elsewhere", False)]
        result = (await client.get("/api/runs/elsewhere/result")).json()
        assert result["status"] == "completed"
        messages = sse_messages((await client.get("/api/runs/elsewhere/events/stream")).text)
        assert messages[-1]["event"] == "end"


async def test_the_viewer_works_mounted_under_a_prefix(tmp_path: Path) -> None:
    """Mounted at /runs in a service's app: the page and the API answer under it."""
    write(tmp_path, "echo.yaml", ECHO)
    async with Runtime() as runtime:
        await runtime.run(tmp_path / "echo.yaml", run_id="mounted")
        service = Starlette(routes=[Mount("/runs", app=create_app(runtime, root=tmp_path))])
        transport = httpx.ASGITransport(app=service)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            page = await client.get("/runs/")
            assert 'href="static/app.css"' in page.text
            assert (await client.get("/runs/static/app.css")).status_code == 200
            runs = (await client.get("/runs/api/runs")).json()["runs"]
            assert [r["runId"] for r in runs] == ["mounted"]
