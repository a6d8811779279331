"""The viewer as an ASGI application: the page, its assets, the API, the guard.

`create_app` builds a Starlette application. Given no runtime it opens one on
the store for its lifespan (what ``cadenza serve`` does); given a running
`cadenza.Runtime`, it serves that one, so a service can mount the viewer
beside its own routes and watch the runs it starts.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from cadenza import Runtime
from cadenza.actors.run import PricesLike
from cadenza.errors import (
    CadenzaError,
    CorruptRecord,
    ForkRefused,
    InputError,
    LeaseHeld,
    MessageRefused,
    RunNotFound,
    SignalRejected,
    StoreError,
)
from cadenza.workflow import WorkflowError

from ._guard import Guard
from ._limits import DEFAULT_LIMITS, BodyLimit, Limits
from ._models import ApiError, ErrorBody
from ._openapi import openapi_document
from ._routes import Api, HttpProblem, json_response

if TYPE_CHECKING:
    from cadenza.remote import Dispatcher

__all__ = ["STATIC", "create_app"]

STATIC: Final = Path(__file__).resolve().parent / "static"
"""The page's assets, shipped in the package (no build step, nothing from a CDN)."""

_STATUS: Final[list[tuple[type[CadenzaError], int]]] = [
    (RunNotFound, 404),
    (LeaseHeld, 409),
    (CorruptRecord, 500),
    (StoreError, 500),
    (SignalRejected, 422),
    (WorkflowError, 422),
    (ForkRefused, 409),
    (InputError, 422),
    (MessageRefused, 429),
    (CadenzaError, 409),
]


def create_app(  # noqa: PLR0913 -- keyword-only options, each documented in docs/api.md
    runtime: Runtime | None = None,
    *,
    store: str | os.PathLike[str] | None = None,
    root: str | os.PathLike[str] = ".",
    token: str | None = None,
    loopback: bool = True,
    default_model: str | None = None,
    prices: PricesLike | None = None,
    poll: float = 0.5,
    recover: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    capacity: int | None = None,
    workers: Dispatcher | None = None,
) -> Starlette:
    """The viewer's ASGI application.

    Args:
        runtime: A running runtime to serve; None opens one on ``store`` for the
            application's lifespan.
        store: The run store (with ``runtime`` None): a SQLite path or a PostgreSQL
            URL; None keeps runs in memory.
        root: Workflow files may be started from this directory and below only.
        token: When given, every request must carry it (bearer header or cookie).
        loopback: Answer only requests addressed to a loopback host name.
        default_model: The model of steps that name no agent (with ``runtime`` None).
        prices: With ``runtime`` None: model prices over the shipped ones and each
            workflow's (`cadenza.Runtime`'s ``prices``).
        poll: Seconds between store reads when following a run another process drives.
        recover: With ``runtime`` None: the runtime takes over the store's orphaned
            and answered runs (`cadenza.Runtime`'s ``recover``).
        limits: The caps on a request's body and on open event streams (the
            others are the server's: see `Limits`).
        capacity: With ``runtime`` None: the runtime starts queued runs while it
            drives fewer than this many (`cadenza.Runtime`'s ``capacity``).
        workers: With ``runtime`` None: the runtime runs its steps on the workers
            that connect to this dispatcher (`cadenza.Runtime`'s ``workers``).

    Returns:
        The application; ``app.state.api`` holds the endpoints (``api.stopping``
        ends open event streams when set).
    """
    api = Api(Path(root), poll, max_streams=limits.max_streams)
    api.runtime = runtime  # None until the lifespan opens one
    document = openapi_document(token=token is not None)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if runtime is not None:
            yield
            return
        async with Runtime(
            store=store,
            default_model=default_model,
            prices=prices,
            recover=recover,
            capacity=capacity,
            workers=workers,
        ) as owned:
            api.runtime = owned
            try:
                yield
            finally:
                api.stopping.set()
                api.runtime = None

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})

    async def openapi(request: Request) -> Response:
        return json_response(document)

    run = "/api/runs/{run_id}"
    routes = [
        Route("/", index, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/api/runs", api.list_runs, methods=["GET"]),
        Route("/api/runs", api.start_run, methods=["POST"]),
        Route("/api/workflows", api.list_workflows, methods=["GET"]),
        Route("/api/fleet", api.get_fleet, methods=["GET"]),
        Route(run, api.get_run, methods=["GET"]),
        Route(f"{run}/result", api.get_result, methods=["GET"]),
        Route(f"{run}/events", api.get_events, methods=["GET"]),
        Route(f"{run}/events/stream", api.stream_events, methods=["GET"]),
        Route(f"{run}/workflow", api.get_workflow, methods=["GET"]),
        Route(f"{run}/inputs", api.get_inputs, methods=["GET"]),
        Route(f"{run}/signal", api.signal_run, methods=["POST"]),
        Route(f"{run}/cancel", api.cancel_run, methods=["POST"]),
        Route(f"{run}/messages", api.post_message, methods=["POST"]),
        Route(f"{run}/resume", api.resume_run, methods=["POST"]),
        Route(f"{run}/fork", api.fork_run, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(Guard, token=token, loopback=loopback),  # first: strangers learn nothing
            Middleware(BodyLimit, max_body=limits.max_body),
        ],
        exception_handlers={
            HttpProblem: _problem,
            CadenzaError: _cadenza_error,
            HTTPException: _http_error,
        },
        lifespan=lifespan,
    )
    app.state.api = api
    return app


def _error(status: int, kind: str, message: str, problems: list[str] | None = None) -> Response:
    body = ErrorBody(ApiError(type=kind, message=message, problems=problems or []))
    return json_response(body, status)


async def _problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpProblem)
    response = _error(exc.status, exc.kind, exc.message, exc.problems)
    if exc.status == 503:  # over a limit: the connection goes too, or it would hold a place
        response.headers["connection"] = "close"
    return response


async def _cadenza_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, CadenzaError)
    status = next(code for kind, code in _STATUS if isinstance(exc, kind))
    problems = [str(p) for p in exc.problems] if isinstance(exc, WorkflowError) else []
    message = "the workflow is invalid" if problems else str(exc)
    return _error(status, type(exc).__name__, message, problems)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kinds = {404: "NotFound", 405: "MethodNotAllowed"}
    return _error(exc.status_code, kinds.get(exc.status_code, "HTTPError"), exc.detail)
