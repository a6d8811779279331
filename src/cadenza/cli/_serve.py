"""``cadenza serve``: the run viewer in a browser (``cadenza.serve``).

Kept apart from ``cadenza.serve`` so the command line parses without the
``serve`` extra installed: Starlette and uvicorn are imported only when the
command runs, and their absence is one clear message (exit 2).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from cadenza.errors import CadenzaError
from cadenza.store import describe_store, lease_ttl_from_environment

from ._paths import PRICES_HELP, STORE_HELP, StoreSpec, store_spec
from ._remote import add_run_options
from ._supervise import DEFAULT_CAPACITY

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


def _count(text: str) -> int:
    with contextlib.suppress(ValueError):
        if (value := int(text)) >= 1:
            return value
    raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")


def _seconds(text: str) -> float:
    with contextlib.suppress(ValueError):
        if 0 < (value := float(text)) < float("inf"):
            return value
    raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")


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
    who = serve.add_mutually_exclusive_group()
    who.add_argument(
        "--token",
        help=f"the bearer token every request must carry (default: ${TOKEN_VARIABLE}, "
        "else a random one, shown in the address printed at start)",
    )
    who.add_argument(
        "--no-token",
        action="store_true",
        help="ask for no token: any process of this machine may start and answer runs "
        "(loopback addresses only)",
    )
    # Defaults are cadenza.serve.Limits' (not imported here: the extra may be missing).
    serve.add_argument(
        "--max-body",
        type=_count,
        metavar="BYTES",
        help="largest request body; larger ones get 413 (default: 1048576)",
    )
    serve.add_argument(
        "--max-streams",
        type=_count,
        metavar="N",
        help="event streams open at once; more get 503 (default: 100)",
    )
    serve.add_argument(
        "--max-connections",
        type=_count,
        metavar="N",
        help="connections served at once; requests on more get 503 (default: 256)",
    )
    serve.add_argument(
        "--request-timeout",
        type=_seconds,
        metavar="SECONDS",
        help="time a client has to send a whole request; slower ones get 408 (default: 10)",
    )
    serve.add_argument("--model", help="model for steps without an agent (provider:model)")
    serve.add_argument("--prices", type=Path, metavar="FILE", help=PRICES_HELP)
    serve.add_argument(
        "--recover",
        action="store_true",
        help="also take over the store's runs whose owner died, and waiting runs that "
        "were answered, and start queued runs (several replicas on one PostgreSQL store: "
        "docs/deploying.md)",
    )
    serve.add_argument(
        "--capacity",
        type=_count,
        metavar="N",
        help="with --recover: start queued runs (cadenza submit) while this server drives "
        f"fewer than N runs (default {DEFAULT_CAPACITY})",
    )
    add_run_options(serve)
    serve.add_argument(
        "--advertise",
        metavar="EP",
        help="with --workers and --recover: the endpoint workers of other hosts connect to, "
        "as the store's roll records it for `cadenza worker --store` (default: --workers, "
        "with this host's address for 0.0.0.0 or *)",
    )


def serve_command(args: argparse.Namespace) -> int:
    """Serves until interrupted; returns the exit code.

    Raises:
        CadenzaError: The serve extra is missing, or the options are unsafe.
    """
    try:
        from cadenza.serve import Limits, ServeOptions, serve
    except ImportError as error:
        raise CadenzaError(
            f"cadenza serve needs the serve extra: pip install 'cadenza[serve]' ({error})"
        ) from None
    given = None if args.no_token else args.token or os.environ.get(TOKEN_VARIABLE) or None
    chosen = {
        name: value
        for name in ("max_body", "max_streams", "max_connections", "request_timeout")
        if (value := getattr(args, name)) is not None
    }
    options = ServeOptions(
        store=args.store,
        root=args.root,
        host=args.host,
        port=args.port,
        token=given,
        no_token=args.no_token,
        default_model=args.model,
        prices=args.prices,
        recover=args.recover,
        limits=Limits(**chosen),
        capacity=(args.capacity or DEFAULT_CAPACITY) if args.recover else None,
        workers=args.workers,
        curve_keys=args.curve_keys,
        insecure=args.insecure,
        advertise=args.advertise,
    )
    options.check()
    lease_ttl_from_environment()  # here: in the app's lifespan a bad value is a traceback
    store = describe_store(args.store)

    def ready(url: str) -> None:
        notes = [f"store {store}", f"root {args.root}"]
        if given:  # the user's own token is theirs to hand out: never printed
            url = url.partition("?")[0]
            notes.insert(0, "every request needs the token you gave")
        elif args.no_token:
            notes.insert(0, "no token: any process of this machine may use it")
        if args.recover:
            notes.append(f"taking over orphaned runs, and queued ones up to {options.capacity}")
        if args.workers:
            notes.append(f"steps run on workers at {args.advertise or args.workers}")
        # The address ends at a space, so that a terminal's link takes the token whole.
        sys.stderr.write(f"cadenza serve: listening on {url} ({'; '.join(notes)}; Ctrl-C stops)\n")
        sys.stderr.flush()

    serve(options, on_ready=ready)
    return 0
