"""The Python API: `Runtime` (the workflow service), `RunHandle`, event subscriptions, resume.

``_runtime`` is the service an application embeds (``async with Runtime(...)``),
``_subscription`` the bounded event streams it hands out, ``_resume`` the
rebuilding of an interrupted run from its store. Import from ``cadenza``;
this package is where the code lives.
"""

from ._runtime import EventSubscription as EventSubscription
from ._runtime import RunHandle as RunHandle
from ._runtime import Runtime as Runtime
from ._runtime import SubscriptionStatistics as SubscriptionStatistics
from ._runtime import new_run_id as new_run_id

__all__ = ["EventSubscription", "RunHandle", "Runtime", "SubscriptionStatistics", "new_run_id"]
