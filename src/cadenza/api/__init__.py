"""The Python API: `Runtime` (the workflow service), `RunHandle`, event subscriptions, resume.

``_runtime`` is the service an application embeds (``async with Runtime(...)``),
``_handle`` a run's two sides (the caller's `RunHandle`, the runtime's
`DrivenRun`), ``_subscription`` the bounded event streams it hands out, ``_resume`` the
rebuilding of an interrupted run from its store, ``_replay`` the offline replay of
a recorded one (``cadenza replay``) and ``_compare`` how two runs' results differ.
Import from ``cadenza``; this package is where the code lives.
"""

from ._compare import compare_results as compare_results
from ._handle import RunHandle as RunHandle
from ._replay import ReplayReport as ReplayReport
from ._replay import replay_run as replay_run
from ._runtime import Runtime as Runtime
from ._runtime import new_run_id as new_run_id
from ._subscription import EventSubscription as EventSubscription
from ._subscription import SubscriptionStatistics as SubscriptionStatistics

__all__ = [
    "EventSubscription",
    "ReplayReport",
    "RunHandle",
    "Runtime",
    "SubscriptionStatistics",
    "compare_results",
    "new_run_id",
    "replay_run",
]
