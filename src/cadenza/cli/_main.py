"""The ``cadenza`` command: a thin layer over the Python API (SPEC section 7).

Exit codes: 0 the run completed; 1 it failed or was cancelled, or the run
store failed it (one line naming what failed and the command that resumes the
run); 2 the workflow, an input or the command line is invalid (one clear
message); 3 the run waits for a person; ``replay`` has its own (``_replay``).
Never a traceback, unless ``--debug``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import anyio
import msgspec

from cadenza import __version__
from cadenza._logging import configure_logging
from cadenza._redact import redact
from cadenza.errors import CadenzaError, StoreFailed
from cadenza.workflow import (
    THINKING_LEVELS,
    ModelRules,
    Problem,
    WorkflowError,
    describe_workflow,
    load_workflow,
    to_mermaid,
    validate_file,
)

from ._durable import (
    add_durable_commands,
    cancel_command,
    fork_command,
    maintain_runs,
    resume_command,
    signal_command,
)
from ._fleet import add_fleet_command, fleet_command
from ._inputs import add_input_options, parse_inputs
from ._mcp import add_mcp_command, mcp_command
from ._paths import (
    DEFAULT_STORE,
    PRICES_HELP,
    STORE_HELP,
    THINKING_HELP,
    existing_store,
    store_spec,
)
from ._permissions import add_permission_options
from ._remote import add_remote_commands, add_run_options, keys_command, worker_command
from ._replay import add_replay_command, replay_command
from ._serve import add_serve_command, serve_command
from ._supervise import add_supervise_command, submit_command, supervise_command

if TYPE_CHECKING:
    from cadenza.api import Runtime

__all__ = ["main"]

_encode_json = msgspec.json.Encoder().encode


class UsageError(CadenzaError):
    """The command line is wrong (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cadenza", description="Run agent workflows that loop.")
    parser.add_argument("--version", action="version", version=f"cadenza {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="log at debug level; an error shows its traceback"
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser("run", help="run a workflow file")
    run.add_argument("file", type=Path)
    add_input_options(run)
    run.add_argument("--json", action="store_true", help="print the result JSON as the only stdout")
    run.add_argument("--events", action="store_true", help="write NDJSON events to stderr")
    run.add_argument("--store", type=store_spec, default=DEFAULT_STORE, help=STORE_HELP)
    run.add_argument("--run-id", help="record the run under this id")
    run.add_argument("--max-concurrency", type=_positive, help="steps in parallel")
    run.add_argument("--model", help="model for steps without an agent (provider:model)")
    run.add_argument("--thinking", choices=THINKING_LEVELS, help=THINKING_HELP)
    run.add_argument("--prices", type=Path, metavar="FILE", help=PRICES_HELP)
    add_run_options(run)
    add_permission_options(run)

    validate = commands.add_parser("validate", help="check workflow files")
    validate.add_argument("files", nargs="+", type=Path)
    validate.add_argument(
        "--model", help="the model a run would give steps without one (as run --model)"
    )
    validate.add_argument("--prices", type=Path, metavar="FILE", help=PRICES_HELP)

    graph = commands.add_parser("graph", help="print a workflow's structure")
    graph.add_argument("file", type=Path)
    graph.add_argument("--format", choices=("mermaid", "json"), default="mermaid")

    runs = commands.add_parser("runs", help="stored runs")
    runs.add_argument(
        "action", nargs="?", choices=("list", "show", "prune", "check"), default="list"
    )
    runs.add_argument("run_id", nargs="?")
    runs.add_argument("--store", type=store_spec, default=DEFAULT_STORE, help=STORE_HELP)
    runs.add_argument("--events", action="store_true", help="with show: the stored event stream")
    runs.add_argument(
        "--json", action="store_true", help="with show: the result JSON, on a terminal too"
    )
    runs.add_argument("--limit", type=_positive, default=50)
    add_remote_commands(commands, _positive)
    add_durable_commands(commands, runs, _positive, DEFAULT_STORE)
    add_replay_command(commands, DEFAULT_STORE)
    add_serve_command(commands, DEFAULT_STORE)
    add_mcp_command(commands, DEFAULT_STORE)
    add_supervise_command(commands, DEFAULT_STORE)
    add_fleet_command(commands, DEFAULT_STORE)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


async def _run(args: argparse.Namespace) -> int:
    from cadenza.api import Runtime  # the runtime loads only for the commands that run

    from ._output import LiveProgress, watch_run
    from ._permissions import TerminalAsker, tool_policy

    document = load_workflow(args.file)
    inputs = parse_inputs(args)
    asker = TerminalAsker() if args.ask else None
    async with (
        Runtime(
            store=args.store,
            default_model=args.model,
            default_thinking=args.thinking,
            workers=args.workers,
            curve_keys=args.curve_keys,
            insecure=args.insecure,
            permissions=tool_policy(args, asker, document.workflow.mcp_servers),
            prices=args.prices,
        ) as runtime,
        watch_run(events=args.events, json_only=args.json) as on_event,
    ):
        if asker is not None and isinstance(on_event, LiveProgress):
            asker.progress = on_event
        handle = await runtime.start(
            document,
            inputs=inputs,
            run_id=args.run_id,
            max_concurrency=args.max_concurrency,
            on_event=on_event,
        )
        from ._output import follow

        return await follow(handle, args)


def _validate(args: argparse.Namespace) -> int:
    models = _model_rules(args.model)
    bad = 0
    for path in args.files:
        problems = validate_file(path, models=models)
        if not any(problem.severity == "error" for problem in problems):
            problems += _unpriced(path, args.prices, models.default)
        for problem in problems:
            sys.stderr.write(f"{problem}\n")
        if any(problem.severity == "error" for problem in problems):
            bad += 1
        else:
            sys.stdout.write(f"{path}: ok\n")
    return 2 if bad else 0


def _unpriced(path: Path, prices: Path | None, default_model: str | None) -> list[Problem]:
    """The models a cost budget of the valid workflow at ``path`` covers with no price."""
    from cadenza.actors.run import caller_prices, run_prices, unpriced

    document = load_workflow(path)
    table = run_prices(document, caller_prices(prices))
    return unpriced(document, table, default_model, filename=str(path))


def _model_rules(flag: str | None) -> ModelRules:
    """What a run started here would do with models, from the provider table of ``llm``.

    A spec no provider serves is a problem; an unset API key only a warning, since
    the run may go where the key is set (a service, a worker's environment).

    Raises:
        UsageError: The default model (``--model``, ``CADENZA_MODEL``) cannot run.
    """
    from cadenza.llm import DEFAULT_PROVIDER_VARIABLE, LLMConfigError, missing_variable, parse_model

    environ = os.environ
    bare_to = environ.get(DEFAULT_PROVIDER_VARIABLE) or None

    def problem(spec: str) -> str | None:
        try:
            parse_model(spec, default_provider=bare_to)
        except LLMConfigError as error:
            return str(error)
        return None

    def warning(spec: str) -> str | None:
        provider, model = parse_model(spec, default_provider=bare_to)
        variable = missing_variable(provider, environ)
        if variable is None:
            return None
        return f"{variable} is not set: a run here fails when it calls {provider}:{model}"

    default = flag or environ.get("CADENZA_MODEL") or None
    if default is not None:
        source = "--model" if flag else "CADENZA_MODEL"
        why = problem(default)
        if why is not None:
            raise UsageError(f"{source} {default!r}: {why}")
        missing = warning(default)
        if missing is not None:
            sys.stderr.write(f"cadenza: warning: {source} {default!r}: {missing}\n")
    return ModelRules(problem, warning, default)


def _graph(args: argparse.Namespace) -> int:
    workflow = load_workflow(args.file)
    if args.format == "json":
        sys.stdout.write(json.dumps(describe_workflow(workflow), indent=2) + "\n")
    else:
        sys.stdout.write(to_mermaid(workflow))
    return 0


async def _runs(args: argparse.Namespace) -> int:
    if args.action in ("prune", "check"):
        return await maintain_runs(args)
    if args.action == "show" and not args.run_id:
        raise UsageError("runs show needs a RUN_ID")
    from cadenza.api import Runtime

    async with Runtime(store=existing_store(args.store)) as runtime:
        if args.action == "list":
            from ._output import print_runs

            print_runs(await runtime.list_runs(limit=args.limit), sys.stdout)
        else:
            await _show_run(runtime, args)
        return 0


async def _show_run(runtime: Runtime, args: argparse.Namespace) -> None:
    """``runs show``: readable on a terminal; JSON with ``--json`` or into a pipe, as ever."""
    row = await runtime.get_run(args.run_id)
    if args.events:
        for event in await runtime.stored_events(args.run_id):
            sys.stdout.write(_encode_json(event).decode() + "\n")
        return
    steps = row.result.steps if row.result is not None else await runtime.store.steps(row.run_id)
    if not args.json and sys.stdout.isatty():
        from ._output import print_run

        forks = await runtime.forks(row.run_id)
        print_run(row, steps, sys.stdout, store=args.store, forks=forks)
    elif row.result is not None:
        sys.stdout.write(_encode_json(row.result).decode() + "\n")
    else:  # not ended: what the store holds so far
        snapshot = {"runId": row.run_id, "workflow": row.workflow, "status": row.status}
        snapshot["steps"] = msgspec.to_builtins(steps)
        sys.stdout.write(json.dumps(snapshot) + "\n")


def _check_failpoints() -> None:
    """A misspelt CADENZA_FAILPOINT stops every command at once (exit 2), not just
    the ones that load the runtime: a crash test must never pass by killing nothing."""
    if not os.environ.get("CADENZA_FAILPOINT"):
        return
    try:
        importlib.import_module("cadenza._failpoints")  # arms them, or raises
    except ValueError as error:
        raise UsageError(str(error)) from None


def _store_failed(error: StoreFailed, args: argparse.Namespace) -> str:
    """The one line for a run the store failed: what failed, and what to do next."""
    if not error.resumable:
        return f"cadenza: error: {error}; nothing of it is stored: run it again"
    from ._output import command_hint  # loads the runtime, which this error came from

    resume = command_hint("resume", error.run_id, store=args.store)
    return (
        f"cadenza: error: {error}; the run is resumable once the store is writable again: {resume}"
    )


def _say(args: argparse.Namespace, error: BaseException, *lines: str) -> None:
    """Writes ``lines`` to stderr; with ``--debug``, the error's traceback first."""
    if args.debug:  # redacted like a log: a driver's words may hold a secret
        sys.stderr.write(redact("".join(traceback.format_exception(error))))
    sys.stderr.write("".join(f"{line}\n" for line in lines))


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "validate": _validate,
    "graph": _graph,
    "worker": worker_command,
    "keys": keys_command,
    "serve": serve_command,
    "mcp": mcp_command,
}
"""The commands that run without an event loop of their own (or start their own)."""

_ASYNC_COMMANDS: dict[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "run": _run,
    "resume": resume_command,
    "fork": fork_command,
    "signal": signal_command,
    "cancel": cancel_command,
    "replay": replay_command,
    "supervise": supervise_command,
    "submit": submit_command,
    "fleet": fleet_command,
}
"""The commands run in an event loop (``runs`` is the rest)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the process exit code."""
    args = _parser().parse_args(argv)
    # With --events, stderr is an NDJSON stream: log records join it as JSON lines.
    configure_logging(
        "debug" if args.debug else None, json_lines=bool(getattr(args, "events", False))
    )
    try:
        _check_failpoints()
        command = _COMMANDS.get(args.command)
        if command is not None:
            return command(args)
        return anyio.run(_ASYNC_COMMANDS.get(args.command, _runs), args)
    except WorkflowError as error:
        _say(args, error, *(str(problem) for problem in error.problems))
        return 2
    except StoreFailed as error:  # the run stopped where it stood, resumable
        _say(args, error, _store_failed(error, args))
        return 1
    except CadenzaError as error:
        _say(args, error, f"cadenza: error: {error}")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("cadenza: interrupted\n")
        return 1
