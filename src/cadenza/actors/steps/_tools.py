"""Tools an agent can call: Python functions, ``submit_result`` and ``send_message``.

A Python tool is named ``pkg.module:function``; its JSON Schema comes from the
signature and type hints (through msgspec), and the model's arguments are
converted to those types before the call. A tool that raises, or arguments
that do not fit, become an error message for the model, never a crashed step.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_type_hints

import jsonschema
import msgspec

from cadenza.kernel import call_in_thread
from cadenza.llm import ToolSpec

from ._handler import resolve_handler

__all__ = ["Tool", "ToolError", "python_tool", "schema_errors"]


class ToolError(Exception):
    """A tool call that failed in a way the model should hear about."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool offered to the model and how to run it."""

    spec: ToolSpec
    run: Callable[[dict[str, Any]], Awaitable[str]]
    name: str = ""
    """The tool as ``tools:`` and permission rules name it; empty: ``spec.name``."""


def _describe(function: Callable[..., Any]) -> str:
    doc = inspect.getdoc(function) or ""
    return doc.split("\n\n")[0].replace("\n", " ") or f"Calls {function.__name__}."


def python_tool(reference: str, workflow_dir: Path) -> Tool:
    """A tool from a Python callable named ``pkg.module:function``.

    Raises:
        HandlerError: The reference cannot be imported.
    """
    function: Callable[..., Any] = resolve_handler(reference, workflow_dir)
    signature = inspect.signature(function)
    hints = get_type_hints(function)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for name, parameter in signature.parameters.items():
        kind = hints.get(name, Any)
        if parameter.default is inspect.Parameter.empty:
            fields.append((name, kind))
        else:
            fields.append((name, kind, parameter.default))
    arguments_type = msgspec.defstruct(
        f"{function.__name__}_arguments", fields, forbid_unknown_fields=True
    )
    schema = msgspec.json.schema(arguments_type)
    definitions = schema.pop("$defs", {})
    parameters = definitions.pop(arguments_type.__name__, {"type": "object", "properties": {}})
    if definitions:
        parameters["$defs"] = definitions
    name = reference.rpartition(":")[2].replace(".", "_")
    is_async = inspect.iscoroutinefunction(function)

    async def run(arguments: dict[str, Any]) -> str:
        try:
            converted = msgspec.convert(arguments, arguments_type)
        except msgspec.ValidationError as error:
            raise ToolError(f"invalid arguments: {error}") from None
        kwargs = msgspec.structs.asdict(converted)
        if is_async:
            value = await function(**kwargs)
        else:
            # Abandoned on cancellation, as a handler is: a step's timeout ends the step
            # even if the function never returns (its daemon thread runs on, its result
            # dropped), and the process still exits when the run ends.
            value = await call_in_thread(lambda: function(**kwargs))
        return value if isinstance(value, str) else msgspec.json.encode(value).decode()

    spec = ToolSpec(name=name, description=_describe(function), parameters=parameters)
    return Tool(spec, run, reference)


def schema_errors(schema: dict[str, Any], value: Any) -> list[str]:
    """Every way ``value`` breaks ``schema``, each with its JSON path (``tags[2].name``)."""
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for error in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path)):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        problems.append(f"{path.lstrip('.') or '(root)'}: {error.message}")
    return problems
