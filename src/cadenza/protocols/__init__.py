"""Data exchanged between Cadenza's layers and with the outside: events, results, wire.

Data only: msgspec Structs and their codecs, imported by every other layer.
"""

from ._events import Event as Event
from ._events import EventType as EventType
from ._events import Tokens as Tokens
from ._events import format_duration as format_duration
from ._events import timestamp as timestamp
from ._result import FINISHED as FINISHED
from ._result import ErrorInfo as ErrorInfo
from ._result import GraphSummary as GraphSummary
from ._result import LoopSummary as LoopSummary
from ._result import MessageRecord as MessageRecord
from ._result import RunResult as RunResult
from ._result import RunStatus as RunStatus
from ._result import StepRecord as StepRecord
from ._result import StepStatus as StepStatus
from ._result import Usage as Usage
from ._wire import MAX_CAPACITY as MAX_CAPACITY
from ._wire import PROTOCOL_VERSION as PROTOCOL_VERSION
from ._wire import WORKER_NAME as WORKER_NAME
from ._wire import AgentOrder as AgentOrder
from ._wire import Cancel as Cancel
from ._wire import CommandOrder as CommandOrder
from ._wire import Disconnect as Disconnect
from ._wire import Dispatch as Dispatch
from ._wire import HandlerOrder as HandlerOrder
from ._wire import Heartbeat as Heartbeat
from ._wire import Hello as Hello
from ._wire import Mail as Mail
from ._wire import Ready as Ready
from ._wire import Result as Result
from ._wire import StepEvent as StepEvent
from ._wire import SupervisorMessage as SupervisorMessage
from ._wire import ToolOrder as ToolOrder
from ._wire import Welcome as Welcome
from ._wire import WireError as WireError
from ._wire import WorkerMessage as WorkerMessage
from ._wire import WorkOrder as WorkOrder
from ._wire import supervisor_decoder as supervisor_decoder
from ._wire import worker_decoder as worker_decoder

__all__ = [
    "FINISHED",
    "MAX_CAPACITY",
    "PROTOCOL_VERSION",
    "WORKER_NAME",
    "AgentOrder",
    "Cancel",
    "CommandOrder",
    "Disconnect",
    "Dispatch",
    "ErrorInfo",
    "Event",
    "EventType",
    "GraphSummary",
    "HandlerOrder",
    "Heartbeat",
    "Hello",
    "LoopSummary",
    "Mail",
    "MessageRecord",
    "Ready",
    "Result",
    "RunResult",
    "RunStatus",
    "StepEvent",
    "StepRecord",
    "StepStatus",
    "SupervisorMessage",
    "Tokens",
    "ToolOrder",
    "Usage",
    "Welcome",
    "WireError",
    "WorkOrder",
    "WorkerMessage",
    "format_duration",
    "supervisor_decoder",
    "timestamp",
    "worker_decoder",
]
