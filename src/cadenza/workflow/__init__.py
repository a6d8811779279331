"""Workflow documents: the format's types, and loading and validating them.

A workflow is YAML or JSON (a superset of zenflow v1) or built in Python from the
same Structs. :func:`load_workflow` reads a file, checks every rule and loads what
it includes; problems come back all at once, each with file, line, column and
document path::

    try:
        loaded = load_workflow("dev-cycle.yaml")
    except WorkflowError as exc:
        for problem in exc.problems:
            print(problem)   # dev-cycle.yaml:12:14: steps[1].loop.until: invalid CEL ...
"""

from ._cel import Expression as Expression
from ._cel import preview as preview
from ._cel import quote as quote
from ._cel import type_name as type_name
from ._compile import compile_expression as compile_expression
from ._describe import describe_workflow as describe_workflow
from ._describe import to_mermaid as to_mermaid
from ._files import FileRefused as FileRefused
from ._files import resolve_inside as resolve_inside
from ._inputs import resolve_inputs as resolve_inputs
from ._loader import LoadedWorkflow as LoadedWorkflow
from ._loader import build_loaded as build_loaded
from ._loader import load_workflow as load_workflow
from ._loader import load_workflow_text as load_workflow_text
from ._loader import validate_file as validate_file
from ._loader import validate_workflow as validate_workflow
from ._models import ModelRules as ModelRules
from ._needs import CodeReference as CodeReference
from ._needs import code_references as code_references
from ._needs import module_exists as module_exists
from ._prices import PricesInvalid as PricesInvalid
from ._prices import prices_from as prices_from
from ._prices import read_prices as read_prices
from ._problems import Problem as Problem
from ._problems import WorkflowError as WorkflowError
from ._python import PREFIX as PYTHON_PREFIX
from ._python import AsyncPythonExpression as AsyncPythonExpression
from ._python import is_registered as is_registered
from ._python import python_expression as python_expression
from ._python import register_python as register_python
from ._rules import PATH_TOOLS as PATH_TOOLS
from ._rules import WRAPPERS as WRAPPERS
from ._rules import normal_pattern as normal_pattern
from ._rules import rule_problem as rule_problem
from ._rules import split_rule as split_rule
from ._spec import AGENT_BUILTINS as AGENT_BUILTINS
from ._spec import DEFAULT_MAX_CONCURRENCY as DEFAULT_MAX_CONCURRENCY
from ._spec import DEFAULT_MAX_TURNS as DEFAULT_MAX_TURNS
from ._spec import THINKING_LEVELS as THINKING_LEVELS
from ._spec import WORKTREE_PER_STEP as WORKTREE_PER_STEP
from ._spec import Agent as Agent
from ._spec import Check as Check
from ._spec import Control as Control
from ._spec import ControlLimits as ControlLimits
from ._spec import Coordinator as Coordinator
from ._spec import Edge as Edge
from ._spec import Graph as Graph
from ._spec import Human as Human
from ._spec import InputSpec as InputSpec
from ._spec import ItemSource as ItemSource
from ._spec import Loop as Loop
from ._spec import McpServer as McpServer
from ._spec import MemoryWindow as MemoryWindow
from ._spec import ModelPrice as ModelPrice
from ._spec import Options as Options
from ._spec import Permissions as Permissions
from ._spec import ScriptReply as ScriptReply
from ._spec import ScriptToolCall as ScriptToolCall
from ._spec import State as State
from ._spec import Step as Step
from ._spec import Supervision as Supervision
from ._spec import ThinkingLevel as ThinkingLevel
from ._spec import Workflow as Workflow
from ._spec import parse_duration as parse_duration
from ._template import Template as Template
from ._template import has_template as has_template
from ._template import parse_template as parse_template
from .kinds import StepKind as StepKind
from .kinds import register_step_kind as register_step_kind
from .kinds import step_kind as step_kind
from .kinds import step_kinds as step_kinds
from .kinds import unregister_step_kind as unregister_step_kind

__all__ = [
    "AGENT_BUILTINS",
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_MAX_TURNS",
    "PATH_TOOLS",
    "PYTHON_PREFIX",
    "THINKING_LEVELS",
    "WORKTREE_PER_STEP",
    "WRAPPERS",
    "Agent",
    "AsyncPythonExpression",
    "Check",
    "CodeReference",
    "Control",
    "ControlLimits",
    "Coordinator",
    "Edge",
    "Expression",
    "FileRefused",
    "Graph",
    "Human",
    "InputSpec",
    "ItemSource",
    "LoadedWorkflow",
    "Loop",
    "McpServer",
    "MemoryWindow",
    "ModelPrice",
    "ModelRules",
    "Options",
    "Permissions",
    "PricesInvalid",
    "Problem",
    "ScriptReply",
    "ScriptToolCall",
    "State",
    "Step",
    "StepKind",
    "Supervision",
    "Template",
    "ThinkingLevel",
    "Workflow",
    "WorkflowError",
    "build_loaded",
    "code_references",
    "compile_expression",
    "describe_workflow",
    "has_template",
    "is_registered",
    "load_workflow",
    "load_workflow_text",
    "module_exists",
    "normal_pattern",
    "parse_duration",
    "parse_template",
    "preview",
    "prices_from",
    "python_expression",
    "quote",
    "read_prices",
    "register_python",
    "register_step_kind",
    "resolve_inputs",
    "resolve_inside",
    "rule_problem",
    "split_rule",
    "step_kind",
    "step_kinds",
    "to_mermaid",
    "type_name",
    "unregister_step_kind",
    "validate_file",
    "validate_workflow",
]
