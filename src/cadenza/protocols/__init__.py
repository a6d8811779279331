"""Data exchanged between Cadenza's layers and with the outside: events, results, wire.

Data only: msgspec Structs and their codecs, imported by every other layer.
"""

from ._events import Event as Event
from ._events import EventType as EventType
from ._events import Tokens as Tokens
from ._events import format_duration as format_duration
from ._events import timestamp as timestamp
from ._payloads import ADDED_TYPES as ADDED_TYPES
from ._payloads import NO_PAYLOAD as NO_PAYLOAD
from ._payloads import PAYLOADS as PAYLOADS
from ._payloads import ZENFLOW as ZENFLOW
from ._payloads import AgentInboxDrain as AgentInboxDrain
from ._payloads import AgentMemory as AgentMemory
from ._payloads import AgentTurn as AgentTurn
from ._payloads import Checkpoint as Checkpoint
from ._payloads import ControlDecision as ControlDecision
from ._payloads import CoordinatorWake as CoordinatorWake
from ._payloads import ForEachMessage as ForEachMessage
from ._payloads import GraphEnd as GraphEnd
from ._payloads import GraphTransition as GraphTransition
from ._payloads import ItemEnd as ItemEnd
from ._payloads import ItemStart as ItemStart
from ._payloads import IterationEnd as IterationEnd
from ._payloads import IterationStart as IterationStart
from ._payloads import JudgeVerdict as JudgeVerdict
from ._payloads import LoopEnd as LoopEnd
from ._payloads import MaxWakeCyclesWarning as MaxWakeCyclesWarning
from ._payloads import McpToolFailed as McpToolFailed
from ._payloads import MessageDropped as MessageDropped
from ._payloads import MessageSent as MessageSent
from ._payloads import MessageUndelivered as MessageUndelivered
from ._payloads import Output as Output
from ._payloads import Payload as Payload
from ._payloads import ResultRejected as ResultRejected
from ._payloads import RunResumed as RunResumed
from ._payloads import Shared as Shared
from ._payloads import SignalReceived as SignalReceived
from ._payloads import StepDispatched as StepDispatched
from ._payloads import StepEnd as StepEnd
from ._payloads import StepError as StepError
from ._payloads import StepQueued as StepQueued
from ._payloads import StepReplayed as StepReplayed
from ._payloads import StepRequeued as StepRequeued
from ._payloads import StepRestart as StepRestart
from ._payloads import StepRetry as StepRetry
from ._payloads import StepStart as StepStart
from ._payloads import StepWaiting as StepWaiting
from ._payloads import ToolCall as ToolCall
from ._payloads import ToolPermission as ToolPermission
from ._payloads import WorkflowEnd as WorkflowEnd
from ._payloads import WorkflowStart as WorkflowStart
from ._payloads import WorktreeDone as WorktreeDone
from ._payloads import WorktreeKept as WorktreeKept
from ._payloads import ZenflowKeys as ZenflowKeys
from ._payloads import extra_keys as extra_keys
from ._payloads import iteration_end as iteration_end
from ._payloads import iteration_start as iteration_start
from ._payloads import payload as payload
from ._payloads import to_data as to_data
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
from ._wire import KindOrder as KindOrder
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
    "ADDED_TYPES",
    "FINISHED",
    "MAX_CAPACITY",
    "NO_PAYLOAD",
    "PAYLOADS",
    "PROTOCOL_VERSION",
    "WORKER_NAME",
    "ZENFLOW",
    "AgentInboxDrain",
    "AgentMemory",
    "AgentOrder",
    "AgentTurn",
    "Cancel",
    "Checkpoint",
    "CommandOrder",
    "ControlDecision",
    "CoordinatorWake",
    "Disconnect",
    "Dispatch",
    "ErrorInfo",
    "Event",
    "EventType",
    "ForEachMessage",
    "GraphEnd",
    "GraphSummary",
    "GraphTransition",
    "HandlerOrder",
    "Heartbeat",
    "Hello",
    "ItemEnd",
    "ItemStart",
    "IterationEnd",
    "IterationStart",
    "JudgeVerdict",
    "KindOrder",
    "LoopEnd",
    "LoopSummary",
    "Mail",
    "MaxWakeCyclesWarning",
    "McpToolFailed",
    "MessageDropped",
    "MessageRecord",
    "MessageSent",
    "MessageUndelivered",
    "Output",
    "Payload",
    "Ready",
    "Result",
    "ResultRejected",
    "RunResult",
    "RunResumed",
    "RunStatus",
    "Shared",
    "SignalReceived",
    "StepDispatched",
    "StepEnd",
    "StepError",
    "StepEvent",
    "StepQueued",
    "StepRecord",
    "StepReplayed",
    "StepRequeued",
    "StepRestart",
    "StepRetry",
    "StepStart",
    "StepStatus",
    "StepWaiting",
    "SupervisorMessage",
    "Tokens",
    "ToolCall",
    "ToolOrder",
    "ToolPermission",
    "Usage",
    "Welcome",
    "WireError",
    "WorkOrder",
    "WorkerMessage",
    "WorkflowEnd",
    "WorkflowStart",
    "WorktreeDone",
    "WorktreeKept",
    "ZenflowKeys",
    "extra_keys",
    "format_duration",
    "iteration_end",
    "iteration_start",
    "payload",
    "supervisor_decoder",
    "timestamp",
    "to_data",
    "worker_decoder",
]
