"""``cadenza serve``: the run viewer in a browser (``cadenza.serve``).

Kept apart from ``cadenza.serve`` so the command line parses without the
``serve`` extra installed: Starlette and uvicorn are imported only when the
command runs, and their absence is one clear message (exit 2).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from cadenza.errors import CadenzaError
from cadenza.kernel import describe_store

from ._paths import STORE_HELP, StoreSpec, store_spec

__all__ = ["add_serve_command", "serve_command"]

TOKEN_VARIABLE = "CADENZA_SERVE_TOKEN"


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)")
    return value


def add_serve_command(commands: Any, store: StoreSpec) -> None:
    """Adds ``cadenza serve`` to the command line's subcommands."""
    serve = commands.add_parser(
        "serve", help="watch runs in a browser (needs the serve extra: cadenza[serve])"
    )
    serve.add_argument("--store", type=store_spec, default=store, help=STORE_HELP)
    serve.add_argument(
        "--root",
        type=Path,
        default=Path("."),
        help="runs may be started from workflow files in this directory only (default: .)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    serve.add_argument("--port", type=_port, default=8321, help="the port (default: 8321)")
    serve.add_argument(
        "--token",
        help=f"a bearer token every request must carry (default: ${TOKEN_VARIABLE}); "
        "required to listen on anything but loopback",
    )
    serve.add_argument("--model", help="model for steps without an agent (provider:model)")
    serve.add_argument(
        "--recover",
        action="store_true",
        help="also take over the store's runs whose owner died, and waiting runs that "
        "were answered (several replicas on one PostgreSQL store: docs/deploying.md)",
    )


def serve_command(args: argparse.Namespace) -> int:
    """Serves until interrupted; returns the exit code.

    Raises:
        CadenzaError: The serve extra is missing, or the options are unsafe.
    """
    try:
        from cadenza.serve import ServeOptions, serve
    except ImportError as error:
        raise CadenzaError(
            f"cadenza serve needs the serve extra: pip install 'cadenza[serve]' ({error})"
        ) from None
    token = args.token or os.environ.get(TOKEN_VARIABLE) or None
    options = ServeOptions(
        store=args.store,
        root=args.root,
        host=args.host,
        port=args.port,
        token=token,
        default_model=args.model,
        recover=args.recover,
    )
    options.check()
    guard = " (every request needs the token)" if token else ""

    store = describe_store(args.store)

    def ready(url: str) -> None:
        sys.stderr.write(
            f"cadenza serve: listening on {url}/{guard}; store {store}, root {args.root}"
            f"{'; taking over orphaned runs' if args.recover else ''}; Ctrl-C stops\n"
        )
        sys.stderr.flush()

    serve(options, on_ready=ready)
    return 0
