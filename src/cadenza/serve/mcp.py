"""``cadenza mcp serve``: every workflow under a root as an MCP tool (docs/mcp.md).

Needs the ``mcp`` extra (``pip install 'cadenza[mcp]'``: the official SDK, which
brings Starlette and uvicorn); ``import cadenza.serve`` never imports this module.

    from cadenza.serve.mcp import McpOptions, serve_mcp

    anyio.run(serve_mcp, McpOptions(root="flows", store="runs.db"))  # on stdio

A tool call starts a run of its workflow with the call's arguments as inputs,
reports each step's start and end as MCP progress, and answers with the run's
output. The call and the run end together: a call the client cancels, or whose
client goes away (its stdio closed, its HTTP connection dropped), cancels the
run, which ends ``cancelled`` in the store. A run that waits for a person asks
the client (MCP elicitation) when the client can be asked, and goes on with
the answer; otherwise the call answers at once with the run id and the
``cadenza signal`` command that answers it, and the run waits in the store.

Over streamable HTTP every request needs the bearer token (compared in constant
time, never logged) and, on a loopback address, a loopback ``Host``: the
viewer's guard (``_guard.py``) stands in front of the SDK's app.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import mcp.types as types
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS
from starlette.requests import Request

from cadenza import RunHandle, RunResult, Runtime, __version__
from cadenza._redact import register_secret
from cadenza.actors.run import PricesLike
from cadenza.errors import CadenzaError, SignalRejected
from cadenza.protocols import Event, EventType
from cadenza.store import describe_store

from ._connection import deadline_protocol
from ._guard import Guard, is_loopback_host
from ._mcp_tools import Question, WorkflowTool, answer, find_tools, waiting_answer
from ._server import ServeError

__all__ = ["McpOptions", "serve_mcp"]

MCP_PATH: Final = "/mcp"
CANCEL_DEADLINE: Final = 5.0
"""Seconds a cancelled call's run gets to stop its steps before they are stopped outright."""
ASK_ATTEMPTS: Final = 3
"""Times a person is asked again after an answer that does not fit the question."""
_CANCELLED_BY_CLIENT: Final = "the MCP client cancelled the call"
_INSTRUCTIONS: Final = (
    "Each tool runs a Cadenza workflow: its arguments are the workflow's inputs, its "
    "answer the run's output. Progress is reported per step."
)


@dataclass(frozen=True, slots=True)
class McpOptions:
    """How ``cadenza mcp serve`` runs.

    Attributes:
        root: Every workflow file under this directory (four levels deep) is a tool.
        store: The run store, a SQLite path or a PostgreSQL URL; None keeps runs in
            memory (gone at exit, and ``cadenza signal`` cannot reach them).
        default_model: The model of steps that name no agent (``provider:model``).
        prices: Model prices over the shipped ones and each workflow's (a file, or
            a mapping as `cadenza.Runtime`'s ``prices``).
        http: ``(host, port)`` to serve streamable HTTP on (port 0 picks a free
            one); None serves on stdin and stdout.
        token: Over HTTP, the bearer token every request must carry; None makes a
            random one at start (handed to ``on_ready``).
    """

    root: str | os.PathLike[str] = "."
    store: str | os.PathLike[str] | None = None
    default_model: str | None = None
    prices: PricesLike | None = None
    http: tuple[str, int] | None = None
    token: str | None = field(default=None, repr=False)

    def check(self) -> None:
        """Refuses what cannot work.

        Raises:
            ServeError: The root is not a directory, or the token is empty.
        """
        if not Path(self.root).is_dir():
            raise ServeError(f"--root {str(self.root)!r} is not a directory")
        if self.token is not None and not self.token.strip():
            raise ServeError("the token is empty")


def _stderr(line: str) -> None:
    # Never stdout: on stdio, stdout is the protocol.
    sys.stderr.write(f"cadenza mcp serve: {line}\n")
    sys.stderr.flush()


async def serve_mcp(
    options: McpOptions,
    *,
    on_ready: Callable[[str, str | None], None] | None = None,
    warn: Callable[[str], None] = _stderr,
) -> None:
    """Serves the root's workflows as MCP tools until the client leaves or a signal stops it.

    Args:
        options: What to serve, and on which transport.
        on_ready: Called once serving: with ``"stdio"`` and None, or with the HTTP
            endpoint (``http://127.0.0.1:PORT/mcp``) and the token made at start
            (None when ``options`` gave it: the user's own token is never echoed).
        warn: Told of each workflow file skipped, and why.

    Raises:
        ServeError: The options cannot work (see `McpOptions.check`).
    """
    options.check()
    root = Path(options.root)
    tools = await anyio.to_thread.run_sync(find_tools, root, warn)
    store = "" if options.store is None else _store_argument(options.store)
    async with Runtime(
        store=options.store, default_model=options.default_model, prices=options.prices
    ) as runtime:
        server = _WorkflowServer(runtime, tools, store).server()
        if options.http is None:
            await _serve_stdio(server, on_ready)
        else:
            await _serve_http(server, options, on_ready)


def _store_argument(store: str | os.PathLike[str]) -> str:
    """``--store``'s value in the commands a person runs elsewhere: a path made absolute,
    a URL without its password."""
    text = os.fspath(store)
    return describe_store(text) if "://" in text else str(Path(text).absolute())


# -- the transports --------------------------------------------------------------------


async def _serve_stdio(
    server: Server[Any], on_ready: Callable[[str, str | None], None] | None
) -> None:
    with _claimed_stdin() as lines:
        async with anyio.create_task_group() as group:
            # SIGTERM or Ctrl-C ends the session the way a closed stdin does: calls
            # cancel their runs first (the SDK cancels in-flight handlers as its loop ends).
            group.start_soon(_stop_on_signal, group.cancel_scope)
            group.start_soon(lines.read, group)
            # The SDK reads what it is given by `async for` only (stdout it claims itself).
            async with stdio_server(stdin=cast("anyio.AsyncFile[str]", lines)) as (read, write):
                if on_ready is not None:
                    on_ready("stdio", None)
                await server.run(read, write, server.create_initialization_options())
            group.cancel_scope.cancel()


class _StdinLines:
    """The protocol's input, line by line, read by a daemon thread of its own.

    The SDK reads stdin in a worker thread the event loop waits for, and that
    read waits for the client: after SIGTERM the server would stay until the
    client closed its end. A daemon thread is left blocked instead, and dies
    with the process.
    """

    def __init__(self, fd: int) -> None:
        # closefd=False: the thread may still block on it after the server is done.
        self._file = os.fdopen(fd, "r", encoding="utf-8", errors="replace", closefd=False)
        self._send, self._receive = anyio.create_memory_object_stream[str](1)

    async def read(self, group: anyio.abc.TaskGroup) -> None:
        """Starts the thread; the lines end (EOF) when stdin does or the group is cancelled."""
        token = anyio.lowlevel.current_token()
        ended = anyio.Event()

        def reading() -> None:
            try:
                for line in self._file:
                    anyio.from_thread.run(self._send.send, line, token=token)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError):
                pass  # the server is done (its loop may be gone): nothing to deliver to
            finally:
                with contextlib.suppress(RuntimeError):
                    anyio.from_thread.run_sync(ended.set, token=token)

        threading.Thread(target=reading, name="cadenza mcp stdin", daemon=True).start()
        try:
            await ended.wait()
        finally:
            self._send.close()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._receive.__aiter__()


@contextlib.contextmanager
def _claimed_stdin() -> Iterator[_StdinLines]:
    """Stdin for the protocol alone: fd 0 points at the null device meanwhile, so a
    step's process cannot read the client's messages."""
    private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        yield _StdinLines(private)
    finally:
        os.dup2(private, 0)


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            scope.cancel()
            return


class _Uvicorn(uvicorn.Server):
    """uvicorn that reports where it listens, and exits 0 on Ctrl-C or SIGTERM
    (uvicorn's own re-raises the signal once it has shut down)."""

    def __init__(self, config: uvicorn.Config, ready: Callable[[str], None]) -> None:
        super().__init__(config)
        self._ready = ready

    def capture_signals(self) -> Any:
        return _Signals(self)

    async def startup(self, sockets: list[Any] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            self._ready(f"http://{'[' + host + ']' if ':' in host else host}:{port}{MCP_PATH}")


class _Signals:
    """``with``: SIGINT and SIGTERM ask the server to shut down gracefully."""

    def __init__(self, server: uvicorn.Server) -> None:
        self._server = server
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._server.handle_exit)

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


async def _serve_http(
    server: Server[Any], options: McpOptions, on_ready: Callable[[str, str | None], None] | None
) -> None:
    assert options.http is not None
    host, port = options.http
    made = secrets.token_urlsafe(32) if options.token is None else None
    token = (options.token or made or "").strip()
    register_secret(token)  # masked wherever Cadenza redacts (logs, errors)
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    guarded = Guard(app, token=token, loopback=is_loopback_host(host))
    config = uvicorn.Config(
        guarded,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,  # a request line may carry a session id; nothing needs it
        lifespan="on",
        timeout_graceful_shutdown=5,
        proxy_headers=False,
        server_header=False,
        http=deadline_protocol(10.0),
    )

    def ready(url: str) -> None:
        if on_ready is not None:
            on_ready(url, made)

    web = _Uvicorn(config, ready)
    async with anyio.create_task_group() as group:

        async def serving() -> None:
            # Shielded: a cancelled caller gets uvicorn's graceful shutdown (below),
            # in which the SDK's sessions end and their calls cancel their runs.
            with anyio.CancelScope(shield=True):
                await web.serve()
            group.cancel_scope.cancel()  # stopped by a signal

        group.start_soon(serving)
        try:
            await anyio.sleep_forever()
        finally:
            web.should_exit = True


# -- the tools -------------------------------------------------------------------------


class _WorkflowServer:
    """The MCP server's two handlers, over one runtime and the root's tools."""

    def __init__(self, runtime: Runtime, tools: dict[str, WorkflowTool], store: str) -> None:
        self.runtime = runtime
        self.tools = tools
        self.store = store
        self.listed = [tool.tool() for tool in tools.values()]

    def server(self) -> Server[Any]:
        return Server(
            "cadenza",
            version=__version__,
            instructions=_INSTRUCTIONS,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    async def list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.listed)

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """Runs the tool's workflow; its answer, or a tool error the model can act on.

        Raises:
            MCPError: No such tool (a protocol error, as MCP asks).
        """
        tool = self.tools.get(params.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            raise MCPError(INVALID_PARAMS, f"no workflow tool {params.name!r} (the tools: {known})")
        try:
            handle = await self.runtime.start(tool.document, inputs=params.arguments or {})
        except CadenzaError as error:  # an input missing, unknown or mistyped, say
            return _error(f"{tool.name}: {error}")
        call = _Call(self, ctx, tool, handle)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                if isinstance(ctx.request, Request):  # over HTTP
                    group.start_soon(_watch_connection, ctx.request, scope)
                result = await call.follow()
                group.cancel_scope.cancel()
            return result
        # Only the connection watch cancels this scope: the client that asked is gone.
        return _error(f"run {handle.run_id} cancelled: {_CANCELLED_BY_CLIENT}")


async def _watch_connection(request: Request, call: anyio.CancelScope) -> None:
    """Cancels ``call`` once its HTTP client has hung up.

    The SDK keeps a call's handler going when the POST that carries it drops
    (a client could resume the stream), but this server keeps no event store to
    resume from: the answer could never arrive, so the run stops.
    """
    # The request's body has been read: what its connection says next is that it
    # closed (uvicorn tells every receiver, the SSE response's own listener too).
    while (await request.receive())["type"] != "http.disconnect":
        pass
    call.cancel()


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


class _Call:
    """One tool call: its run (resumed after each person's answer), its progress."""

    def __init__(
        self, owner: _WorkflowServer, ctx: Any, tool: WorkflowTool, handle: RunHandle
    ) -> None:
        self.runtime = owner.runtime
        self.store = owner.store
        self.ctx = ctx
        self.session = ctx.session
        self.handle = handle
        self.progress = _Progress(tool.top_steps)

    async def follow(self) -> types.CallToolResult:
        """The run to its end, asking for each person's answer it waits for."""
        try:
            while True:
                result = await self._drive()
                if result.status != "waiting":
                    return answer(result)
                pending = await self.runtime.pending_inputs(result.run_id)
                if not (self._can_ask() and await self._ask(result.run_id, pending)):
                    return waiting_answer(result, pending, self.store)
                self.handle = await self.runtime.resume(result.run_id)
        except CadenzaError as error:  # the store failed, the run could not resume...
            return _error(f"run {self.handle.run_id}: {error}")
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._cancel_run()
            raise

    async def _drive(self) -> RunResult:
        """The run's result, its step events reported as progress meanwhile."""
        async with contextlib.aclosing(self.handle.events()) as events:
            async for event in events:
                message = self.progress.message(event)
                if message is not None:
                    await self.session.report_progress(self.progress.sent, None, message)
        return await self.handle.result()

    async def _cancel_run(self) -> None:
        """Cancels the run, and waits (bounded) until it has ended ``cancelled``."""
        handle: RunHandle | None = self.handle
        try:
            if self.handle.done:  # waiting for a person: taken up only to be cancelled
                handle = await self.runtime.cancel(self.handle.run_id, _CANCELLED_BY_CLIENT)
            else:
                self.handle.cancel(_CANCELLED_BY_CLIENT, deadline=CANCEL_DEADLINE)
            if handle is not None:
                with anyio.move_on_after(CANCEL_DEADLINE * 2):
                    await handle.result()
        except CadenzaError:  # it ended meanwhile: nothing to cancel
            pass

    def _can_ask(self) -> bool:
        """Whether the client declared elicitation and this call can carry a request."""
        capabilities = self.session.client_capabilities
        return (
            capabilities is not None
            and capabilities.elicitation is not None
            and bool(self.session.can_send_request)
        )

    async def _ask(self, run_id: str, pending: dict[str, dict[str, Any]]) -> bool:
        """Asks the client for each answer the run waits for and records it.

        Returns:
            False if the person declined or cancelled a question, or gave
            `ASK_ATTEMPTS` answers that did not fit it: the run waits in the store.
        """
        for address, waiting in sorted(pending.items()):
            question = Question.of(waiting.get("schema"))
            message = str(waiting.get("prompt") or f"The run waits for an answer at {address}.")
            for _ in range(ASK_ATTEMPTS):
                reply = await self.session.elicit_form(
                    message, question.schema, related_request_id=self.ctx.request_id
                )
                if reply.action != "accept":
                    return False
                try:
                    await self.runtime.signal(run_id, address, question.answer(reply.content))
                    break
                except SignalRejected as error:
                    message = f"{waiting.get('prompt') or address}\n\nNot recorded: {error}"
            else:
                return False
        return True


class _Progress:
    """Step events as progress messages: ``3/7 steps: implement done``.

    MCP's progress must grow with every notification, and a run's size is not
    known ahead (loops, forEach), so the number is the count of messages and
    the message says how many of the workflow's own steps have ended.
    """

    def __init__(self, top_steps: frozenset[str]) -> None:
        self.top_steps = top_steps
        self.ended: set[str] = set()
        self.sent = 0

    def message(self, event: Event) -> str | None:
        """What ``event`` says as progress, if anything (None: nothing to say)."""
        address = event.step_id
        if address is None:
            return None
        if event.type == EventType.STEP_START:
            what = "started"
        elif event.type == EventType.STEP_END:
            what = "done"
        elif event.type == EventType.ERROR:
            what = f"failed: {event.error}" if event.error else "failed"
        elif event.type == EventType.STEP_WAITING:
            what = "waits for a person"
        else:
            return None
        if address in self.top_steps and event.type in (EventType.STEP_END, EventType.ERROR):
            self.ended.add(address)
        self.sent += 1
        return f"{len(self.ended)}/{len(self.top_steps)} steps: {address} {what}"
