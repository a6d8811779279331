"""The OpenAPI 3.1 document of the HTTP API, built from the code's own types.

Bodies are described by the JSON Schemas msgspec derives from the structs the
handlers encode and decode (`cadenza.protocols` and ``_models.py``), so the
document cannot drift from the code. ``docs/openapi.json`` is this document
for a server with a token (a test keeps it current); a running server serves
its own at ``/openapi.json``.
"""

from __future__ import annotations

import inspect
from typing import Any, Final

import msgspec

from cadenza.protocols import Event, RunResult
from cadenza.store import Fleet

from . import _models
from ._routes import STATUSES

__all__ = ["EXAMPLE_RUN_ID", "openapi_document"]

EXAMPLE_RUN_ID: Final = "20261121T101500-3f9a1c"
"""The run id the document's examples use."""

_REF: Final = "#/components/schemas/{name}"
_TYPES: Final = (
    _models.RunPage,
    _models.RunSummary,
    _models.RunDetail,
    RunResult,
    _models.EventPage,
    Event,
    _models.PendingInput,
    _models.WorkflowList,
    _models.StartRequest,
    _models.SignalRequest,
    _models.SignalAccepted,
    _models.CancelRequest,
    _models.MessageRequest,
    _models.MessageAccepted,
    _models.ResumeRequest,
    _models.ForkRequest,
    _models.ErrorBody,
    Fleet,
)

_WORKFLOW_SCHEMA: Final = {
    "type": "object",
    "description": (
        "The workflow's structure: the JSON of `cadenza graph --format json`, plus each "
        "workflow's `agents` (model, prompt), agent steps' `instructions`, human steps' "
        "`human` question and control steps' `control` (objective, checks, roles)."
    ),
    "required": ["name", "steps"],
    "properties": {
        "name": {"type": "string"},
        "steps": {"type": "array", "items": {"type": "object"}},
        "agents": {"type": "object"},
        "loop": {"type": "object"},
    },
}


_SSE_SCHEMA: Final = {
    "type": "object",
    "description": "One server-sent event message.",
    "required": ["data"],
    "properties": {
        "id": {"type": "string", "description": "The event's `seq` (absent on `end`)."},
        "event": {
            "type": "string",
            "enum": ["message", "end"],
            "description": (
                "The SSE event type: `message` (the default, not sent) for a run event; "
                "`end` once, when the run has ended."
            ),
        },
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "description": (
                "A run event (the `Event` schema) or, on `end`, `{status, seq}`: the run's "
                "status and the last `seq` sent."
            ),
        },
    },
}


def _ref(kind: type) -> dict[str, str]:
    return {"$ref": _REF.format(name=kind.__name__)}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref(_models.ErrorBody), description)


_RUN_ID_PARAM: Final = {
    "name": "run_id",
    "in": "path",
    "required": True,
    "description": "The run's id.",
    "schema": {"type": "string", "minLength": 1},
    "example": EXAMPLE_RUN_ID,
}


def _int_query(name: str, description: str, low: int, high: int, default: int) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": "integer", "minimum": low, "maximum": high, "default": default},
    }


def _operation(
    summary: str,
    operation_id: str,
    responses: dict[str, Any],
    *,
    parameters: list[dict[str, Any]] | None = None,
    body: type | None = None,
    body_example: dict[str, Any] | None = None,
    token: bool,
) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": summary, "operationId": operation_id}
    if parameters:
        operation["parameters"] = parameters
    if body is not None:
        media: dict[str, Any] = {"schema": _ref(body)}
        if body_example is not None:
            media["example"] = body_example
        operation["requestBody"] = {"required": True, "content": {"application/json": media}}
        responses = {
            **responses,
            "400": _error("The body is not JSON, or a parameter is malformed."),
            "413": _error("The body is over the server's limit (`--max-body`)."),
            "415": _error("The body is not sent as application/json."),
            "422": _error("The body does not fit, or the run or workflow refuses it."),
        }
    standard = {"403": _error("A non-loopback Host, a cross-origin write, or a path outside root.")}
    if token:
        standard["401"] = _error("The server's token is missing or wrong.")
    operation["responses"] = {**responses, **standard}
    return operation


def openapi_document(*, token: bool = True) -> dict[str, Any]:
    """The OpenAPI document; ``token`` says whether the server asks for a bearer token."""
    _, schemas = msgspec.json.schema_components(_TYPES, ref_template=_REF)
    # As JSON says it (a default of () is []), so the document equals its file read back.
    components: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(schemas))
    for schema in components.values():
        # A model's docstring, cleaned as msgspec 0.23 does and 0.22 did not: one
        # document whichever of them is installed.
        if isinstance(schema.get("description"), str):
            schema["description"] = inspect.cleandoc(schema["description"])
    components["WorkflowStructure"] = _WORKFLOW_SCHEMA
    not_found = _error("No such run.")
    run = [_RUN_ID_PARAM]
    paging = [
        _int_query("after", "Only events with a greater `seq`.", 0, 1 << 62, 0),
    ]
    ops: dict[str, dict[str, Any]] = {
        "/api/runs": {
            "get": _operation(
                "List stored runs, newest first",
                "listRuns",
                {
                    "200": _json(_ref(_models.RunPage), "A page of runs."),
                    "400": _error("A query parameter is malformed."),
                },
                parameters=[
                    {
                        "name": "status",
                        "in": "query",
                        "required": False,
                        "description": "Only runs with one of these statuses.",
                        "style": "form",
                        "explode": True,
                        "schema": {"type": "array", "items": {"enum": list(STATUSES)}},
                    },
                    _int_query("limit", "Runs per page.", 1, 500, 50),
                    _int_query("offset", "Runs to skip.", 0, 1 << 30, 0),
                ],
                token=token,
            ),
            "post": _operation(
                "Start a run of a workflow file under the server's root",
                "startRun",
                {
                    "201": _json(_ref(_models.RunSummary), "The run started."),
                    "404": _error("No such workflow file under the root."),
                },
                body=_models.StartRequest,
                body_example={"path": "examples/reflection.yaml", "inputs": {"topic": "actors"}},
                token=token,
            ),
        },
        "/api/runs/{run_id}": {
            "get": _operation(
                "A run's summary and the runs forked from it",
                "getRun",
                {"200": _json(_ref(_models.RunDetail), "The run."), "404": not_found},
                parameters=run,
                token=token,
            )
        },
        "/api/runs/{run_id}/result": {
            "get": _operation(
                "A run's result JSON (a snapshot of its steps while it runs)",
                "getRunResult",
                {"200": _json(_ref(RunResult), "The result JSON."), "404": not_found},
                parameters=run,
                token=token,
            )
        },
        "/api/runs/{run_id}/events": {
            "get": _operation(
                "A run's stored events, a page at a time",
                "getRunEvents",
                {
                    "200": _json(_ref(_models.EventPage), "A page of events."),
                    "400": _error("A query parameter is malformed."),
                    "404": not_found,
                },
                parameters=[*run, *paging, _int_query("limit", "Events per page.", 1, 5000, 500)],
                token=token,
            )
        },
        "/api/runs/{run_id}/events/stream": {
            "get": _operation(
                "A run's events as server-sent events, live until the run ends",
                "streamRunEvents",
                {
                    "200": {
                        "description": (
                            "One message per event (`id`: seq, `data`: the event JSON), then "
                            "one `end` message with the run's status."
                        ),
                        "content": {"text/event-stream": {"schema": _SSE_SCHEMA}},
                    },
                    "400": _error("A query parameter is malformed."),
                    "404": not_found,
                    "503": _error("The server has its limit of streams open (`--max-streams`)."),
                },
                parameters=[
                    *run,
                    *paging,
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "description": "Resume after this `seq` (sent by EventSource itself).",
                        "schema": {"type": "string"},
                    },
                ],
                token=token,
            )
        },
        "/api/runs/{run_id}/workflow": {
            "get": _operation(
                "The structure of the workflow the run was started with",
                "getRunWorkflow",
                {
                    "200": _json({"$ref": _REF.format(name="WorkflowStructure")}, "Its structure."),
                    "404": _error("No such run, or it has no stored workflow."),
                },
                parameters=run,
                token=token,
            )
        },
        "/api/runs/{run_id}/inputs": {
            "get": _operation(
                "The questions a waiting run asks a person",
                "getRunInputs",
                {
                    "200": _json(
                        {"type": "array", "items": _ref(_models.PendingInput)}, "Questions."
                    ),
                    "404": not_found,
                },
                parameters=run,
                token=token,
            )
        },
        "/api/runs/{run_id}/signal": {
            "post": _operation(
                "Answer a waiting step (and, by default, resume the run)",
                "signalRun",
                {
                    "202": _json(_ref(_models.SignalAccepted), "The answer is recorded."),
                    "404": not_found,
                    "409": _error("The run has finished, or nothing waits at that address."),
                },
                parameters=run,
                body=_models.SignalRequest,
                body_example={"address": "approve", "data": {"approved": True}},
                token=token,
            )
        },
        "/api/runs/{run_id}/cancel": {
            "post": _operation(
                "Cancel a run, whichever process drives it",
                "cancelRun",
                {
                    "202": _json(_ref(_models.RunSummary), "Cancelling."),
                    "404": not_found,
                    "409": _error("The run has finished."),
                },
                parameters=run,
                body=_models.CancelRequest,
                body_example={"reason": "wrong inputs"},
                token=token,
            )
        },
        "/api/runs/{run_id}/messages": {
            "post": _operation(
                "Send a message to a step of a running run, whichever process drives it",
                "postMessage",
                {
                    "202": _json(_ref(_models.MessageAccepted), "On its way."),
                    "404": not_found,
                    "409": _error("The run is not running (finished, or waiting for a person)."),
                    "429": _error(
                        "The run (or the store, for a run another process drives) holds as many"
                        " messages waiting for delivery as it may: post again later."
                    ),
                },
                parameters=run,
                body=_models.MessageRequest,
                body_example={"target": "writer", "text": "Keep it under 200 words."},
                token=token,
            )
        },
        "/api/runs/{run_id}/resume": {
            "post": _operation(
                "Resume an interrupted or waiting run",
                "resumeRun",
                {
                    "202": _json(_ref(_models.RunSummary), "The run goes on in this server."),
                    "404": not_found,
                    "409": _error(
                        "The run has finished, another process drives it, or it was built in"
                        " Python with code this server does not have (RunNeedsCode)."
                    ),
                },
                parameters=run,
                body=_models.ResumeRequest,
                body_example={},
                token=token,
            )
        },
        "/api/runs/{run_id}/fork": {
            "post": _operation(
                "Start a new run that goes again from an address of this one (time travel)",
                "forkRun",
                {
                    "201": _json(
                        _ref(_models.RunSummary),
                        "The new run started: what this run recorded before `at` started is"
                        " replayed in it, `at` and what follows run live.",
                    ),
                    "404": not_found,
                    "409": _error(
                        "The run never started `at`, `set` names a step that had not finished"
                        " before `at` started (ForkRefused), or the run was built in Python"
                        " with code this server does not have (RunNeedsCode)."
                    ),
                },
                parameters=run,
                body=_models.ForkRequest,
                body_example={"at": "review", "set": {"draft": "A shorter draft."}},
                token=token,
            )
        },
        "/api/fleet": {
            "get": _operation(
                "The fleet of the server's store: its live supervisors, their workers, the queue",
                "getFleet",
                {
                    "200": _json(
                        _ref(Fleet),
                        "What `cadenza fleet --json` prints: each supervisor on the store's"
                        " roll with its load and its workers', and the queued runs by"
                        " priority with the oldest one's age.",
                    )
                },
                token=token,
            )
        },
        "/api/workflows": {
            "get": _operation(
                "Workflow files under the server's root",
                "listWorkflows",
                {"200": _json(_ref(_models.WorkflowList), "Paths relative to the root.")},
                token=token,
            )
        },
    }
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "Cadenza run viewer API",
            "version": "1",
            "description": "The HTTP API of `cadenza serve` (docs/api.md).",
        },
        "paths": ops,
        "components": {"schemas": components},
    }
    if token:
        document["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        document["security"] = [{"bearer": []}]
    return document
