"""Serving the viewer with uvicorn: in the foreground (``cadenza serve``) or on a thread.

Both ask every request for a token: the one given, or a random one made at
start (shown in the page's address, ``http://127.0.0.1:8321/?token=...``).
Only a loopback server may be told to ask for none. The token never reaches
the access log. Both keep the caps of `Limits`. On shutdown the open event
streams end first, so the server stops at once instead of waiting for
browsers to hang up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import secrets
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Self

import uvicorn
from starlette.applications import Starlette

from cadenza._redact import redact, register_secret
from cadenza.actors.run import PricesLike
from cadenza.errors import CadenzaError

from ._app import create_app
from ._connection import deadline_protocol
from ._guard import is_loopback_host
from ._limits import DEFAULT_LIMITS, Limits
from ._routes import Api

if TYPE_CHECKING:
    from cadenza.remote import Dispatcher

__all__ = ["BackgroundServer", "ServeError", "ServeOptions", "serve"]

TOKEN_VARIABLE = "CADENZA_SERVE_TOKEN"
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_TOKEN_IN_QUERY: Final = re.compile(r"([?&]token=)[^&#\s]*", re.IGNORECASE)


class ServeError(CadenzaError):
    """The viewer cannot start as asked: no token on a non-loopback address, a
    token both given and refused, limits that contradict each other, or a root
    that is not a directory. Bind 127.0.0.1 to serve without a token, fix the
    limits, or name an existing directory.
    """


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How ``cadenza serve`` runs.

    Attributes:
        store: The run store, a SQLite path or a PostgreSQL URL; None keeps runs in
            memory (gone at exit).
        root: Workflow files may be started from this directory and below only.
        host: The address to listen on.
        port: The port; 0 picks a free one.
        token: The bearer token every request must carry; None makes a random one
            when the server starts (`BackgroundServer.token`, and in the address
            ``serve`` hands ``on_ready``).
        no_token: Ask for no token: any process of this machine may start runs and
            answer them. Loopback hosts only.
        default_model: The model of steps that name no agent (``provider:model``).
        prices: Model prices over the shipped ones and each workflow's (a file, or
            a mapping as `cadenza.Runtime`'s ``prices``).
        poll: Seconds between store reads when following a run another process drives.
        recover: Take over the store's orphaned runs, and waiting runs answered
            through any replica (`cadenza.Runtime`'s ``recover``).
        limits: What one client may cost the server: body size, open event
            streams, connections, time to send a request.
        capacity: Start queued runs while the server drives fewer than this many
            (`cadenza.Runtime`'s ``capacity``); None: start none.
        workers: Run every step of the runs the server drives on remote workers that
            connect to this endpoint (as ``cadenza supervise --workers``); with
            ``recover`` the server is on the store's roll, for ``cadenza worker
            --store``. None: steps run in the server's process.
        curve_keys: With ``workers``: the CURVE key directory (``cadenza keys generate``).
        insecure: With ``workers``: allow a non-loopback endpoint without keys.
        advertise: With ``workers``: where workers of other hosts connect, as the roll
            records it (default: ``workers``, with this host's address for ``0.0.0.0``).
    """

    store: str | os.PathLike[str] | None = None
    root: str | os.PathLike[str] = "."
    host: str = "127.0.0.1"
    port: int = 8321
    token: str | None = None
    no_token: bool = False
    default_model: str | None = None
    prices: PricesLike | None = None
    poll: float = 0.5
    recover: bool = False
    limits: Limits = DEFAULT_LIMITS
    capacity: int | None = None
    workers: str | None = None
    curve_keys: str | os.PathLike[str] | None = None
    insecure: bool = False
    advertise: str | None = None

    def check(self) -> None:
        """Refuses what would be unsafe or cannot work.

        Raises:
            ServeError: ``no_token`` on a non-loopback host or beside a token,
                more event streams than connections, a missing root, or a worker
                option without ``workers``.
            InsecureEndpoint: ``workers`` is not loopback, without keys or ``insecure``.
            KeysError: ``curve_keys`` is incomplete.
        """
        self.dispatcher()
        if self.no_token and self.token:
            raise ServeError("--no-token and a token (--token or $CADENZA_SERVE_TOKEN) conflict")
        if self.no_token and not is_loopback_host(self.host):
            raise ServeError(
                f"--no-token is allowed on a loopback address only, not {self.host!r}: "
                "every machine that reaches it could start runs"
            )
        limits = self.limits
        if limits.max_streams >= limits.max_connections:
            raise ServeError(
                f"--max-streams ({limits.max_streams}) must be below --max-connections "
                f"({limits.max_connections}): a stream holds a connection"
            )
        if not Path(self.root).is_dir():
            raise ServeError(f"--root {str(self.root)!r} is not a directory")

    def dispatcher(self) -> Dispatcher | None:
        """A new dispatcher for ``workers`` (started and stopped by the app), or None.

        Raises:
            ServeError: ``curve_keys``, ``insecure`` or ``advertise`` without ``workers``.
            InsecureEndpoint: ``workers`` is not loopback, without keys or ``insecure``.
            KeysError: ``curve_keys`` is incomplete.
        """
        if self.workers is None:
            options = ("curve_keys", "advertise", "insecure")
            given = [name for name in options if getattr(self, name)]
            if given:
                flag = "--" + given[0].replace("_", "-")
                raise ServeError(f"{flag} is for --workers: give --workers EP too")
            return None
        from cadenza.remote import Dispatcher  # pyzmq only for a server with workers

        return Dispatcher(
            self.workers,
            curve_keys=self.curve_keys,
            insecure=self.insecure,
            advertise=self.advertise,
        )

    def app(self) -> Starlette:
        """The ASGI application these options describe (with a token, only if given)."""
        return create_app(
            store=self.store,
            root=self.root,
            token=self.token or None,
            loopback=is_loopback_host(self.host),
            default_model=self.default_model,
            prices=self.prices,
            poll=self.poll,
            recover=self.recover,
            limits=self.limits,
            capacity=self.capacity,
            workers=self.dispatcher(),
        )


class _Server(uvicorn.Server):
    """uvicorn, ending the viewer's event streams before it waits for connections."""

    def __init__(
        self,
        config: uvicorn.Config,
        api: Api,
        token: str | None,
        on_ready: Callable[[str], None] | None,
    ) -> None:
        super().__init__(config)
        self.api = api
        self.token = token
        self.on_ready = on_ready
        self.ready = threading.Event()

    @property
    def url(self) -> str:
        """``http://host:port`` where the server listens."""
        sockets: Sequence[socket.socket] = [
            s for server in self.servers for s in (server.sockets or ())
        ]
        if not sockets:
            raise ServeError("the server is not listening")
        host, port = sockets[0].getsockname()[:2]
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}"

    @property
    def page_url(self) -> str:
        """The page's address, with ``?token=`` when the server asks for one."""
        return f"{self.url}/?token={self.token}" if self.token else f"{self.url}/"

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Ctrl-C and SIGTERM stop the server gracefully; the process then exits 0.

        (uvicorn's own version raises the signal again afterwards, so the process
        would die of it after a clean shutdown.)
        """
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in _STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self.on_ready is not None:
            self.on_ready(self.page_url)
        self.ready.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.api.stopping.set()
        await super().shutdown(sockets)


class _HideToken(logging.Filter):
    """Masks tokens in the access log's request lines: any ``token=`` value, and the
    servers' own tokens in any form (``redact`` knows them: they are registered)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and len(record.args) > 2:
            path = record.args[2]
            if isinstance(path, str):
                args = list(record.args)
                args[2] = redact(_TOKEN_IN_QUERY.sub(r"\1***", path))
                record.args = tuple(args)
        return True


def _hide_token_from_access_log() -> None:
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, _HideToken) for f in access.filters):
        access.addFilter(_HideToken())


def _server(
    options: ServeOptions, log_level: str, on_ready: Callable[[str], None] | None = None
) -> _Server:
    options.check()
    if options.token is None and not options.no_token:
        options = dataclasses.replace(options, token=secrets.token_urlsafe(32))
    if options.token:
        register_secret(options.token)  # masked wherever Cadenza redacts (logs, errors)
    app = options.app()
    limits = options.limits
    config = uvicorn.Config(
        app,
        host=options.host,
        port=options.port,
        log_level=log_level,
        lifespan="on",
        timeout_graceful_shutdown=5,
        proxy_headers=False,
        server_header=False,
        http=deadline_protocol(limits.request_timeout),
        limit_concurrency=limits.max_connections,
    )
    _hide_token_from_access_log()  # after Config, which (re)configures uvicorn's loggers
    return _Server(config, app.state.api, options.token, on_ready)


def serve(
    options: ServeOptions,
    *,
    log_level: str = "warning",
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serves until interrupted (Ctrl-C or SIGTERM).

    Args:
        options: What to serve, where.
        log_level: uvicorn's log level (``info`` shows the access log, tokens masked).
        on_ready: Called once the server listens, with the page's address: with
            ``?token=TOKEN`` when it asks for a token (the one made at start when
            ``options`` gave none).

    Raises:
        ServeError: The options are unsafe or cannot work (see `ServeOptions.check`).
    """
    _server(options, log_level, on_ready).run()


class BackgroundServer:
    """The viewer on a thread of this process, for tests and notebooks.

    ``with BackgroundServer(ServeOptions(port=0)) as server:`` serves at
    ``server.url`` until the block ends; a client sends ``server.headers`` (the
    token), a browser opens ``server.page_url``.

    Raises:
        ServeError: The options are unsafe, or the server did not start.
    """

    def __init__(self, options: ServeOptions, *, log_level: str = "warning") -> None:
        self.options = options
        self._server = _server(options, log_level)
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        return self._server.url

    @property
    def token(self) -> str | None:
        """The token every request must carry: the one given, or the one made at start."""
        return self._server.token

    @property
    def headers(self) -> dict[str, str]:
        """The headers that carry the token (``Authorization: Bearer ...``), if one is asked."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @property
    def page_url(self) -> str:
        """The page's address for a browser: ``http://host:port/?token=...``."""
        return self._server.page_url

    def start(self) -> Self:
        """Starts serving on a thread and returns once the server listens."""

        def run() -> None:
            try:
                self._server.run()
            except BaseException as error:  # reported by start(), not lost on the thread
                self._failure = error
            finally:
                self._server.ready.set()

        self._thread = threading.Thread(target=run, name="cadenza serve", daemon=True)
        self._thread.start()
        self._server.ready.wait()
        if self._failure is not None or not self._server.started:
            raise ServeError(f"the viewer did not start: {self._failure!r}")
        return self

    def stop(self) -> None:
        """Stops serving: ends event streams, interrupts its runs (left resumable), joins."""
        if self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join()
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
