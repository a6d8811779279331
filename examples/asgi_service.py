"""A service that embeds Cadenza: runs over HTTP, their events as server-sent events.

    pip install -e '.[serve]'
    python examples/asgi_service.py --store .cadenza/tickets.db      # http://127.0.0.1:8000

    curl -s -X POST localhost:8000/runs -H 'Content-Type: application/json' \\
         -d '{"inputs": {"ticket": "The export page is down"}}'         # 201 {"runId": ...}
    curl -s localhost:8000/runs                                        # newest first
    curl -s localhost:8000/runs/RUN_ID                                 # status and result
    curl -N localhost:8000/runs/RUN_ID/events                          # server-sent events
    curl -s -X POST localhost:8000/runs/RUN_ID/messages -H 'Content-Type: application/json' \\
         -d '{"to": "draft", "text": "Mention the status page."}'
    curl -s -X POST localhost:8000/runs/RUN_ID/cancel

The application's lifespan owns one `cadenza.Runtime` on a SQLite store (the
``--store`` option, or ``ASGI_SERVICE_STORE``): a run is a task of the runtime,
not of the request that started it, and outlives it. The workflow is
``asgi_flow.yaml`` beside this file (handlers in ``asgi_steps.py``, a scripted
writer: no network, no API key).

- Startup resumes every run the previous process left unfinished, whether it
  was shut down or crashed: ``runtime.resumable()``, then ``runtime.resume``.
  Finished steps are replayed from the store, not run again.
- ``GET /runs/{id}/events`` sends what the store holds and then, while this
  process drives the run, the live events (`RunHandle.events`): one message
  per event (``id:`` its ``seq``, ``data:`` its JSON), then an ``end`` message
  with the run's status once it has ended. A stream cut short (shutdown, a
  lost connection) has no ``end``: reconnect with ``Last-Event-ID`` (or
  ``?after=SEQ``) to continue after the last event received.
- Shutdown (Ctrl-C, SIGTERM) first ends the open event streams, so uvicorn
  does not wait for clients to hang up, then leaves the runtime: runs still
  going are interrupted, not cancelled. Each stays ``running`` with its
  finished steps recorded, and the next startup finishes it.
- ``POST /runs/{id}/cancel`` is final: the run ends ``cancelled``. Its steps
  get `CANCEL_DEADLINE` seconds to stop before they are stopped outright.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import msgspec
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

import cadenza
from cadenza import CadenzaError, Event, EventSubscription, InputError, RunNotFound, RunResult
from cadenza.errors import LeaseHeld
from cadenza.events import WorkflowEnd, payload

__all__ = ["Server", "Service", "main", "server"]

WORKFLOW: Final = Path(__file__).resolve().with_name("asgi_flow.yaml")
STORE_VARIABLE: Final = "ASGI_SERVICE_STORE"
DEFAULT_STORE: Final = ".cadenza/asgi-service.db"
CANCEL_DEADLINE: Final = 30.0
"""Seconds a cancelled run's steps get to stop cleanly (`RunHandle.cancel`)."""
KEEPALIVE: Final = 15.0
"""Seconds between comment lines on a quiet event stream (they also notice lost clients)."""
KINDS: Final = frozenset({"info", "context", "reply", "cancel"})
"""The kinds of message a step accepts from the coordinator."""

log = logging.getLogger("asgi_service")
_encode = msgspec.json.Encoder().encode
_Body = TypeVar("_Body", bound=msgspec.Struct)


# -- what goes over the wire -----------------------------------------------------------


class StartRun(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """``POST /runs``: the workflow's inputs, and optionally the run's id."""

    inputs: dict[str, Any] = msgspec.field(default_factory=dict)
    run_id: str | None = None


class PostMessage(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /runs/{id}/messages``: a message to a step, from the coordinator."""

    to: str
    text: str
    kind: str = "info"


class CancelRun(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /runs/{id}/cancel``: why (recorded as the run's error message)."""

    reason: str = "cancelled over HTTP"


class RunSummary(msgspec.Struct, rename="camel"):
    """A run as listed: ``live`` is true while this process drives it."""

    run_id: str
    workflow: str
    status: str
    created_at: float
    updated_at: float
    live: bool


class RunDetail(RunSummary):
    """A run with its result JSON (SPEC section 8); None while it runs."""

    result: RunResult | None = None


class Accepted(msgspec.Struct, rename="camel"):
    """What ``POST`` endpoints answer: the run, and what happens to it now."""

    run_id: str
    status: str


class Problem(Exception):
    """A request the service refuses: its HTTP status and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def json_response(body: Any, status: int = 200) -> Response:
    """``body`` (msgspec Structs included) as JSON."""
    return Response(_encode(body), status_code=status, media_type="application/json")


# -- the service -----------------------------------------------------------------------


class Service:
    """The HTTP endpoints over one runtime, which the application's lifespan owns.

    Args:
        store: The SQLite run store (created with its directory if missing).
        workflow: The workflow every ``POST /runs`` starts.
    """

    def __init__(
        self, store: str | os.PathLike[str], *, workflow: str | os.PathLike[str] = WORKFLOW
    ) -> None:
        self.store = Path(store)
        self.workflow = cadenza.load_workflow(workflow)
        self.resumed: list[str] = []
        """The runs the last startup resumed."""
        self._runtime: cadenza.Runtime | None = None
        self._streams: set[EventSubscription] = set()
        self._stopping = False
        run = "/runs/{run_id}"
        self.app = Starlette(
            routes=[
                Route("/runs", self.start_run, methods=["POST"]),
                Route("/runs", self.list_runs, methods=["GET"]),
                Route(run, self.get_run, methods=["GET"]),
                Route(f"{run}/events", self.events, methods=["GET"]),
                Route(f"{run}/messages", self.post_message, methods=["POST"]),
                Route(f"{run}/cancel", self.cancel_run, methods=["POST"]),
            ],
            exception_handlers={Problem: _problem, CadenzaError: _cadenza_error},
            lifespan=self.lifespan,
        )

    @property
    def runtime(self) -> cadenza.Runtime:
        """The runtime, between the lifespan's startup and shutdown."""
        if self._runtime is None:
            raise Problem(503, "the service is not running")
        return self._runtime

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Opens the runtime and resumes interrupted runs; at shutdown, leaves it."""
        self.store.parent.mkdir(parents=True, exist_ok=True)
        self._stopping = False
        async with cadenza.Runtime(store=self.store) as runtime:
            self._runtime = runtime
            try:
                await self._resume_unfinished(runtime)
                yield
            finally:
                await self.end_streams()
                self._runtime = None
        # Leaving the runtime interrupted the runs still going: resumed next startup.

    async def _resume_unfinished(self, runtime: cadenza.Runtime) -> None:
        self.resumed = []
        for row in await runtime.resumable():
            try:
                await runtime.resume(row.run_id)
            except CadenzaError as error:  # driven by another process, or unreadable
                log.warning("run %s not resumed: %s", row.run_id, error)
            else:
                self.resumed.append(row.run_id)
        if self.resumed:
            log.info("resumed %d unfinished run(s)", len(self.resumed))

    async def end_streams(self) -> None:
        """Ends every open event stream, and refuses new live ones: the server stops."""
        self._stopping = True
        for subscription in list(self._streams):
            await subscription.aclose()

    async def start_run(self, request: Request) -> Response:
        """Starts a run of the workflow; 201 with its id, 422 for bad inputs."""
        body = await _decode(request, StartRun)
        handle = await self.runtime.start(self.workflow, inputs=body.inputs, run_id=body.run_id)
        return json_response(Accepted(handle.run_id, "running"), 201)

    async def list_runs(self, request: Request) -> Response:
        """The newest runs first (``?limit=N``, at most 1000)."""
        limit = _integer(request.query_params.get("limit"), "limit", default=100)
        if not 1 <= limit <= 1000:
            raise Problem(400, "limit must be between 1 and 1000")
        runtime = self.runtime
        rows = await runtime.list_runs(limit=limit)
        live = {row.run_id for row in rows if runtime.handle(row.run_id) is not None}
        runs = [
            RunSummary(r.run_id, r.workflow, r.status, r.created_at, r.updated_at, r.run_id in live)
            for r in rows
        ]
        return json_response({"runs": runs})

    async def get_run(self, request: Request) -> Response:
        """The run's status, and its result once it has ended; 404 if there is none."""
        runtime = self.runtime
        row = await runtime.get_run(request.path_params["run_id"])
        live = runtime.handle(row.run_id) is not None
        result = None if row.status == "running" else row.result
        detail = RunDetail(
            row.run_id, row.workflow, row.status, row.created_at, row.updated_at, live, result
        )
        return json_response(detail)

    async def events(self, request: Request) -> Response:
        """The run's events as server-sent events (see the module docstring)."""
        runtime, run_id = self.runtime, request.path_params["run_id"]
        header = request.headers.get("last-event-id") or request.query_params.get("after")
        after = _integer(header, "Last-Event-ID", default=0)
        handle = runtime.handle(run_id)
        source: AsyncIterator[Event]
        if handle is not None and not self._stopping:
            subscription = handle.events()
            self._streams.add(subscription)
            source = subscription
        else:
            await runtime.get_run(run_id)  # 404 if there is no such run
            source = _iterate(await runtime.stored_events(run_id))
        return StreamingResponse(
            self._sse(source, after),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    async def _sse(self, events: AsyncIterator[Event], after: int) -> AsyncIterator[bytes]:
        status: str | None = None  # the run's, once its (latest) drive has ended
        last = after
        try:
            while True:
                with anyio.move_on_after(KEEPALIVE) as quiet:
                    event = await anext(events, None)
                if quiet.cancelled_caught:
                    yield b": keep-alive\n\n"
                    continue
                if event is None:
                    break
                if event.type == "workflow_end":
                    status = payload(event, WorkflowEnd).status
                elif event.type in ("run_resumed", "run_interrupted"):
                    status = None  # the run goes on (or will, once resumed)
                if event.seq <= after:
                    continue
                last = event.seq
                yield b"id: %d\ndata: %s\n\n" % (event.seq, _encode(event))
            if status is not None:
                yield b"event: end\ndata: %s\n\n" % _encode({"status": status, "seq": last})
        finally:
            if isinstance(events, EventSubscription):
                self._streams.discard(events)
                await events.aclose()

    async def post_message(self, request: Request) -> Response:
        """Posts a coordinator message to a step of a live run; 202, or 409 if not live."""
        body = await _decode(request, PostMessage)
        if body.kind not in KINDS:
            raise Problem(400, f"kind must be one of {sorted(KINDS)}")
        if not body.to or not body.text:
            raise Problem(400, "a message needs a step ('to') and a text")
        handle = await self._live_handle(request.path_params["run_id"])
        await handle.post_message(body.to, body.text, kind=body.kind)
        return json_response(Accepted(handle.run_id, "posted"), 202)

    async def cancel_run(self, request: Request) -> Response:
        """Cancels a live run; 202 (it ends ``cancelled`` shortly), or 409 if not live."""
        body = await _decode(request, CancelRun)
        handle = await self._live_handle(request.path_params["run_id"])
        handle.cancel(body.reason, deadline=CANCEL_DEADLINE)
        return json_response(Accepted(handle.run_id, "cancelling"), 202)

    async def _live_handle(self, run_id: str) -> cadenza.RunHandle:
        runtime = self.runtime
        handle = runtime.handle(run_id)
        if handle is None or handle.done:
            row = await runtime.get_run(run_id)  # 404 if there is no such run
            raise Problem(409, f"run {run_id!r} is {row.status}, not running in this service")
        return handle


async def _iterate(events: list[Event]) -> AsyncIterator[Event]:
    for event in events:
        yield event


async def _decode(request: Request, kind: type[_Body]) -> _Body:
    if request.headers.get("content-type", "").split(";")[0].strip() not in (
        "",
        "application/json",
    ):
        raise Problem(415, "send JSON (Content-Type: application/json)")
    body = await request.body()
    try:
        return msgspec.json.decode(body or b"{}", type=kind)
    except msgspec.ValidationError as error:
        raise Problem(400, f"bad request body: {error}") from None
    except msgspec.DecodeError as error:
        raise Problem(400, f"the body is not JSON: {error}") from None


def _integer(text: str | None, name: str, *, default: int) -> int:
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise Problem(400, f"{name} must be an integer, not {text!r}") from None


def _error(status: int, kind: str, message: str) -> Response:
    return json_response({"error": {"type": kind, "message": message}}, status)


async def _problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return _error(exc.status, "Problem", exc.message)


async def _cadenza_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, CadenzaError)
    status = 404 if isinstance(exc, RunNotFound) else 422 if isinstance(exc, InputError) else 409
    if not isinstance(exc, (RunNotFound, InputError, LeaseHeld)):
        log.warning("%s: %s", type(exc).__name__, exc)
    return _error(status, type(exc).__name__, str(exc))


# -- serving ----------------------------------------------------------------------------


class Server(uvicorn.Server):
    """uvicorn, ending the service's event streams before it waits for connections to close.

    (uvicorn waits for open responses before the lifespan's shutdown: without
    this, a client following a run would hold the shutdown up.)
    """

    def __init__(self, config: uvicorn.Config, service: Service) -> None:
        super().__init__(config)
        self.service = service

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self.service.end_streams()
        await super().shutdown(sockets)


def server(service: Service, *, host: str = "127.0.0.1", port: int = 8000) -> Server:
    """A uvicorn server for ``service``: ``.run()`` it, or ``await`` its ``serve()``."""
    config = uvicorn.Config(
        service.app,
        host=host,
        port=port,
        lifespan="on",
        ws="none",
        log_level="info",
        timeout_graceful_shutdown=10,
    )
    return Server(config, service)


def main(argv: Sequence[str] | None = None) -> None:
    """Serves the example until Ctrl-C or SIGTERM."""
    parser = argparse.ArgumentParser(description="Serve the ticket-desk workflow over HTTP.")
    parser.add_argument(
        "--store",
        default=os.environ.get(STORE_VARIABLE, DEFAULT_STORE),
        help=f"the SQLite run store (default: ${STORE_VARIABLE} or {DEFAULT_STORE})",
    )
    parser.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="default: 8000 (0: any free port)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    server(Service(args.store), host=args.host, port=args.port).run()


if __name__ == "__main__":
    main()
