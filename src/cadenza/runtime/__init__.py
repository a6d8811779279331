"""Deprecated: the actor kernel is `cadenza.kernel` now; this alias goes in the next release.

Renamed so that no reader confuses the actor package with `cadenza.Runtime`, the
workflow service. Importing this module warns (``DeprecationWarning``) and gives
the same objects as `cadenza.kernel` and `cadenza.store` (the run store, which
was part of the kernel when this name was current).
"""

import warnings

from cadenza.kernel import *  # noqa: F403 -- the alias exports exactly what the kernel does
from cadenza.kernel import __all__ as _kernel_names
from cadenza.store import *  # noqa: F403 -- and what the store does
from cadenza.store import __all__ as _store_names

__all__ = [*_kernel_names, *_store_names]

warnings.warn(
    "cadenza.runtime is now cadenza.kernel, and its run store cadenza.store; "
    "the alias will be removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)
