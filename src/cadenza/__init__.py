"""Cadenza: an asyncio actor-model runtime for agent workflows that loop.

Every step, loop iteration and graph state runs as an actor with an inbox; a
supervisor routes messages by namespaced address (``dev-cycle.0.implement``);
runs are bounded, observable and durable.

    import cadenza

    async with cadenza.Runtime(store=".cadenza/runs.db") as runtime:
        result = await runtime.run("flow.yaml", inputs={"topic": "loops"})
"""

import importlib as _importlib
import typing as _typing

from ._version import __version__ as __version__
from .errors import CadenzaError as CadenzaError
from .errors import InputError as InputError
from .errors import RunNotFound as RunNotFound
from .errors import StoreError as StoreError
from .protocols import ErrorInfo as ErrorInfo
from .protocols import Event as Event
from .protocols import RunResult as RunResult
from .protocols import StepRecord as StepRecord

if _typing.TYPE_CHECKING:
    from .actors import StepContext as StepContext
    from .actors import StepOutput as StepOutput
    from .actors import ToolPolicy as ToolPolicy
    from .actors import ToolRequest as ToolRequest
    from .api import EventSubscription as EventSubscription
    from .api import RunHandle as RunHandle
    from .api import Runtime as Runtime
    from .api import SubscriptionStatistics as SubscriptionStatistics
    from .api import new_run_id as new_run_id
    from .workflow import LoadedWorkflow as LoadedWorkflow
    from .workflow import Workflow as Workflow
    from .workflow import WorkflowError as WorkflowError
    from .workflow import load_workflow as load_workflow

# The runtime (httpx, the actors, the store) loads on first use, so
# `import cadenza.workflow` and `cadenza validate` do not pay for it.
_LAZY = {
    "EventSubscription": ".api",
    "RunHandle": ".api",
    "Runtime": ".api",
    "SubscriptionStatistics": ".api",
    "new_run_id": ".api",
    "StepContext": ".actors",
    "StepOutput": ".actors",
    "ToolPolicy": ".actors",
    "ToolRequest": ".actors",
    "LoadedWorkflow": ".workflow",
    "Workflow": ".workflow",
    "WorkflowError": ".workflow",
    "load_workflow": ".workflow",
}


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cadenza' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CadenzaError",
    "ErrorInfo",
    "Event",
    "EventSubscription",
    "InputError",
    "LoadedWorkflow",
    "RunHandle",
    "RunNotFound",
    "RunResult",
    "Runtime",
    "StepContext",
    "StepOutput",
    "StepRecord",
    "StoreError",
    "SubscriptionStatistics",
    "ToolPolicy",
    "ToolRequest",
    "Workflow",
    "WorkflowError",
    "__version__",
    "load_workflow",
    "new_run_id",
]
