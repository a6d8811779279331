"""The control loop (SPEC 2.5): planner, actor, checks, evaluator, and the decide policy.

`decide` is the deterministic policy (no I/O; the loop SDK re-exports its types
from ``cadenza.loops``), ``_control`` the controller that drives the iterations,
``_subflow`` the workflows it calls like functions, ``_control_log`` what it
writes down.
"""

from ._control import ControlController as ControlController

__all__ = ["ControlController"]
