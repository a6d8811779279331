"""Data exchanged between Cadenza's layers and with the outside: events, results, wire.

Data only: msgspec Structs and their codecs, imported by every other layer.
"""

from . import _calls, _events, _payloads, _result, _wire
from ._calls import *  # noqa: F403
from ._events import *  # noqa: F403
from ._payloads import *  # noqa: F403
from ._payloads import Shared as Shared
from ._payloads import iteration_end as iteration_end
from ._payloads import iteration_start as iteration_start
from ._payloads import to_data as to_data
from ._result import *  # noqa: F403
from ._wire import *  # noqa: F403

# Each module's `__all__` is what it offers; the payloads' helpers for emitters
# (internal to the package's users, not in `cadenza.events`) are named here.
__all__ = ["Shared", "iteration_end", "iteration_start", "to_data"]
__all__ += _calls.__all__
__all__ += _events.__all__
__all__ += _payloads.__all__
__all__ += _result.__all__
__all__ += _wire.__all__
