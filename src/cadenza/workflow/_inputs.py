"""Run inputs: checking what a caller gives against what a workflow declares."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import msgspec

from cadenza.errors import InputError

from ._spec import InputSpec

__all__ = ["resolve_inputs"]

_CHECKS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "integer": (int, "an integer"),
    "number": ((int, float), "a number"),
    "boolean": (bool, "true or false"),
    "object": (dict, "an object"),
    "array": (list, "an array"),
}


def _coerce(name: str, spec: InputSpec, value: Any) -> Any:
    if spec.type == "any":
        return value
    if spec.type == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, int | float | bool):
            # `--input v=123` parses as JSON; a string input means the text itself.
            return msgspec.json.encode(value).decode()
        raise InputError(f"input {name!r} must be a string, got {type(value).__name__}")
    expected, words = _CHECKS[spec.type]
    ok = isinstance(value, expected) and not (spec.type != "boolean" and isinstance(value, bool))
    if not ok:
        raise InputError(
            f"input {name!r} must be {words}, got {msgspec.json.encode(value).decode()}"
        )
    return value


def _as_data(name: str, value: Any) -> Any:
    """``value`` as plain JSON data, through msgspec like everything in a run's state.

    The CEL engine crashes the process on input nested thousands deep, and the store
    cannot encode it; msgspec refuses it here with a clear error instead.
    """
    if not isinstance(value, dict | list | tuple):
        return value
    try:
        return msgspec.json.decode(msgspec.json.encode(value))
    except RecursionError:
        raise InputError(f"input {name!r} nests too deeply to be run data") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"input {name!r} is not JSON data: {exc}") from None


def resolve_inputs(declared: Mapping[str, InputSpec], given: Mapping[str, Any]) -> dict[str, Any]:
    """The run's inputs: given values checked and coerced, defaults filled in.

    Raises:
        InputError: An input is unknown, missing, or of the wrong type; the
            message names it (and suggests the closest declared name).
    """
    resolved: dict[str, Any] = {}
    for name, value in given.items():
        spec = declared.get(name)
        if spec is None:
            close = difflib.get_close_matches(name, list(declared), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            known = ", ".join(sorted(declared)) or "none"
            raise InputError(f"unknown input {name!r} (declared inputs: {known}){hint}")
        resolved[name] = _as_data(name, _coerce(name, spec, value))
    missing = [n for n, s in declared.items() if n not in resolved and s.required]
    if missing:
        raise InputError(
            "missing required input(s): "
            + ", ".join(missing)
            + " (give them with --input NAME=VALUE or --inputs-file)"
        )
    for name, spec in declared.items():
        if name not in resolved and not spec.required:
            resolved[name] = spec.default
    return resolved
