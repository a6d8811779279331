"""Data exchanged between Cadenza's layers and with the outside: events and results.

Data only: msgspec Structs and their codecs, imported by every other layer.
"""

from ._events import Event as Event
from ._events import EventType as EventType
from ._events import Tokens as Tokens
from ._events import format_duration as format_duration
from ._events import timestamp as timestamp
from ._result import ErrorInfo as ErrorInfo
from ._result import GraphSummary as GraphSummary
from ._result import LoopSummary as LoopSummary
from ._result import MessageRecord as MessageRecord
from ._result import RunResult as RunResult
from ._result import RunStatus as RunStatus
from ._result import StepRecord as StepRecord
from ._result import StepStatus as StepStatus
from ._result import Usage as Usage

__all__ = [
    "ErrorInfo",
    "Event",
    "EventType",
    "GraphSummary",
    "LoopSummary",
    "MessageRecord",
    "RunResult",
    "RunStatus",
    "StepRecord",
    "StepStatus",
    "Tokens",
    "Usage",
    "format_duration",
    "timestamp",
]
