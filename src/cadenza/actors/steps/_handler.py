"""Running a ``handler`` step: a Python callable named ``pkg.module:function``.

Async functions are awaited on the event loop; plain functions run in a daemon
worker thread (``kernel/_threads.py``) so a slow one cannot stall every other
actor, and one that never returns cannot keep the process alive. The callable receives one
argument, a `StepContext`, and may return a string (the step's content), a dict
(content is its JSON, result is the dict), None (empty content) or any other
JSON-encodable value (content is its JSON).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from cadenza.actors.run import NO_BRIEF, Brief
from cadenza.errors import CadenzaError
from cadenza.kernel import call_in_thread

__all__ = [
    "HandlerError",
    "StepContext",
    "StepOutput",
    "StepsView",
    "call_handler",
    "resolve_handler",
]


class HandlerError(CadenzaError):
    """A handler reference cannot be imported, or is not callable."""


@dataclass(frozen=True, slots=True)
class StepOutput:
    """What a finished step left for those that come after it."""

    content: str | None
    result: Any
    status: str


class StepContext(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a handler may know about the step it runs (immutable).

    Attributes:
        run_id: The run's id.
        address: The step's namespaced address (``deploy-each[1].verify``).
        attempt: 1 for the first execution, 2 for the first retry, ...
        idempotency_key: ``run_id:address:attempt``: the same for every delivery of
            one execution (a remote re-dispatch keeps it), new for each retry and
            for a re-run after a crash; key on ``run_id`` and ``address`` to do a
            side effect once across crashes (docs/durability.md).
        inputs: The run's inputs.
        steps: Outputs of the steps in scope, by id.
        workflow_dir: The directory of the workflow file.
        item: The forEach element, when inside a forEach.
        index: The forEach position, when inside a forEach.
        iteration: The 0-based repeat-until iteration, when inside a loop.
        brief: What the step's controller passed on: revision feedback, the
            graph state that routed here, the forEach index.
    """

    run_id: str
    address: str
    attempt: int
    idempotency_key: str
    inputs: Mapping[str, Any]
    steps: Mapping[str, StepOutput]
    workflow_dir: Path
    item: Any = None
    index: int | None = None
    iteration: int | None = None
    brief: Brief = NO_BRIEF


class StepsView(Mapping[str, StepOutput]):
    """Read-only ``steps`` of a `StepContext`, built per lookup rather than copied."""

    __slots__ = ("_outputs",)

    def __init__(self, outputs: Mapping[str, Mapping[str, Any]]) -> None:
        self._outputs = outputs

    def __getitem__(self, step_id: str) -> StepOutput:
        out = self._outputs[step_id]
        return StepOutput(out["content"], out["result"], out["status"])

    def __iter__(self) -> Iterator[str]:
        return iter(self._outputs)

    def __len__(self) -> int:
        return len(self._outputs)


Handler = Callable[[StepContext], Any]
_cache: dict[tuple[str, Path], Handler] = {}
# The directory each reference was last resolved in, and to what: a step resolves its
# handler on every execution, and compares the directory by identity here.
_by_reference: dict[str, tuple[Path, Handler]] = {}
_is_async: dict[Handler, bool] = {}


MOVED_MODULES = {"cadenza._loop_functions": "cadenza.loops._functions"}
"""Where Cadenza's own handler modules went, so runs recorded before a move still resume."""


def resolve_handler(reference: str, workflow_dir: Path) -> Handler:
    """Imports ``pkg.module:function``, looking beside the workflow file too.

    Raises:
        HandlerError: The reference is malformed, the module or attribute is
            missing, or the attribute is not callable.
    """
    known = _by_reference.get(reference)
    if known is not None and known[0] is workflow_dir:  # a Path's hash is a Python call
        return known[1]
    key = (reference, workflow_dir)
    cached = _cache.get(key)
    if cached is not None:
        _by_reference[reference] = (workflow_dir, cached)
        return cached
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise HandlerError(f"handler {reference!r} is not of the form 'package.module:function'")
    module_name = MOVED_MODULES.get(module_name, module_name)
    # Handlers usually live beside the workflow that names them.
    directory = str(workflow_dir)
    if directory not in sys.path:
        sys.path.append(directory)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise HandlerError(
            f"handler {reference!r}: cannot import {module_name!r}: {error}"
        ) from error
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise HandlerError(
                f"handler {reference!r}: module {module_name!r} has no attribute {attribute!r}"
            ) from None
    if not callable(target):
        raise HandlerError(f"handler {reference!r} is not callable")
    _cache[key] = target
    _by_reference[reference] = (workflow_dir, target)
    return target  # type: ignore[no-any-return]


_encode = msgspec.json.encode


async def call_handler(handler: Handler, context: StepContext) -> tuple[str, Any]:
    """Calls a handler and returns ``(content, result)``.

    Raises:
        Exception: Whatever the handler raised; the caller records it as the
            step's failure.
    """
    is_async = _is_async.get(handler)
    if is_async is None:  # inspect is slow enough to matter on a 25 us step
        is_async = _is_async[handler] = inspect.iscoroutinefunction(handler)
    if is_async:
        value = await handler(context)
    else:
        # Abandoned on cancellation: a step timeout ends the step even if the function
        # never returns (a thread cannot be killed; it runs on, its result discarded),
        # and, a daemon thread, it keeps neither the run nor the process waiting.
        value = await call_in_thread(handler, context)
        if inspect.isawaitable(value):
            value = await value
    if value is None:
        return "", None
    if isinstance(value, str):
        return value, None
    if isinstance(value, dict):
        return _encode(value).decode(), value
    return _encode(value).decode(), None
