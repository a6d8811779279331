"""Workflows as MCP tools: which files under a root become tools, and what a call carries.

A tool is a workflow file: its name (within MCP's rules), its description, and an
input schema made from its ``inputs:``. What crosses the wire besides: a run's
result as a tool's answer, a person's question as an elicitation form, and the
form's reply as the answer the question's schema expects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import mcp.types as types

from cadenza.errors import CadenzaError
from cadenza.protocols import RunResult
from cadenza.workflow import InputSpec, LoadedWorkflow, WorkflowError, load_workflow

from ._routes import _workflow_files as workflow_files

__all__ = [
    "Question",
    "WorkflowTool",
    "answer",
    "find_tools",
    "input_schema",
    "tool_name",
    "waiting_answer",
]

_NOT_IN_NAMES: Final = re.compile(r"[^A-Za-z0-9._-]")
_MAX_NAME: Final = 128  # MCP's tool names: 1 to 128 of A-Z a-z 0-9 _ - .
_PRIMITIVES: Final = frozenset({"string", "number", "integer", "boolean"})
# What an elicitation form's field may say of itself (MCP's PrimitiveSchemaDefinition).
_FIELD_KEYS: Final = frozenset(
    {"type", "title", "description", "enum", "enumNames", "default", "format"}
    | {"minimum", "maximum", "minLength", "maxLength"}
)
_ANSWER: Final = "answer"


def tool_name(workflow_name: str) -> str:
    """``workflow_name`` within MCP's tool-name rules: other characters become ``_``."""
    return _NOT_IN_NAMES.sub("_", workflow_name)[:_MAX_NAME] or "workflow"


def input_schema(inputs: Mapping[str, InputSpec]) -> dict[str, Any]:
    """The JSON Schema of a tool's arguments: the workflow's ``inputs:``, one property each."""
    properties: dict[str, Any] = {}
    for name, spec in inputs.items():
        prop: dict[str, Any] = {} if spec.type == "any" else {"type": spec.type}
        if spec.description:
            prop["description"] = spec.description
        if not spec.required:
            prop["default"] = spec.default
        properties[name] = prop
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required := [name for name, spec in inputs.items() if spec.required]:
        schema["required"] = required
    return schema


@dataclass(frozen=True, slots=True)
class WorkflowTool:
    """A workflow file offered as a tool."""

    name: str
    path: str
    """The file, relative to the root."""
    document: LoadedWorkflow

    @property
    def top_steps(self) -> frozenset[str]:
        """The ids of the workflow's own steps (what "3/7 steps" counts)."""
        return frozenset(step.id for step in self.document.workflow.steps)

    def tool(self) -> types.Tool:
        """What ``tools/list`` says of it."""
        workflow = self.document.workflow
        return types.Tool(
            name=self.name,
            title=workflow.name,
            description=workflow.description or f"Runs the Cadenza workflow {self.path}.",
            input_schema=input_schema(workflow.inputs),
        )


def find_tools(root: Path, warn: Callable[[str], None]) -> dict[str, WorkflowTool]:
    """Every workflow file under ``root`` that loads, by tool name.

    A file that does not load, or whose name another file's tool has already
    taken (files are taken in path order), is skipped, and ``warn`` says why.
    """
    tools: dict[str, WorkflowTool] = {}
    for relative in workflow_files(root):
        try:
            document = load_workflow(root / relative)
        except WorkflowError as error:
            first = error.problems[0] if error.problems else error
            more = f" (and {len(error.problems) - 1} more)" if len(error.problems) > 1 else ""
            warn(f"skipped {relative}: it does not load: {first}{more}")
            continue
        except CadenzaError as error:
            warn(f"skipped {relative}: it does not load: {error}")
            continue
        name = tool_name(document.workflow.name)
        if name in tools:
            warn(f"skipped {relative}: the tool name {name!r} is {tools[name].path}'s")
            continue
        tools[name] = WorkflowTool(name, relative, document)
    return tools


# -- answers ---------------------------------------------------------------------------


def _summary(result: RunResult) -> dict[str, Any]:
    return {"runId": result.run_id, "workflow": result.workflow, "status": result.status}


def answer(result: RunResult) -> types.CallToolResult:
    """A finished run as the tool's answer: its output, or an error naming the step."""
    if result.status == "completed":
        output = result.output
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content={**_summary(result), "output": output},
        )
    error = result.error
    address = error.address if error is not None else None
    if address is None:  # a run-wide error names no step: the first step that failed does
        address = next((a for a, r in result.steps.items() if r.status == "failed"), None)
    where = f" at step {address}" if address else ""
    why = f": {error.type}: {error.message}" if error is not None else ""
    summary = _summary(result)
    if error is not None:
        summary["error"] = {"type": error.type, "message": error.message, "address": address}
    return types.CallToolResult(
        content=[
            types.TextContent(type="text", text=f"run {result.run_id} {result.status}{where}{why}")
        ],
        structured_content=summary,
        is_error=True,
    )


def waiting_answer(
    result: RunResult, pending: Mapping[str, Mapping[str, Any]], store: str
) -> types.CallToolResult:
    """A run waiting for a person, as an answer that says how to answer it.

    ``store`` is the ``--store`` the commands need (empty: the default store).
    """
    on = f" --store {_quoted(store)}" if store else ""
    lines = [f"run {result.run_id} waits for a person."]
    for address, question in sorted(pending.items()):
        lines.append(f"At {address}: {question.get('prompt', '')}")
        schema = question.get("schema")
        if schema:
            lines.append(f"  The answer must fit: {json.dumps(schema, ensure_ascii=False)}")
        lines.append(f"  Answer with: cadenza signal {result.run_id} {address} --data 'JSON'{on}")
    lines.append(f"Then continue the run with: cadenza resume {result.run_id}{on}")
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="\n".join(lines))],
        structured_content={**_summary(result), "waitingFor": sorted(pending)},
    )


def _quoted(text: str) -> str:
    return text if re.fullmatch(r"[\w./:@%+=-]+", text) else "'" + text.replace("'", "'\\''") + "'"


# -- a person's question as a form -----------------------------------------------------


def _field(schema: Any) -> dict[str, Any] | None:
    """``schema`` as one field of a form, or None if a form field cannot hold it."""
    if not isinstance(schema, dict):
        return None
    enum = schema.get("enum")
    kind = schema.get("type")
    if enum is not None:
        if not isinstance(enum, list) or not all(isinstance(v, str) for v in enum):
            return None
        kind = kind or "string"
    if kind not in _PRIMITIVES:
        return None
    field = {key: value for key, value in schema.items() if key in _FIELD_KEYS}
    field["type"] = kind
    return field


@dataclass(frozen=True, slots=True)
class Question:
    """A human step's question as an elicitation form, and its reply as the step's answer.

    A question whose schema is an object of plain fields is asked as that form;
    one whose schema is a plain value, as a form of one field; anything else
    (no schema, nested data), as one text field holding JSON (or text).
    """

    schema: dict[str, Any]
    whole: bool
    """True: the form's reply is the answer; False: its one field is."""
    as_json: bool

    @classmethod
    def of(cls, schema: dict[str, Any] | None) -> Question:
        """The form that asks for an answer fitting ``schema``."""
        if schema is not None and schema.get("type") == "object":
            properties = schema.get("properties")
            fields = (
                {name: _field(value) for name, value in properties.items()}
                if isinstance(properties, dict) and properties
                else {}
            )
            if fields and all(field is not None for field in fields.values()):
                form: dict[str, Any] = {"type": "object", "properties": fields}
                if isinstance(required := schema.get("required"), list):
                    form["required"] = required
                return cls(form, whole=True, as_json=False)
        single = _field(schema) if schema is not None else None
        if single is not None:
            return cls(_one_field(single), whole=False, as_json=False)
        described = "the answer, as JSON" if schema is not None else "the answer"
        text = {"type": "string", "description": described}
        return cls(_one_field(text), whole=False, as_json=schema is not None)

    def answer(self, reply: Mapping[str, Any] | None) -> Any:
        """The step's answer in the form's ``reply``."""
        content = dict(reply or {})
        if self.whole:
            return content
        value = content.get(_ANSWER)
        if self.as_json and isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                return value  # the step's schema will say what is wrong with it
        return value


def _one_field(field: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {_ANSWER: field}, "required": [_ANSWER]}
