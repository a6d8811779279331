"""The HTTP API's endpoints: thin handlers over `cadenza.Runtime` (docs/api.md).

Every answer is JSON (events also as server-sent events); every failure is
``{"error": {"type", "message", "problems"}}`` with a status that says whose
problem it is: 400 a malformed request, 403 a path outside the root, 404 no
such run or file, 409 the run's state forbids it, 422 a well-formed request
the workflow or run refuses (invalid workflow, inputs, answer).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response

from cadenza import Runtime
from cadenza.actors.run import decode_document
from cadenza.errors import CadenzaError, LeaseHeld, PolicyRefused, RunNeedsCode
from cadenza.llm import usd
from cadenza.protocols import (
    FINISHED,
    Event,
    EventType,
    MessageRecord,
    MessageSent,
    RunResult,
    RunStatus,
    Usage,
    payload,
)
from cadenza.store import RunRow
from cadenza.workflow import LoadedWorkflow, load_workflow

from ._limits import StreamSlots
from ._models import (
    CancelRequest,
    EventPage,
    ForkRequest,
    MessageAccepted,
    MessageRequest,
    PendingInput,
    ResumeRequest,
    RunPage,
    RunSummary,
    SignalAccepted,
    SignalRequest,
    StartRequest,
    WorkflowFile,
    WorkflowList,
    detail,
    summary,
)
from ._stream import EventStream
from ._structure import run_structure

__all__ = ["Api", "HttpProblem", "json_response"]

STATUSES: Final = ("queued", "running", "completed", "failed", "cancelled", "waiting")
WORKFLOW_SUFFIXES: Final = (".yaml", ".yml", ".json")
_MAX_WORKFLOWS: Final = 500
_SKIP_DIRS: Final = frozenset({"node_modules", "__pycache__", "venv", "site-packages"})

_encode = msgspec.json.Encoder().encode
T = TypeVar("T")


class HttpProblem(Exception):
    """An HTTP error answer: status, error type and message (turned into JSON by the app)."""

    def __init__(self, status: int, kind: str, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.problems = problems or []


def json_response(value: Any, status: int = 200) -> Response:
    """A JSON answer encoded by msgspec (camelCase structs, no extra copies)."""
    return Response(_encode(value), status_code=status, media_type="application/json")


def _query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise HttpProblem(
            400, "BadRequest", f"{name} must be a whole number, not {text!r}"
        ) from None
    if not low <= value <= high:
        raise HttpProblem(400, "BadRequest", f"{name} must be between {low} and {high}")
    return value


async def _decode(request: Request, kind: type[T]) -> T:
    body = await request.body()
    try:
        return msgspec.json.decode(body or b"{}", type=kind)
    except msgspec.ValidationError as error:
        raise HttpProblem(422, "Invalid", f"the request body does not fit: {error}") from None
    except msgspec.DecodeError as error:
        raise HttpProblem(400, "BadRequest", f"the request body is not JSON: {error}") from None


class Api:
    """The endpoints, bound to a runtime (set once the app has started) and a root directory.

    Args:
        root: Workflow files may be started from this directory and below only.
        poll: Seconds between store reads when following a run another process drives.
        max_streams: Event streams open at once; one more is answered 503.
    """

    def __init__(self, root: Path, poll: float, *, max_streams: int) -> None:
        self.root = root.resolve()
        self.poll = poll
        self.streams = StreamSlots(max_streams)
        self._runtime: Runtime | None = None
        self._stopping: anyio.Event | None = None

    @property
    def runtime(self) -> Runtime:
        """The runtime serving requests."""
        if self._runtime is None:
            raise RuntimeError("the viewer's runtime is not running yet")
        return self._runtime

    @runtime.setter
    def runtime(self, runtime: Runtime | None) -> None:
        self._runtime = runtime

    @property
    def stopping(self) -> anyio.Event:
        """Set when the server shuts down: open event streams end."""
        if self._stopping is None:
            self._stopping = anyio.Event()
        return self._stopping

    def _live(self, run_id: str) -> bool:
        handle = self.runtime.handle(run_id)
        return handle is not None and not handle.done

    async def _row(self, request: Request) -> RunRow:
        return await self.runtime.get_run(request.path_params["run_id"])

    # Reading ----------------------------------------------------------------------

    async def list_runs(self, request: Request) -> Response:
        """``GET /api/runs``: stored runs, newest first, filtered by status, a page at a time."""
        wanted = request.query_params.getlist("status")
        unknown = sorted(set(wanted) - set(STATUSES))
        if unknown:
            raise HttpProblem(
                400,
                "BadRequest",
                f"unknown status {unknown[0]!r}; use one of {', '.join(STATUSES)}",
            )
        limit = _query_int(request, "limit", 50, 1, 500)
        offset = _query_int(request, "offset", 0, 0, 1 << 30)
        rows = await self.runtime.list_runs(limit=1 << 30)
        if wanted:
            rows = [row for row in rows if row.status in wanted]
        page = [summary(r, live=self._live(r.run_id)) for r in rows[offset : offset + limit]]
        return json_response(RunPage(runs=page, offset=offset, limit=limit, total=len(rows)))

    async def get_fleet(self, request: Request) -> Response:
        """``GET /api/fleet``: the store's live supervisors with their workers, and the queue."""
        return json_response(await self.runtime.fleet())

    async def get_run(self, request: Request) -> Response:
        """``GET /api/runs/{run_id}``: the run's summary, and the runs forked from it."""
        row = await self._row(request)
        forks = await self.runtime.forks(row.run_id)
        return json_response(detail(row, forks, live=self._live(row.run_id)))

    async def get_result(self, request: Request) -> Response:
        """``GET /api/runs/{run_id}/result``: the result JSON, or a snapshot while it runs."""
        row = await self._row(request)
        if row.result is not None and row.status != "running":
            return json_response(row.result)
        steps = await self.runtime.store.steps(row.run_id)
        events = await self.runtime.store.events(row.run_id)
        snapshot = RunResult(
            run_id=row.run_id,
            workflow=row.workflow,
            status=row.status,
            steps=steps,
            messages=_messages(events),
            usage=_usage(events),
        )
        return json_response(snapshot)

    async def get_events(self, request: Request) -> Response:
        """``GET /api/runs/{run_id}/events``: stored events after ``after``, a page at a time."""
        row = await self._row(request)
        after = _query_int(request, "after", 0, 0, 1 << 62)
        limit = _query_int(request, "limit", 500, 1, 5000)
        events = await self.runtime.store.events(row.run_id, after_seq=after)
        page = events[:limit]
        following = page[-1].seq if page else after
        return json_response(EventPage(events=page, next=following, more=len(events) > limit))

    async def stream_events(self, request: Request) -> Response:
        """``GET /api/runs/{run_id}/events/stream``: server-sent events until the run ends."""
        row = await self._row(request)
        after = _query_int(request, "after", 0, 0, 1 << 62)
        last_id = request.headers.get("last-event-id", "")
        if last_id.isdigit() and len(last_id) < 19:
            after = max(after, int(last_id))
        if not self.streams.take():  # nothing awaited since: the slot is this response's
            raise HttpProblem(
                503,
                "Unavailable",
                f"this server has {self.streams.cap} event streams open, its limit: "
                "try again when one ends",
            )
        return EventStream(self.runtime, row.run_id, after, self.stopping, self.poll, self.streams)

    async def get_workflow(self, request: Request) -> Response:
        """``GET /api/runs/{run_id}/workflow``: the structure the run was started with."""
        row = await self._row(request)
        loaded = await self._document(row)
        return json_response(run_structure(loaded))

    async def _document(self, row: RunRow) -> LoadedWorkflow:
        body = await self.runtime.store.document(row.run_id)
        if body is not None:
            return decode_document(body, row.run_id)[0]
        if row.path is None:
            raise HttpProblem(404, "NotFound", f"run {row.run_id!r} has no stored workflow")
        try:
            return await anyio.to_thread.run_sync(load_workflow, row.path)
        except CadenzaError as error:
            raise HttpProblem(
                404, "NotFound", f"run {row.run_id!r}: its workflow file no longer loads: {error}"
            ) from None

    async def get_inputs(self, request: Request) -> Response:
        """``GET /api/runs/{run_id}/inputs``: the questions a waiting run asks."""
        row = await self._row(request)
        pending = await self.runtime.pending_inputs(row.run_id)
        return json_response(
            [
                PendingInput(
                    address=address,
                    prompt=str(question.get("prompt") or ""),
                    schema=question.get("schema")
                    if isinstance(question.get("schema"), dict)
                    else None,
                )
                for address, question in sorted(pending.items())
            ]
        )

    async def list_workflows(self, request: Request) -> Response:
        """``GET /api/workflows``: workflow files under the root, relative to it."""
        found = await anyio.to_thread.run_sync(_workflow_files, self.root)
        return json_response(
            WorkflowList(root=str(self.root), workflows=[WorkflowFile(path=p) for p in found])
        )

    # Acting ------------------------------------------------------------------------

    async def start_run(self, request: Request) -> Response:
        """``POST /api/runs``: starts a run of a workflow file under the root (or, with
        ``queue``, records it queued for a supervisor)."""
        body = await _decode(request, StartRequest)
        path = self._under_root(body.path)
        loaded = await anyio.to_thread.run_sync(load_workflow, path)
        if body.queue:
            run_id = await self.runtime.submit(
                loaded, inputs=body.inputs, run_id=body.run_id, priority=body.priority
            )
            queued = await self.runtime.get_run(run_id)
            return json_response(summary(queued, live=False), 201)
        handle = await self.runtime.start(loaded, inputs=body.inputs, run_id=body.run_id)
        now = time.time()
        row = await self.runtime.store.get_run(handle.run_id)
        started = (
            summary(row, live=True)
            if row is not None
            else RunSummary(
                run_id=handle.run_id,
                workflow=loaded.workflow.name,
                path=str(path),
                status="running",
                created_at=now,
                updated_at=now,
                inputs=dict(body.inputs),
                live=True,
            )
        )
        return json_response(started, 201)

    def _under_root(self, text: str) -> Path:
        """The workflow file ``text`` names, refusing anything outside the root."""
        missing = HttpProblem(
            404, "NotFound", f"no workflow file (.yaml, .yml, .json) {text!r} under the root"
        )
        if "\x00" in text:
            raise missing
        try:
            path = (self.root / text).resolve()
        except (OSError, ValueError, RuntimeError):
            raise missing from None
        if not path.is_relative_to(self.root):
            raise HttpProblem(403, "Forbidden", f"path {text!r} is outside the server's root")
        try:
            found = path.suffix.lower() in WORKFLOW_SUFFIXES and path.is_file()
        except OSError:
            found = False
        if not found:
            raise missing
        return path

    async def signal_run(self, request: Request) -> Response:
        """``POST /api/runs/{run_id}/signal``: records a person's answer; resumes by default."""
        row = await self._row(request)
        body = await _decode(request, SignalRequest)
        if row.status in FINISHED:
            raise HttpProblem(409, "Conflict", f"run {row.run_id!r} has finished ({row.status})")
        pending = await self.runtime.pending_inputs(row.run_id)
        if body.address not in pending:
            where = ", ".join(sorted(pending)) or "nothing"
            raise HttpProblem(
                409, "Conflict", f"run {row.run_id!r} waits at {where}, not at {body.address!r}"
            )
        await self.runtime.signal(row.run_id, body.address, body.data)
        resumed = False
        if body.resume:
            try:
                await self.runtime.resume(row.run_id)
                resumed = True
            except LeaseHeld:  # a replica with takeover was quicker: the run goes on there
                pass
            except (RunNeedsCode, PolicyRefused):  # its code or hook is elsewhere: it goes on there
                pass
        return json_response(
            SignalAccepted(run_id=row.run_id, address=body.address, resumed=resumed), 202
        )

    async def cancel_run(self, request: Request) -> Response:
        """``POST /api/runs/{run_id}/cancel``: cancels a run, whichever process drives it."""
        row = await self._row(request)
        body = await _decode(request, CancelRequest)
        await self.runtime.cancel(row.run_id, body.reason)  # finished: CadenzaError, 409
        return json_response(summary(row, live=self.runtime.handle(row.run_id) is not None), 202)

    async def post_message(self, request: Request) -> Response:
        """``POST /api/runs/{run_id}/messages``: a message to a step, wherever the run is driven."""
        row = await self._row(request)
        body = await _decode(request, MessageRequest)
        await self.runtime.post_message(row.run_id, body.target, body.text, kind=body.kind)
        return json_response(MessageAccepted(run_id=row.run_id, target=body.target), 202)

    async def resume_run(self, request: Request) -> Response:
        """``POST /api/runs/{run_id}/resume``: continues an interrupted or waiting run."""
        row = await self._row(request)
        await _decode(request, ResumeRequest)
        if row.status in FINISHED:
            raise HttpProblem(409, "Conflict", f"run {row.run_id!r} has finished ({row.status})")
        if row.status == "queued":
            raise HttpProblem(
                409, "Conflict", f"run {row.run_id!r} is queued: a supervisor starts it"
            )
        await self.runtime.resume(row.run_id)
        status: RunStatus = "running"
        resumed = msgspec.structs.replace(summary(row, live=True), status=status)
        return json_response(resumed, 202)

    async def fork_run(self, request: Request) -> Response:
        """``POST /api/runs/{run_id}/fork``: a new run, going again from an address of this one."""
        row = await self._row(request)
        body = await _decode(request, ForkRequest)
        handle = await self.runtime.fork(
            row.run_id,
            at=body.at,
            inputs=body.inputs or None,
            set=body.set_,
            new_run_id=body.run_id,
        )
        forked = await self.runtime.get_run(handle.run_id)  # recorded before fork returns
        return json_response(summary(forked, live=True), 201)


def _usage(events: list[Event]) -> Usage:
    """A running run's usage so far, from its calls' events (their tokens and cost)."""
    prompt = completion = calls = 0
    cost = 0.0
    for event in events:
        if event.type == EventType.AGENT_TURN and event.tokens is not None:
            prompt += event.tokens.prompt
            completion += event.tokens.completion
            calls += 1
            if isinstance(event.data, dict) and isinstance(event.data.get("cost"), float):
                cost += event.data["cost"]
    return Usage(
        prompt_tokens=prompt, completion_tokens=completion, llm_calls=calls, cost=usd(cost)
    )


def _messages(events: list[Event]) -> list[MessageRecord]:
    messages = []
    for event in events:
        if event.type == EventType.MESSAGE_SENT:
            sent = payload(event, MessageSent)
            messages.append(MessageRecord(from_=sent.from_, to=sent.to, text=sent.text))
    return messages


def _workflow_files(root: Path) -> list[str]:
    """Workflow files under ``root`` (four levels deep, hidden and tool folders skipped)."""
    found: list[str] = []
    for directory, subdirs, files in os.walk(root):
        here = Path(directory)
        deep = len(here.relative_to(root).parts) >= 4
        subdirs[:] = (
            []
            if deep
            else sorted(d for d in subdirs if not d.startswith(".") and d not in _SKIP_DIRS)
        )
        for name in sorted(files):
            if name.lower().endswith(WORKFLOW_SUFFIXES):
                found.append((here / name).relative_to(root).as_posix())
                if len(found) >= _MAX_WORKFLOWS:
                    return found
    return found
