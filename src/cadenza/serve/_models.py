"""The HTTP API's bodies: msgspec Structs, camelCase on the wire, unknown keys refused.

Responses reuse the result and event types of `cadenza.protocols`; the
structs here are what the API adds around them (pages, summaries, requests).
Their JSON Schemas feed the OpenAPI document (``_openapi.py``), so the code
and the document cannot drift apart.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from cadenza.protocols import Event, RunStatus
from cadenza.store import RunRow

__all__ = [
    "ApiError",
    "CancelRequest",
    "ErrorBody",
    "EventPage",
    "ForkLink",
    "ForkRequest",
    "PendingInput",
    "ResumeRequest",
    "RunDetail",
    "RunPage",
    "RunSummary",
    "SignalAccepted",
    "SignalRequest",
    "StartRequest",
    "WorkflowFile",
    "WorkflowList",
    "detail",
    "summary",
]


class _Body(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """Base: immutable, camelCase, unknown fields refused (a typo is an error, not a no-op)."""


class RunSummary(_Body, frozen=True):
    """A stored run as the run list shows it.

    Attributes:
        run_id: The run's id.
        workflow: The workflow's name.
        path: The workflow file the run came from, when there is one.
        status: ``queued``, ``running``, ``completed``, ``failed``, ``cancelled`` or
            ``waiting``.
        created_at: Epoch seconds when the run started (a queued run: was submitted).
        updated_at: Epoch seconds of the last status change.
        inputs: The run's inputs after defaults.
        live: True when this server drives the run (it can be cancelled here).
        parent_run_id: The run this one was forked from (``POST .../fork``), else null.
        parent_address: The address it was forked at: from there on it ran itself.
    """

    run_id: str
    workflow: str
    path: str | None
    status: RunStatus
    created_at: float
    updated_at: float
    inputs: dict[str, Any] = {}
    live: bool = False
    parent_run_id: str | None = None
    parent_address: str | None = None


class ForkLink(_Body, frozen=True):
    """A run forked from another: its id, the address it runs again from, its status."""

    run_id: str
    at: str | None
    status: RunStatus
    created_at: float


class RunDetail(RunSummary, frozen=True):
    """One run, as ``GET /api/runs/{id}`` shows it: its summary and the runs forked from it.

    Attributes:
        forks: The runs forked from this one, oldest first.
    """

    forks: list[ForkLink] = []


def summary(row: RunRow, *, live: bool = False) -> RunSummary:
    """The summary of a stored run row."""
    return RunSummary(**_summary_fields(row, live))


def detail(row: RunRow, forks: list[RunRow], *, live: bool = False) -> RunDetail:
    """The detail of a stored run row, with the rows of the runs forked from it."""
    links = [
        ForkLink(run_id=f.run_id, at=f.parent_address, status=f.status, created_at=f.created_at)
        for f in forks
    ]
    return RunDetail(**_summary_fields(row, live), forks=links)


def _summary_fields(row: RunRow, live: bool) -> dict[str, Any]:
    return {
        "run_id": row.run_id,
        "workflow": row.workflow,
        "path": row.path,
        "status": row.status,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "inputs": row.inputs,
        "live": live,
        "parent_run_id": row.parent_run_id,
        "parent_address": row.parent_address,
    }


class RunPage(_Body, frozen=True):
    """One page of the run list, most recent first."""

    runs: list[RunSummary]
    offset: int
    limit: int
    total: int


class EventPage(_Body, frozen=True):
    """Events of a run after a ``seq``; ``next`` is the ``after`` of the next page."""

    events: list[Event]
    next: int
    more: bool


class PendingInput(_Body, frozen=True):
    """A question a waiting run asks a person."""

    address: str
    prompt: str
    schema: dict[str, Any] | None = None


class WorkflowFile(_Body, frozen=True):
    """A workflow file under the server's root, as a path relative to it."""

    path: str


class WorkflowList(_Body, frozen=True):
    """Workflow files under the server's root (at most 500)."""

    root: str
    workflows: list[WorkflowFile]


RunIdText = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]
"""A run id a client may choose: letters, digits and ``. _ : -``, at most 128 characters."""


class StartRequest(_Body, frozen=True):
    """Start a run of the workflow file at ``path`` (relative to the server's root).

    With ``queue``, the run is recorded ``queued`` instead, for a supervisor
    with capacity (``cadenza supervise``, ``cadenza serve --recover``) to start;
    supervisors start a higher ``priority`` first, then the oldest.
    """

    path: Annotated[str, msgspec.Meta(min_length=1)]
    inputs: dict[str, Any] = {}
    run_id: RunIdText | None = None
    queue: bool = False
    priority: int | None = None


class SignalRequest(_Body, frozen=True):
    """A person's answer for the step waiting at ``address``; ``resume`` continues the run."""

    address: str
    data: Any = None
    resume: bool = True


class SignalAccepted(_Body, frozen=True):
    """The answer was recorded; ``resumed`` tells whether the run goes on now."""

    run_id: str
    address: str
    resumed: bool


class CancelRequest(_Body, frozen=True):
    """Why the run is cancelled (recorded in its steps' errors)."""

    reason: str = "cancelled from cadenza serve"


class MessageRequest(_Body, frozen=True):
    """A message for the step ``target`` (a step id or an address), as an agent would send it."""

    target: str
    text: str
    kind: str = "info"


class MessageAccepted(_Body, frozen=True):
    """The message is on its way: at once to a run this server drives, else through the store."""

    run_id: str
    target: str


class ResumeRequest(_Body, frozen=True):
    """Continue the run (no options yet: send ``{}``)."""


class ForkRequest(_Body, frozen=True):
    """Start a new run that goes again from the address ``at`` of this one.

    Attributes:
        at: The address to run again from: one the run started.
        inputs: Inputs that replace the run's (the others stay).
        set: New outputs of steps that finished before ``at`` started, by address:
            a string is the step's text, any other JSON value its result.
        run_id: The new run's id (default: a new unique id).
    """

    at: Annotated[str, msgspec.Meta(min_length=1)]
    inputs: dict[str, Any] = {}
    set_: dict[str, Any] = msgspec.field(default_factory=dict, name="set")
    run_id: RunIdText | None = None


class ApiError(_Body, frozen=True):
    """What went wrong: the error's type and a message a person can act on."""

    type: str
    message: str
    problems: list[str] = []


class ErrorBody(_Body, frozen=True):
    """The body of every 4xx and 5xx answer."""

    error: ApiError
