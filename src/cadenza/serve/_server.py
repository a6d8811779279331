"""Serving the viewer with uvicorn: in the foreground (``cadenza serve``) or on a thread.

Both refuse to listen on anything but loopback without a token. On shutdown
the open event streams end first, so the server stops at once instead of
waiting for browsers to hang up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import uvicorn
from starlette.applications import Starlette

from cadenza.errors import CadenzaError

from ._app import create_app
from ._guard import is_loopback_host
from ._routes import Api

__all__ = ["BackgroundServer", "ServeError", "ServeOptions", "serve"]

TOKEN_VARIABLE = "CADENZA_SERVE_TOKEN"
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ServeError(CadenzaError):
    """The viewer cannot start as asked: a non-loopback address without a token, or
    a root that is not a directory. Give ``--token`` (or ``CADENZA_SERVE_TOKEN``),
    bind 127.0.0.1, or name an existing directory.
    """


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How ``cadenza serve`` runs.

    Attributes:
        store: The run store, a SQLite path or a PostgreSQL URL; None keeps runs in
            memory (gone at exit).
        root: Workflow files may be started from this directory and below only.
        host: The address to listen on; anything but loopback needs ``token``.
        port: The port; 0 picks a free one.
        token: The bearer token every request must carry; None asks for none.
        default_model: The model of steps that name no agent (``provider:model``).
        poll: Seconds between store reads when following a run another process drives.
        recover: Take over the store's orphaned runs, and waiting runs answered
            through any replica (`cadenza.Runtime`'s ``recover``).
    """

    store: str | os.PathLike[str] | None = None
    root: str | os.PathLike[str] = "."
    host: str = "127.0.0.1"
    port: int = 8321
    token: str | None = None
    default_model: str | None = None
    poll: float = 0.5
    recover: bool = False

    def check(self) -> None:
        """Refuses what would be unsafe or cannot work.

        Raises:
            ServeError: A non-loopback host without a token, or a missing root.
        """
        if not is_loopback_host(self.host) and not self.token:
            raise ServeError(
                f"serving on {self.host!r} (not loopback) needs a token: give --token or set "
                f"{TOKEN_VARIABLE}"
            )
        if not Path(self.root).is_dir():
            raise ServeError(f"--root {str(self.root)!r} is not a directory")

    def app(self) -> Starlette:
        """The ASGI application these options describe."""
        return create_app(
            store=self.store,
            root=self.root,
            token=self.token or None,
            loopback=is_loopback_host(self.host),
            default_model=self.default_model,
            poll=self.poll,
            recover=self.recover,
        )


class _Server(uvicorn.Server):
    """uvicorn, ending the viewer's event streams before it waits for connections."""

    def __init__(
        self, config: uvicorn.Config, api: Api, on_ready: Callable[[str], None] | None
    ) -> None:
        super().__init__(config)
        self.api = api
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
            self.on_ready(self.url)
        self.ready.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.api.stopping.set()
        await super().shutdown(sockets)


def _server(
    options: ServeOptions, log_level: str, on_ready: Callable[[str], None] | None = None
) -> _Server:
    options.check()
    app = options.app()
    config = uvicorn.Config(
        app,
        host=options.host,
        port=options.port,
        log_level=log_level,
        lifespan="on",
        timeout_graceful_shutdown=5,
        proxy_headers=False,
        server_header=False,
    )
    return _Server(config, app.state.api, on_ready)


def serve(
    options: ServeOptions,
    *,
    log_level: str = "warning",
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serves until interrupted (Ctrl-C or SIGTERM).

    Args:
        options: What to serve, where.
        log_level: uvicorn's log level.
        on_ready: Called with the server's URL once it listens.

    Raises:
        ServeError: The options are unsafe or cannot work (see `ServeOptions.check`).
    """
    _server(options, log_level, on_ready).run()


class BackgroundServer:
    """The viewer on a thread of this process, for tests and notebooks.

    ``with BackgroundServer(ServeOptions(port=0)) as server:`` serves at
    ``server.url`` until the block ends.

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
