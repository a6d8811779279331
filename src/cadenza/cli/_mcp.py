"""``cadenza mcp serve``: the workflows under a root as MCP tools (``cadenza.serve.mcp``).

Kept apart from ``cadenza.serve.mcp`` so the command line parses without the
``mcp`` extra installed: the SDK is imported only when the command runs, and its
absence is one clear message (exit 2). Everything this command says goes to
stderr: on stdio, stdout is the protocol.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path
from typing import Any

import anyio

from cadenza.errors import CadenzaError, InputError
from cadenza.store import describe_store, lease_ttl_from_environment

from ._paths import PRICES_HELP, STORE_HELP, StoreSpec, store_spec

__all__ = ["add_mcp_command", "mcp_command"]

TOKEN_VARIABLE = "CADENZA_MCP_TOKEN"


def _address(text: str) -> tuple[str, int]:
    """``--http``'s type: ``HOST:PORT``, ``[::1]:PORT`` or a bare ``PORT`` (on 127.0.0.1)."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: the port must be 0-65535")
    return host, number


def add_mcp_command(commands: Any, store: StoreSpec) -> None:
    """Adds ``cadenza mcp serve`` to the command line's subcommands."""
    mcp = commands.add_parser(
        "mcp", help="offer workflows to MCP clients as tools (needs the mcp extra: cadenza[mcp])"
    )
    actions = mcp.add_subparsers(dest="mcp_command", required=True)
    serve = actions.add_parser(
        "serve",
        help="serve every workflow under --root as an MCP tool, on stdio (default) or HTTP",
    )
    serve.add_argument(
        "--root",
        type=Path,
        default=Path("."),
        help="every workflow file under this directory is a tool (default: .)",
    )
    serve.add_argument("--store", type=store_spec, default=store, help=STORE_HELP)
    serve.add_argument("--model", help="model for steps without an agent (provider:model)")
    serve.add_argument("--prices", type=Path, metavar="FILE", help=PRICES_HELP)
    serve.add_argument(
        "--http",
        type=_address,
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio "
        "(port 0 picks a free one); every request needs the token",
    )
    serve.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help=f"with --http: the bearer token, read from FILE (default: ${TOKEN_VARIABLE}, "
        "else a random one, shown at start)",
    )


def _token(args: argparse.Namespace) -> str | None:
    """Over HTTP, the token ``--token-file`` or the environment gives (None: make one).

    Raises:
        InputError: ``--token-file`` without ``--http``, unreadable, or empty.
    """
    if args.http is None:
        if args.token_file is not None:
            raise InputError("--token-file goes with --http (stdio needs no token)")
        return None
    if args.token_file is None:
        return os.environ.get(TOKEN_VARIABLE) or None  # empty: none given
    path: Path = args.token_file
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read --token-file {str(path)!r}: {error}") from None
    if not token:
        raise InputError(f"--token-file {str(path)!r} is empty")
    return token


def mcp_command(args: argparse.Namespace) -> int:
    """Serves until the client leaves (stdio) or the process is stopped; returns the exit code.

    Raises:
        CadenzaError: The mcp extra is missing, or the options cannot work.
    """
    try:
        from cadenza.serve.mcp import McpOptions, serve_mcp
    except ImportError as error:
        raise CadenzaError(
            f"cadenza mcp serve needs the mcp extra: pip install 'cadenza[mcp]' ({error})"
        ) from None
    options = McpOptions(
        root=args.root,
        store=args.store,
        default_model=args.model,
        prices=args.prices,
        http=args.http,
        token=_token(args),
    )
    options.check()
    lease_ttl_from_environment()  # here: inside the server a bad value is a traceback
    notes = f"root {args.root}; store {describe_store(args.store)}"

    def ready(where: str, made: str | None) -> None:
        if where == "stdio":
            line = f"serving MCP on stdio ({notes})"
        elif made is not None:  # a token made here is the operator's to hand out
            line = f"listening on {where} ({notes}; send 'Authorization: Bearer {made}')"
        else:  # the user's own token is theirs: never printed
            line = f"listening on {where} ({notes}; every request needs the token you gave)"
        sys.stderr.write(f"cadenza mcp serve: {line}\n")
        sys.stderr.flush()

    anyio.run(functools.partial(serve_mcp, options, on_ready=ready))
    return 0
