"""What a command line gives a run: inputs (``run``, ``fork``) and replaced outputs (``fork``).

``--input NAME=VALUE`` (VALUE is JSON if it parses, else text) and
``--inputs-file`` (JSON or YAML) give inputs; ``fork``'s ``--set ADDRESS=TEXT``
gives a step's text and ``--set-json ADDRESS=JSON`` its result.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from cadenza.errors import InputError

__all__ = ["add_input_options", "parse_edits", "parse_inputs"]


def add_input_options(parser: argparse.ArgumentParser) -> None:
    """Adds ``--input`` and ``--inputs-file``."""
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="K=V",
        help="an input; V is JSON if it parses",
    )
    parser.add_argument("--inputs-file", type=Path, help="a JSON or YAML file of inputs")


def parse_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """The inputs ``--inputs-file`` and ``--input K=V`` give (the latter win), as run data.

    Raises:
        InputError: A file that cannot be read or holds no mapping; an ``--input``
            that is not ``NAME=VALUE``.
    """
    values: dict[str, Any] = {}
    if args.inputs_file is not None:
        try:
            text = args.inputs_file.read_text()
        except OSError as error:
            raise InputError(
                f"cannot read --inputs-file {str(args.inputs_file)!r}: {error}"
            ) from None
        import yaml

        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise InputError(
                f"--inputs-file {str(args.inputs_file)!r} is not JSON/YAML: {error}"
            ) from None
        except RecursionError:  # PyYAML's composer recurses once per nesting level
            raise InputError(
                f"--inputs-file {str(args.inputs_file)!r} nests too deeply to be run data"
            ) from None
        if not isinstance(loaded, dict):
            raise InputError(
                f"--inputs-file {str(args.inputs_file)!r} must hold a mapping of inputs"
            )
        values.update(loaded)
    for item in args.input:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise InputError(f"--input {item!r} is not of the form NAME=VALUE")
        try:
            values[name] = json.loads(raw)
        except ValueError:
            values[name] = raw
        except RecursionError:  # JSON nested thousands deep: no run state may hold it
            raise InputError(f"--input {name!r} nests too deeply to be run data") from None
    return values


def parse_edits(args: argparse.Namespace) -> dict[str, Any]:
    """The outputs ``--set ADDRESS=TEXT`` (text) and ``--set-json ADDRESS=JSON`` give.

    Raises:
        InputError: An option that is not ``ADDRESS=VALUE``, a ``--set-json`` value
            that is not JSON, or an address given twice.
    """
    edits: dict[str, Any] = {}
    for option, items, as_json in (("--set", args.set, False), ("--set-json", args.set_json, True)):
        for item in items:
            address, sep, raw = item.partition("=")
            if not sep or not address:
                raise InputError(f"{option} {item!r} is not of the form ADDRESS=VALUE")
            if address in edits:
                raise InputError(f"{option} {address!r}: its output is given twice")
            edits[address] = _json(option, address, raw) if as_json else raw
    return edits


def _json(option: str, address: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as error:
        raise InputError(f"{option} {address!r}: the value is not JSON: {error}") from None
    except RecursionError:
        raise InputError(f"{option} {address!r} nests too deeply to be run data") from None
