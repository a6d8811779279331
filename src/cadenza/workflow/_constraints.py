"""Value constraints: ranges, lengths, patterns and durations, by Struct and key.

Types and required keys come from the Structs themselves (see ``_schema.py``);
what a type cannot say lives here: ``maxIterations >= 1``, the step id pattern,
the 2,000-character and 100-step caps of zenflow section 11, duration strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ._problems import DocPath, Reporter
from ._spec import (
    Agent,
    ControlLimits,
    Coordinator,
    Graph,
    ItemSource,
    Loop,
    MemoryWindow,
    ModelPrice,
    Options,
    State,
    Step,
    Supervision,
    Workflow,
    parse_duration,
)

__all__ = ["STEP_ID", "Rule", "constrain", "rule_for"]

STEP_ID = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_STATE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
# ``module:attribute``; the attribute may be a dotted path (``Class.method``,
# ``HANDLERS.f7`` of the functions cadenza.build and cadenza.loops register).
_HANDLER = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


@dataclass(frozen=True, slots=True)
class Rule:
    """Value constraints of one field (zenflow's schema keywords, plus durations)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    min_len: int | None = None
    max_len: int | None = None
    pattern: re.Pattern[str] | None = None
    hint: str = ""
    duration: bool = False
    key_pattern: re.Pattern[str] | None = None


_DURATION = Rule(duration=True)
_AT_LEAST_0 = Rule(ge=0)
_AT_LEAST_1 = Rule(ge=1)
_POSITIVE = Rule(gt=0)
_ID_HINT = "lowercase letters, digits, '_' and '-', starting with a letter, at most 64 characters"

# Constraints by (owning Struct, document key). Step and State share their body's.
_RULES: dict[tuple[type, str], Rule] = {
    (Workflow, "name"): Rule(min_len=1),
    (Workflow, "description"): Rule(max_len=2000),
    (Workflow, "steps"): Rule(min_len=1, max_len=100),
    (Workflow, "agents"): Rule(key_pattern=STEP_ID, hint=_ID_HINT),
    (Agent, "maxTurns"): _AT_LEAST_0,
    (Agent, "temperature"): Rule(ge=0, le=2),
    (Agent, "topP"): Rule(ge=0, le=1),
    (Agent, "maxCost"): _POSITIVE,
    (Step, "maxCost"): _POSITIVE,
    (ModelPrice, "input"): _AT_LEAST_0,
    (ModelPrice, "output"): _AT_LEAST_0,
    (ModelPrice, "cachedInput"): _AT_LEAST_0,
    (Step, "id"): Rule(pattern=STEP_ID, hint=_ID_HINT),
    (Step, "instructions"): Rule(max_len=2000),
    (Step, "timeout"): _DURATION,
    (Step, "retries"): _AT_LEAST_0,
    (Step, "maxRetries"): _AT_LEAST_0,
    (Step, "tool"): Rule(min_len=1),
    (Step, "handler"): Rule(pattern=_HANDLER, hint="like 'package.module:function'"),
    (ItemSource, "handler"): Rule(pattern=_HANDLER, hint="like 'package.module:function'"),
    (ItemSource, "lines"): Rule(min_len=1),
    (Loop, "maxIterations"): _AT_LEAST_1,
    (Loop, "maxConcurrency"): _AT_LEAST_0,
    (Loop, "delay"): _DURATION,
    (Loop, "keepLast"): _AT_LEAST_1,
    (Loop, "steps"): Rule(min_len=1),
    (MemoryWindow, "window"): _AT_LEAST_1,
    (Graph, "maxSteps"): _AT_LEAST_1,
    (Graph, "states"): Rule(key_pattern=_STATE_NAME, hint="a letter, then letters, digits, _ or -"),
    (ControlLimits, "maxIterations"): _AT_LEAST_1,
    (ControlLimits, "maxTokens"): _AT_LEAST_1,
    (ControlLimits, "maxRetries"): _AT_LEAST_0,
    (ControlLimits, "maxReplans"): _AT_LEAST_0,
    (ControlLimits, "timeout"): _DURATION,
    (ControlLimits, "noProgressAfter"): _AT_LEAST_1,
    (ControlLimits, "maxInfraRetries"): _AT_LEAST_0,
    (Options, "maxConcurrency"): _AT_LEAST_0,
    (Options, "timeout"): _DURATION,
    (Options, "stepTimeout"): _DURATION,
    (Options, "maxTokens"): _AT_LEAST_1,
    (Options, "maxCost"): _POSITIVE,
    (Options, "maxRetries"): _AT_LEAST_0,
    (Supervision, "maxRestarts"): _AT_LEAST_0,
    (Supervision, "within"): _DURATION,
    (Coordinator, "maxWakes"): _AT_LEAST_1,
}
for _key in ("instructions", "timeout", "retries", "maxRetries", "tool", "handler", "maxCost"):
    _RULES[State, _key] = _RULES[Step, _key]


def rule_for(cls: type, key: str) -> Rule | None:
    """The constraints of ``key`` in Struct ``cls`` (or a base of it), if any."""
    return next((r for c in cls.__mro__ if (r := _RULES.get((c, key)))), None)


def constrain(value: Any, path: DocPath, rule: Rule, reporter: Reporter) -> None:
    """Report where ``value`` (at ``path``) breaks ``rule``."""
    name = path[-1]
    problems: list[str] = []
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        problems += _out_of_range(value, name, rule)
    elif isinstance(value, (str, list, dict)):
        problems += _wrong_length(value, name, rule)
    if isinstance(value, str) and value:
        problems += _wrong_text(value, name, rule)
    for problem in problems:
        reporter.add(path, problem)


def _out_of_range(value: float, name: str | int, rule: Rule) -> list[str]:
    problems = []
    if rule.ge is not None and not value >= rule.ge:  # NaN is out of every range
        problems.append(f"{name} must be at least {rule.ge:g}, got {value}")
    if rule.gt is not None and not value > rule.gt:
        problems.append(f"{name} must be more than {rule.gt:g}, got {value}")
    if rule.le is not None and value > rule.le:
        problems.append(f"{name} must be at most {rule.le:g}, got {value}")
    return problems


def _wrong_length(
    value: str | list[Any] | dict[str, Any], name: str | int, rule: Rule
) -> list[str]:
    problems = []
    unit = "characters" if isinstance(value, str) else "items"
    if rule.min_len is not None and len(value) < rule.min_len:
        problems.append(
            f"{name} must not be empty"
            if rule.min_len == 1
            else f"{name} needs at least {rule.min_len} {unit}"
        )
    if rule.max_len is not None and len(value) > rule.max_len:
        problems.append(f"{name} has {len(value)} {unit}; the limit is {rule.max_len}")
    return problems


def _wrong_text(value: str, name: str | int, rule: Rule) -> list[str]:
    problems = []
    if rule.pattern is not None and not rule.pattern.match(value):
        problems.append(f"{name} {value!r} must match {rule.pattern.pattern} ({rule.hint})")
    if rule.duration:
        try:
            parse_duration(value)
        except ValueError as exc:
            problems.append(f"{name}: {exc}")
    return problems
