"""What a document points at: ``@file`` texts, JSON Schemas, judges, included workflows.

Each check here resolves one reference and reports, through the
:class:`~cadenza.workflow._problems.Reporter`, why it does not hold: a file that
is missing or too big, a schema the JSON Schema meta-schema rejects, a judge
agent that cannot say ``done``, an include step whose inputs do not match what
the included workflow declares.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from ._files import FileRefused, read_capped, resolve_inside
from ._problems import DocPath, Reporter, did_you_mean
from ._spec import Agent, Workflow

__all__ = [
    "MAX_ATTACHMENT_BYTES",
    "check_include_contract",
    "check_json_schema",
    "judge_problem",
    "lines_problem",
    "read_reference",
]

MAX_ATTACHMENT_BYTES = 10 << 20
"""Largest file an ``@file`` reference may read in (zenflow's attachment cap)."""


def read_reference(
    reporter: Reporter, base_dir: Path, path: DocPath, ref: str, *, root: Path | None = None
) -> str | None:
    """The text of the file ``@name`` names, relative to ``base_dir``; None if unreadable.

    The file must lie inside ``root`` (default ``base_dir``), be regular, and hold
    at most 10 MiB of UTF-8 (`_files`).
    """
    name = ref[1:].strip()
    if not name:
        reporter.add_rule(path, "'@' must be followed by a file name")
        return None
    try:
        file = resolve_inside(root or base_dir, base_dir, name)
        return read_capped(file, MAX_ATTACHMENT_BYTES).decode("utf-8")
    except FileRefused as refused:
        reporter.add_rule(path, f"cannot read {name!r} (from {ref!r}): {refused}")
    except FileNotFoundError:
        reporter.add_rule(path, f"file {name!r} (from {ref!r}) not found in {base_dir}")
    except UnicodeDecodeError:
        reporter.add_rule(path, f"file {name!r} is not UTF-8 text")
    except OSError as exc:
        reporter.add_rule(path, f"cannot read {name!r}: {exc.strerror or exc}")
    return None


def lines_problem(root: Path, base_dir: Path, name: str) -> str | None:
    """What keeps ``forEach: {lines: name}`` from being read when its step runs, or None.

    The file is looked at, not read: it may be large, and its lines are checked
    as they are read (a bad one fails the step, naming its line).
    """
    try:
        file = resolve_inside(root, base_dir, name)
        if not file.is_file():
            if file.exists():
                return f"{name!r} is not a regular file"
            return f"file {name!r} not found in {base_dir}"
        if not os.access(file, os.R_OK):
            return f"cannot read {name!r}: permission denied"
    except FileRefused as refused:
        return f"cannot read {name!r}: {refused}"
    except OSError as exc:
        return f"cannot read {name!r}: {exc.strerror or exc}"
    return None


def check_json_schema(reporter: Reporter, path: DocPath, schema: dict[str, Any]) -> None:
    """Report where ``schema`` breaks its JSON Schema meta-schema (2020-12 by default)."""
    try:
        encoded = msgspec.json.encode(schema, order="sorted")
    except (TypeError, ValueError) as exc:  # only a schema built in Python can get here
        reporter.add_rule(path, f"not a valid JSON Schema: {exc}")
        return
    found = _schema_problem(encoded)
    if found is not None:
        where, message = found
        reporter.add_rule((*path, *where), message)


@functools.lru_cache(maxsize=256)
def _schema_problem(encoded: bytes) -> tuple[DocPath, str] | None:
    # Checking against the meta-schema costs about a millisecond; the same schema
    # (a judge's, reloaded workflows) is checked once per process.
    import jsonschema  # ~80 ms to import: only workflows with a resultSchema pay it

    schema = msgspec.json.decode(encoded)
    # An unknown "$schema" makes jsonschema warn and fall back; say so instead.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            checker = jsonschema.validators.validator_for(
                schema, default=jsonschema.Draft202012Validator
            )
        except DeprecationWarning:
            return ("$schema",), f"unknown $schema {schema.get('$schema')!r}"
    try:
        checker.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return tuple(exc.path), f"not a valid JSON Schema: {exc.message}"
    return None


def judge_problem(agent: Agent) -> str | None:
    """Why ``agent`` cannot judge a loop (its result must carry a required boolean ``done``)."""
    schema = agent.result_schema
    if schema is None:
        return "it has no resultSchema"
    properties = schema.get("properties")
    done = properties.get("done") if isinstance(properties, dict) else None
    if not isinstance(done, dict) or done.get("type") != "boolean":
        return "its resultSchema has no boolean property 'done'"
    required = schema.get("required")
    if not isinstance(required, list) or "done" not in required:
        return "its resultSchema does not list 'done' in required"
    return None


def check_include_contract(
    reporter: Reporter,
    path: DocPath,
    ref: str,
    given: Mapping[str, Any],
    child: Workflow,
    agents: Mapping[str, Agent],
) -> None:
    """Report inputs the child does not declare or requires, and clashing agents.

    Args:
        reporter: Where problems go.
        path: The include step's path.
        ref: The ``include:`` value as written.
        given: The step's ``inputs``.
        child: The included workflow.
        agents: The including workflow's agents.
    """
    for name in given:
        if name not in child.inputs:
            known = ", ".join(sorted(child.inputs)) or "none"
            reporter.add_rule(
                (*path, "inputs", name),
                f"{ref!r} declares no input {name!r} (it declares: {known})"
                + did_you_mean(name, child.inputs),
            )
    for name, spec in child.inputs.items():
        if spec.required and name not in given:
            reporter.add_rule(
                (*path, "include"), f"{ref!r} requires input {name!r}: give it under inputs"
            )
    for name, agent in child.agents.items():
        mine = agents.get(name)
        if mine is not None and mine != agent:
            reporter.add_rule(
                (*path, "include"),
                f"agent {name!r} is defined differently in {ref!r}; included agents share "
                "one namespace with the including workflow's (zenflow section 7)",
            )
