"""The control loop (SPEC 2.5): planner, actor, checks, evaluator, and the decide policy.

``_decide`` is the deterministic policy (no I/O), ``_control`` the controller
that drives the iterations, ``_subflow`` the workflows it calls like functions,
``_control_log`` what it writes down.
"""

from ._control import ControlController as ControlController
from ._control_log import DECISION as DECISION
from ._decide import PERSON_SCHEMA as PERSON_SCHEMA
from ._decide import CheckResult as CheckResult
from ._decide import ControlStatus as ControlStatus
from ._decide import Decision as Decision
from ._decide import History as History
from ._decide import InfraFailure as InfraFailure
from ._decide import Recommendation as Recommendation
from ._decide import Ruling as Ruling
from ._decide import Setup as Setup
from ._decide import Spent as Spent
from ._decide import Verdict as Verdict
from ._decide import admit as admit
from ._decide import advance as advance
from ._decide import decide as decide
from ._decide import heed as heed

__all__ = [
    "DECISION",
    "PERSON_SCHEMA",
    "CheckResult",
    "ControlController",
    "ControlStatus",
    "Decision",
    "History",
    "InfraFailure",
    "Recommendation",
    "Ruling",
    "Setup",
    "Spent",
    "Verdict",
    "admit",
    "advance",
    "decide",
    "heed",
]
