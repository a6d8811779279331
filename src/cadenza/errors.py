"""Cadenza's exceptions: one root, a branch per layer.

    CadenzaError
    ├── WorkflowError            (cadenza.workflow) a document is invalid (located problems)
    ├── PricesInvalid            (cadenza.workflow) a prices file or mapping of the wrong shape
    ├── ExpressionError          a CEL expression failed to compile or evaluate
    │   ├── ExpressionSyntaxError     it does not compile (carries the column)
    │   │   ├── ExpressionTooComplex  it is longer, deeper or more nested than the caps
    │   │   └── TemplateSyntaxError   a ``{{ }}`` template does not parse
    │   ├── ExpressionEvaluationError it failed on this run's values
    │   └── PredicateNotRegistered    a Python predicate's function is not in this process
    ├── RuntimeFailure           the actor runtime refused an operation
    │   ├── AddressError         an address does not parse or is already taken
    │   ├── InboxFull            send_nowait on a full inbox
    │   ├── ActorStopped         the actor stopped before it could take or answer a message
    │   ├── AskTimeout           an ask got no reply in time
    │   └── SupervisorEscalation restarts exceeded their intensity; the supervisor gave up
    ├── RemoteError              remote workers (``cadenza.remote``) could not be set up or used
    │   ├── InsecureEndpoint     a non-loopback bind without CURVE keys (and no ``insecure``)
    │   ├── KeysError            CURVE key files are missing, unreadable or not keys
    │   └── DispatcherClosed     the dispatcher stopped while a step still needed it
    ├── InputError               a run input is missing or has the wrong type
    │   └── ForkRefused          a fork at an address the run never started, or of a step it redoes
    ├── StoreError               the run store cannot be opened or is inconsistent
    │   ├── CorruptRecord        a stored record is unreadable or contradicts the others
    │   ├── LeaseHeld            another process is running (or resuming) that run
    │   ├── LeaseLost            this process lost a run's lease; its writes are refused
    │   └── StoreFailed          the store failed a run's writes; the run stopped, resumable
    ├── RunNotFound              no run with that id in the store
    ├── RunNeedsCode             a run names Python functions this process does not have
    ├── PolicyRefused            a resume would drop or widen the run's tool permission policy
    ├── SignalRejected           a human answer that cannot be recorded (no such wait, bad shape)
    ├── MessageRefused           a posted message that a run cannot take (too many wait, too big)
    ├── ReplayRefused            a recorded run that cannot be replayed offline (not ended...)
    │
    │   defined beside the code that raises them:
    ├── LLMError                 (cadenza.llm) a model call failed
    │   ├── LLMConfigError       no key, an unknown provider or model name
    │   ├── LLMHTTPError         the provider answered with an error status
    │   ├── LLMConnectionError   the provider could not be reached
    │   ├── LLMTimeout           no answer within the deadline
    │   └── LLMResponseError     the answer could not be read
    ├── BudgetExceeded           (cadenza.actors) a ``maxTokens`` or ``maxCost`` budget is spent
    ├── HandlerError             (cadenza.actors) a ``handler`` cannot be imported or called
    ├── McpUnavailable           (cadenza.actors) an MCP server did not start or list its tools
    ├── ReplayDiffers            (cadenza.actors) an offline replay asked a call its record lacks
    ├── IsolationError           (cadenza.actors) a step's git worktree could not be made
    ├── LoopError                (cadenza.loops) a loop SDK run did not end as asked
    ├── TelemetryUnavailable     (cadenza.telemetry) OpenTelemetry is not installed
    ├── ServeError               (cadenza.serve) the viewer cannot start
    └── UsageError               (cadenza.cli) a command line that cannot be run

Every error says what went wrong and where; the CLI turns them into one line on
stderr and exit code 2 (bad input) or 1 (a failed run), never a traceback.
Control signals (cancellation, waiting for a person) are not exceptions here.
"""

from __future__ import annotations

__all__ = [
    "ActorStopped",
    "AddressError",
    "AskTimeout",
    "CadenzaError",
    "CorruptRecord",
    "DispatcherClosed",
    "ExpressionError",
    "ExpressionEvaluationError",
    "ExpressionSyntaxError",
    "ExpressionTooComplex",
    "ForkRefused",
    "InboxFull",
    "InputError",
    "InsecureEndpoint",
    "KeysError",
    "LeaseHeld",
    "LeaseLost",
    "MessageRefused",
    "PolicyRefused",
    "PredicateNotRegistered",
    "RemoteError",
    "ReplayRefused",
    "RunNeedsCode",
    "RunNotFound",
    "RuntimeFailure",
    "SignalRejected",
    "StoreError",
    "StoreFailed",
    "SupervisorEscalation",
    "TemplateSyntaxError",
]


class CadenzaError(Exception):
    """The root of every error Cadenza raises on purpose."""


class InputError(CadenzaError):
    """A run input is missing, unknown, or not of its declared type.

    Raised before a run starts; fix the ``--input``/``--inputs-file`` values.
    """


class ForkRefused(InputError):
    """A fork (``cadenza fork``, `cadenza.Runtime.fork`) was not started; nothing was written.

    Raised when the run never started the address to fork at (the message lists
    addresses it did start), or when an output is given (``--set``) for a step
    the fork does not reuse: one that had not finished before that address
    started (the message lists those it reuses). The HTTP API answers 409.
    """


class StoreError(CadenzaError):
    """The run store cannot be opened, is of a newer schema, or is inconsistent."""


class CorruptRecord(StoreError):
    """A stored record cannot be read, fails its checksum, or contradicts the others.

    Raised by ``cadenza resume`` (and `Runtime.resume`) instead of continuing a run
    from bad state. The message names the run, the table and the key. Run
    ``cadenza runs check`` to see every problem; restore the store from a backup,
    or start the run again under a new id.
    """


class LeaseHeld(StoreError):
    """Another live process holds the run's lease: it is running or resuming that run.

    Two processes must never drive one run at once. Wait for the other one to
    finish (or kill it: a lease whose process is gone is taken over at once).
    """


class LeaseLost(StoreError):
    """This process no longer holds a run's lease: another process took the run over.

    Raised by a write (a flush) or a renewal of the lease once the lease row has
    another fencing token: the process was paused, partitioned away or too slow
    to renew past the lease's time to live, and a supervisor with takeover on
    resumed the run. Nothing the former holder writes after that is recorded;
    its runtime stops driving the run. The run goes on in the process that took
    it (docs/durability.md, "Ownership and takeover").
    """


class StoreFailed(StoreError):
    """The run store failed a run's writes: the server went away, the disk filled up.

    The runtime stops driving the run at once (nothing unrecorded may go on) and
    gives its lease back, so the run is left as after a crash: `resumable`
    unless its start was never recorded. ``cadenza resume RUN_ID`` (or
    `cadenza.Runtime.resume`) continues it once the store answers again; a
    supervisor with takeover on does so by itself.

    Attributes:
        run_id: The run.
        resumable: Whether the store holds the run, to resume (False: its start
            could not be recorded; run it again).
    """

    def __init__(self, message: str, *, run_id: str, resumable: bool) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.resumable = resumable


class RunNotFound(CadenzaError):
    """No run with the given id exists in the store."""


class RunNeedsCode(CadenzaError):
    """A run cannot be resumed here: its workflow names Python code this process lacks.

    A workflow built in Python (``cadenza.build``, ``cadenza.loops``) may hold
    predicates and handlers that live only in the process that built it: its
    stored document names them, it cannot carry them. Raised by `Runtime.resume`
    (and so ``cadenza resume``) before anything runs: the run is left as it was
    (no event written, its lease released, its status unchanged), for the
    application that built it to resume, after building the workflow again.

    Attributes:
        run_id: The run.
        missing: What is missing, each as ``predicate 'my_app.checks:<lambda>'``,
            ``handler of step 'spin.work'``...
    """

    SHOWN = 5
    """How many of the missing pieces the message names; the rest are counted."""

    def __init__(self, run_id: str, missing: list[str]) -> None:
        if len(missing) == 1:
            what = f"the Python {missing[0]} that this process does not have"
        else:
            named = [f"the {piece}" for piece in missing[: self.SHOWN]]
            if len(missing) > self.SHOWN:
                named.append(f"{len(missing) - self.SHOWN} more")
            what = "Python code this process does not have: " + ", ".join(named)
        super().__init__(
            f"run {run_id!r} needs {what}; resume it from the application that built it "
            "(Runtime.resume)"
        )
        self.run_id = run_id
        self.missing = missing


class PolicyRefused(CadenzaError):
    """This process may not resume a run: it would drop or widen the run's tool permissions.

    A run keeps the permission policy it started with. Raised, before anything
    of the run changes, when the run was started with a Python permission hook
    and this process's `Runtime` has none, or when the resume is given an allow
    rule the run did not have. Resume it where its hook is, or without the
    rule; deny rules and ``--sandbox`` may be added.
    """


class ReplayRefused(CadenzaError):
    """A recorded run cannot be replayed offline (``cadenza replay``, `replay_run`).

    Raised before anything runs when the run has not ended (it is running, or
    was interrupted: resume it first), was cancelled (its record stops wherever
    the cancel came), was recorded without a journal of its model and tool calls
    (by a Cadenza from before the journal), or names Python code this process
    does not have (replay it where its workflow is built).
    """


class SignalRejected(CadenzaError):
    """A human answer (``cadenza signal``) was not recorded.

    Raised when the run has no input pending at that address, has finished, or
    when the answer does not fit the step's ``schema`` (the message gives each
    problem with its JSON path). Nothing is written; fix the answer and signal again.
    """


class MessageRefused(CadenzaError):
    """A message posted to a run (``post_message``) was refused; nothing of it was recorded.

    Raised when the run already holds as many messages waiting for delivery as
    it may, across all its targets (in memory, or in the store for the process
    that drives it), and for a message larger than a step's inbox holds. The
    message says which bound and its figures. Waiting messages leave as their
    steps drain them: post again later, or to fewer targets; split a large one.
    The HTTP API answers 429.
    """


class ExpressionError(CadenzaError):
    """A CEL expression failed to compile or evaluate.

    Attributes:
        source: The expression (or template) text as the user wrote it.
        message: What went wrong, in words, naming the expression.
    """

    def __init__(self, message: str, *, source: str) -> None:
        super().__init__(message)
        self.message = message
        self.source = source


class ExpressionSyntaxError(ExpressionError):
    """An expression does not compile: bad syntax, an unknown name, or mismatched types.

    Raised when a workflow loads; fix the expression at ``column``.

    Attributes:
        column: 1-based position of the problem in ``source``, counted over the
            whole text (for one-line text, the column).
    """

    def __init__(self, message: str, *, source: str, column: int) -> None:
        super().__init__(message, source=source)
        self.column = column

    @property
    def line(self) -> int:
        """1-based line of ``column`` within ``source``."""
        return self.source.count("\n", 0, self.column - 1) + 1

    @property
    def line_column(self) -> int:
        """1-based column of the problem within its line of ``source``."""
        return self.column - self.source.rfind("\n", 0, self.column - 1) - 1


class ExpressionTooComplex(ExpressionSyntaxError):
    """An expression exceeds a compile-time cap: length, nesting depth or macro nesting.

    The caps bound what one evaluation can cost; split the expression, or move
    the work into a step.
    """


class TemplateSyntaxError(ExpressionSyntaxError):
    """A ``{{ CEL }}`` template does not parse: an unclosed or empty placeholder, or bad CEL.

    ``column`` counts in the template text, not inside the placeholder.
    """


class ExpressionEvaluationError(ExpressionError):
    """An expression failed on this run's values: a missing key or name, a wrong type.

    Raised at run time; the step that evaluated it fails with this message,
    which quotes the expression.

    Attributes:
        name: The missing name or key when that is what went wrong, else None.
    """

    def __init__(self, message: str, *, source: str, name: str | None = None) -> None:
        super().__init__(message, source=source)
        self.name = name


class PredicateNotRegistered(ExpressionError):
    """A workflow names a Python predicate whose function is not registered in this process.

    Predicates given as Python callables (``cadenza.build``) live in the process
    that built the workflow; the document holds only a ``@python:`` marker. A
    document loaded from text, or run in another process, meets the marker
    without its function: build the workflow again in this process (the same
    code registers the same markers) before running it. (A resume checks first
    and refuses with `RunNeedsCode`, leaving the run as it was.)
    """


class RuntimeFailure(CadenzaError):
    """The actor runtime refused an operation; the subclass says which and why."""


class AddressError(RuntimeFailure):
    """An address does not parse, or a live actor already holds it.

    Raised by ``Address.parse`` and the ``Address`` builders, and by
    ``Supervisor.spawn`` for a taken address. Fix the address text, or stop
    the live actor first.

    Attributes:
        text: The offending address text.
        column: The 1-based column of the problem, or None when the whole
            address is at fault (for example: already taken).
    """

    def __init__(self, message: str, *, text: str, column: int | None = None) -> None:
        super().__init__(message)
        self.text = text
        self.column = column


class InboxFull(RuntimeFailure):
    """``send_nowait`` (or ``tell_nowait``) found the inbox at capacity.

    Back off, use the awaiting ``send`` for backpressure, or drop the message
    on purpose and record that you did.
    """


class ActorStopped(RuntimeFailure):
    """The actor stopped before it could take or answer a message.

    Raised by a send to a closed inbox, and by every ask still pending (queued
    or in flight) when its actor stops, crashes, is restarted or is cancelled.
    The message names the actor and the message type; the actor will not see
    the message, so resend it to a live instance if it still matters.
    """


class AskTimeout(RuntimeFailure):
    """An ask got no reply within its timeout.

    The message names the address and the message type. The actor may still
    be working on it; a reply that arrives later is dropped.
    """


class SupervisorEscalation(RuntimeFailure):
    """Restarts exceeded the supervisor's intensity, so it stopped every child.

    Raised out of ``async with Supervisor(...)``; ``__cause__`` is the crash
    that tipped it over, and the message names the actor and the count. Fix
    the crash, or give that supervisor a higher ``max_restarts``/``within``.
    """


class RemoteError(CadenzaError):
    """Remote workers could not be set up or used; the subclass says which and why."""


class InsecureEndpoint(RemoteError):
    """A supervisor was asked to bind a non-loopback address without CURVE keys.

    Anyone who can reach that address could take steps and see their inputs.
    Give ``curve_keys`` (``--curve-keys DIR``, made by ``cadenza keys generate``),
    bind 127.0.0.1, or pass ``insecure=True`` (``--insecure``) on a trusted network.
    """


class KeysError(RemoteError):
    """CURVE key files are missing, unreadable or do not hold keys.

    The message names the file; ``cadenza keys generate DIR`` writes a usable set.
    """


class DispatcherClosed(RemoteError):
    """The dispatcher stopped (its runtime is closing) while a step still needed it.

    The step is recorded as failed with this error; nothing was lost silently.
    """
