"""The worker wire protocol: what a supervisor and its workers say over ZeroMQ.

Every message is one msgpack frame holding one msgspec Struct of a tagged union
(the tag is the field ``t``). A worker's DEALER sends `WorkerMessage`; the
supervisor's ROUTER sends `SupervisorMessage`. Each socket owner builds its own
typed decoder (`supervisor_decoder`, `worker_decoder`): a frame that is not
valid msgpack, names an unknown tag or has a field of the wrong type fails to
decode and is rejected at the edge. Nothing is ever pickled.

Conversation (docs/protocol.md has the whole of it)::

    worker                                  supervisor
    Hello(version, name, capacity)    -->
                                      <--   Welcome(version, heartbeat, liveness)
                                      <--   Dispatch(job, attempt, order)   (credit: capacity)
    Event / Mail(job, attempt, ...)   -->
    Call(job, attempt, call)          -->
                                      <--   Durable(job, attempt, calls)   (that many committed)
    Result(job, attempt, status, ...) -->   (one credit back)
    Heartbeat                        <-->   Heartbeat            (every interval, both ways)
    Ready(capacity=0)                 -->   (draining: no more work)
    Disconnect                        -->

Schema evolution: new fields get defaults and go last; no field changes type;
an incompatible change bumps `PROTOCOL_VERSION`, which `Hello` and `Welcome`
carry and both ends check.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

import msgspec

from ._calls import CallRecord
from ._events import Event, Tokens
from ._result import ErrorInfo, Usage

__all__ = [
    "MAX_CAPACITY",
    "PROTOCOL_VERSION",
    "WORKER_NAME",
    "AgentOrder",
    "CallMade",
    "Cancel",
    "CommandOrder",
    "CostLeft",
    "Disconnect",
    "Dispatch",
    "Durable",
    "HandlerOrder",
    "Heartbeat",
    "Hello",
    "KindOrder",
    "Mail",
    "Ready",
    "Result",
    "StepEvent",
    "SupervisorMessage",
    "ToolOrder",
    "Welcome",
    "WireError",
    "WorkOrder",
    "WorkerMessage",
    "supervisor_decoder",
    "worker_decoder",
]

PROTOCOL_VERSION: Final = 6
"""The wire protocol's version; a peer with another one is refused.

6: the supervisor confirms the calls it has committed (``durable``), and a worker
waits for that before a tool runs (a supervisor of version 5 never confirms, so a
worker of 6 would wait for nothing).
5: an agent order carries the calls it replays (``recorded``), and a worker sends
each call it makes back (``call``) for the run's journal (a worker of version 4
would make every call of a resumed step again).
4: ``registered`` orders, for a kind of step registered with Cadenza (a worker of
version 3 could not decode one). 3: streamed text is an ``output`` event (``delta``,
``done``), not ``agent_delta``: a supervisor of version 2 would record each one.
2: ``tool`` orders."""


class _Message(msgspec.Struct, frozen=True, tag_field="t", omit_defaults=True):
    """Base of every wire message: a tagged, immutable Struct."""


# -- work orders: everything a worker needs to run one step attempt -------------------


class _Order(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", omit_defaults=True):
    """What every work order carries.

    Attributes:
        run_id: The run the step belongs to.
        address: The step's namespaced address.
        attempt: The step's own attempt (1, then 2 for its first retry...); a
            re-dispatch after a lost worker keeps it, so the idempotency key stays.
        idempotency_key: ``run_id:address:attempt``.
        base_dir: The workflow's directory (handlers, tools and ``cwd`` resolve there).
        timeout: Seconds one attempt may take on the worker, or None.
    """

    run_id: str
    address: str
    attempt: int
    idempotency_key: str
    base_dir: str
    timeout: float | None = None


class CommandOrder(_Order, frozen=True, kw_only=True, tag="command"):
    """Run a ``command`` step: its templates are already rendered by the supervisor.

    ``env`` holds the step's own variables and ``CADENZA_*``; the worker adds them
    to its own environment (secrets of the supervisor's environment never travel).
    ``cwd`` is None for the worker's working directory.
    """

    command: str | list[str]
    env: dict[str, str] = {}
    cwd: str | None = None
    stdin: str | None = None


class HandlerOrder(_Order, frozen=True, kw_only=True, tag="handler"):
    """Run a ``handler`` step: the reference and what its `StepContext` shows.

    ``steps`` maps a step id to ``{content, result, status}``; ``brief`` is the
    controller's `Brief` as plain data (empty for none).
    """

    handler: str
    inputs: dict[str, Any] = {}
    steps: dict[str, dict[str, Any]] = {}
    item: Any = None
    index: int | None = None
    iteration: int | None = None
    brief: dict[str, Any] = {}


class CostLeft(msgspec.Struct, frozen=True, kw_only=True):
    """The cost budget of a remote agent step that has least left, as it stood at dispatch,
    and the price of the step's model: the worker reserves each call against it as the
    run would (as ``tokens_spent`` does for ``maxTokens``).

    Attributes:
        limit: The budget, in USD.
        spent: What the calls it covers had spent at dispatch, in USD.
        what: The budget in words (``the run's cost budget``), for the error.
        key: Where it is set (``options.maxCost``), for the error.
        input: The model's price of an input token, USD per million.
        output: The same for an output token.
        cached_input: The same for a cached input token; None: as ``input``.
    """

    limit: float
    spent: float
    what: Annotated[str, msgspec.Meta(max_length=400)]
    key: Annotated[str, msgspec.Meta(max_length=400)]
    input: float
    output: float
    cached_input: float | None = None


class AgentOrder(_Order, frozen=True, kw_only=True, tag="agent"):
    """Run an ``agent`` step's tool-calling loop from a prompt built by the supervisor.

    ``agent`` is the agent's definition in workflow-file form (None: the default
    agent); ``model`` the resolved ``provider:model``. ``tokens_spent`` is the
    run's usage when dispatched, so the worker checks ``max_tokens`` as the run would.
    ``max_retries`` is the step's (or workflow's) ``maxRetries`` for each model call.
    """

    agent_name: str | None = None
    agent: dict[str, Any] | None = None
    model: str
    prompt: str
    max_tokens: int | None = None
    tokens_spent: int = 0
    can_send_messages: bool = True
    max_retries: int | None = None
    thinking: Literal["off", "low", "medium", "high"] | None = None
    """The run's ``thinking`` level for agents that set none (``--thinking``)."""
    recorded: list[CallRecord] = []
    """The calls this attempt replays: the journal of the attempt a resumed run's step
    continues (empty on a first try)."""
    cost: CostLeft | None = None
    """The cost budget the step's calls pass that has least left (None: none covers it)."""


class ToolOrder(_Order, frozen=True, kw_only=True, tag="tool"):
    """Run a ``tool`` step: the tool's name and its arguments, ``$`` values already
    evaluated by the supervisor (they read the run's state)."""

    tool: str
    arguments: dict[str, Any] = {}


class KindOrder(_Order, frozen=True, kw_only=True, tag="registered"):
    """Run a step of a kind registered with Cadenza (`cadenza.actors.steps.LeafKind`):
    its name, and the plain data its ``prepare`` gave in the supervisor. The worker
    must have the kind registered too (``CADENZA_STEP_KINDS``)."""

    step_kind: str
    data: Any = None


WorkOrder = CommandOrder | HandlerOrder | AgentOrder | ToolOrder | KindOrder
"""One step attempt to run on a worker."""


# -- bounded fields ---------------------------------------------------------------------
# Every field a peer sends is bounded, so a malformed or hostile worker is refused at
# decoding (counted, logged) rather than granted 2**62 credits or a 100,000-character
# name copied into every event.

MAX_CAPACITY: Final = 1024
"""The most steps one worker may say it runs at once."""
WORKER_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+-]{0,63}")
"""What a worker's name may be: 1 to 64 of letters, digits and ``._@:+-``."""

_Counter = Annotated[int, msgspec.Meta(ge=0, le=2**53)]
_Capacity = Annotated[int, msgspec.Meta(ge=0, le=MAX_CAPACITY)]
_Name = Annotated[str, msgspec.Meta(pattern=f"^{WORKER_NAME.pattern}$")]
_Word = Annotated[str, msgspec.Meta(max_length=256)]
_Text = Annotated[str, msgspec.Meta(max_length=1 << 20)]


class _About(_Message, frozen=True):
    """A message about one dispatch: ``job`` numbers it, ``attempt`` is its delivery
    fence (it grows on every re-dispatch, so a late answer to an older one is dropped)."""

    job: _Counter
    attempt: _Counter


# -- supervisor -> worker --------------------------------------------------------------


class Welcome(_Message, frozen=True, tag="welcome"):
    """The supervisor accepted a `Hello`; both ends now heartbeat at this rate.

    A peer silent for ``heartbeat * liveness`` seconds is declared lost. A frame
    over ``max_message`` bytes would cut the connection: the worker reports a
    result that large as a failure instead (0: no limit said).
    """

    version: int
    heartbeat: float
    liveness: int
    max_message: int = 0


class Dispatch(_About, frozen=True, tag="dispatch"):
    """Run ``order``."""

    order: WorkOrder


class Durable(_About, frozen=True, tag="durable"):
    """The run's journal holds the first ``calls`` calls (`CallMade`) the worker sent
    for this job and fence, committed.

    A worker runs a tool only once the calls before it are confirmed, and goes on
    after a tool only once its call is: a kill of the supervisor then takes back no
    call whose effect happened, as in a run on one process.
    """

    calls: int


class Cancel(_About, frozen=True, tag="cancel"):
    """Stop a job; the worker answers with a ``cancelled`` `Result` (its credit back)."""

    reason: str = ""


# -- either way ------------------------------------------------------------------------


class Heartbeat(_Message, frozen=True, tag="heartbeat"):
    """I am alive (any message counts too)."""


class WireError(_Message, frozen=True, tag="error"):
    """A protocol-level problem, e.g. ``code="version"``; about a job when ``job`` > 0."""

    code: Annotated[str, msgspec.Meta(max_length=64)]
    message: Annotated[str, msgspec.Meta(max_length=1 << 16)]
    job: _Counter = 0
    attempt: _Counter = 0


class Disconnect(_Message, frozen=True, tag="disconnect"):
    """The sender is leaving (worker), or does not know the receiver: hello again."""

    reason: Annotated[str, msgspec.Meta(max_length=1 << 16)] = ""


# -- worker -> supervisor --------------------------------------------------------------


class Hello(_Message, frozen=True, tag="hello"):
    """A worker introduces itself and grants ``capacity`` credits (steps at once)."""

    version: _Counter
    name: _Name
    capacity: _Capacity
    pid: _Counter = 0
    host: _Word = ""


class Ready(_Message, frozen=True, tag="ready"):
    """The worker's capacity changed; 0 means draining (finish, take no more)."""

    capacity: _Capacity


class StepEvent(_About, frozen=True, tag="event"):
    """An event of a running step (an agent's turn, a tool call), for the run's stream."""

    type: Annotated[str, msgspec.Meta(max_length=64)]
    agent: _Word | None = None
    message: _Text | None = None
    duration: float | None = None
    tokens: Tokens | None = None
    error: _Text | None = None
    data: dict[str, Any] | None = None
    delta: _Text | None = None
    """Streamed model text (an ``output`` event), as the envelope's ``delta``."""
    done: bool | None = None
    """The ``output`` event's ``done``: the reply's text ends."""
    reasoning: bool | None = None
    """The ``output`` event's ``reasoning``: ``delta`` is the model's reasoning."""

    @classmethod
    def of(cls, job: int, attempt: int, event: Event) -> StepEvent:
        """What a worker sends of ``event``, one of its step's (its duration in seconds)."""
        duration = float(event.duration.rstrip("s")) if event.duration else None
        carried = {name: getattr(event, name) for name in _CARRIED}
        return cls(job, attempt, event.type, duration=duration, **carried)


_CARRIED: Final = ("agent", "message", "tokens", "error", "data", "delta", "done", "reasoning")
"""The fields of an `Event` a `StepEvent` carries as they are."""


class Mail(_About, frozen=True, tag="mail"):
    """An agent's ``send_message`` to the run's coordinator."""

    text: _Text


class CallMade(_About, frozen=True, tag="call"):
    """A call an agent step made on the worker, for the run's journal (`CallRecord`)."""

    call: CallRecord


class Result(_About, frozen=True, tag="result"):
    """The outcome of one dispatch: exactly one per `Dispatch` a worker took."""

    status: Literal["completed", "failed", "cancelled"]
    content: str | None = None
    result: Any = None
    error: ErrorInfo | None = None
    usage: Usage | None = None


SupervisorMessage = Welcome | Dispatch | Durable | Cancel | Heartbeat | WireError | Disconnect
"""What a worker's DEALER receives."""

WorkerMessage = (
    Hello | Ready | Heartbeat | StepEvent | Mail | CallMade | Result | WireError | Disconnect
)
"""What the supervisor's ROUTER receives (after the peer's identity frame)."""


def supervisor_decoder() -> msgspec.msgpack.Decoder[WorkerMessage]:
    """A typed decoder for the supervisor's socket: one per socket, never shared."""
    return msgspec.msgpack.Decoder(WorkerMessage)


def worker_decoder() -> msgspec.msgpack.Decoder[SupervisorMessage]:
    """A typed decoder for a worker's socket: one per socket, never shared."""
    return msgspec.msgpack.Decoder(SupervisorMessage)
