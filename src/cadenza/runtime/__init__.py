"""Deprecated: the actor kernel is `cadenza.kernel` now; this alias goes in the next release.

Renamed so that no reader confuses the actor package with `cadenza.Runtime`, the
workflow service. Importing this module warns (``DeprecationWarning``) and gives
the same objects as `cadenza.kernel`.
"""

import warnings

from cadenza.kernel import *  # noqa: F403 -- the alias exports exactly what the kernel does
from cadenza.kernel import __all__ as __all__

warnings.warn(
    "cadenza.runtime is now cadenza.kernel; the alias will be removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)
