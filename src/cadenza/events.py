"""The event stream, for programs that read it: every type, and the data of each.

`RunHandle.events()`, an `EventSubscription`, ``cadenza run --events`` and the
viewer's stream give `Event`s (zenflow's envelope, docs/events.md). An event's
``type`` is one of `EventType`'s members; its ``data`` is a plain dict, which
`payload` reads back as the Struct `PAYLOADS` gives for the type, typed and
checked::

    from cadenza.events import EventType, StepStart, payload

    async for event in handle.events():
        if event.type == EventType.STEP_START:
            started = payload(event, StepStart)
            print(event.step_id, started.kind, started.attempt)

`ZENFLOW` is zenflow's own list of types and keys; `extra_keys` and
`ADDED_TYPES` say what Cadenza adds to it. This module is the public face of
`cadenza.protocols`, an internal seam that also holds the worker wire.
"""

from cadenza.protocols import ADDED_TYPES as ADDED_TYPES
from cadenza.protocols import NO_PAYLOAD as NO_PAYLOAD
from cadenza.protocols import PAYLOADS as PAYLOADS
from cadenza.protocols import ZENFLOW as ZENFLOW
from cadenza.protocols import AgentInboxDrain as AgentInboxDrain
from cadenza.protocols import AgentMemory as AgentMemory
from cadenza.protocols import AgentTurn as AgentTurn
from cadenza.protocols import Checkpoint as Checkpoint
from cadenza.protocols import ControlDecision as ControlDecision
from cadenza.protocols import CoordinatorWake as CoordinatorWake
from cadenza.protocols import Event as Event
from cadenza.protocols import EventType as EventType
from cadenza.protocols import ForEachMessage as ForEachMessage
from cadenza.protocols import GraphEnd as GraphEnd
from cadenza.protocols import GraphTransition as GraphTransition
from cadenza.protocols import ItemEnd as ItemEnd
from cadenza.protocols import ItemStart as ItemStart
from cadenza.protocols import IterationEnd as IterationEnd
from cadenza.protocols import IterationStart as IterationStart
from cadenza.protocols import JudgeVerdict as JudgeVerdict
from cadenza.protocols import LoopEnd as LoopEnd
from cadenza.protocols import MaxWakeCyclesWarning as MaxWakeCyclesWarning
from cadenza.protocols import McpToolFailed as McpToolFailed
from cadenza.protocols import MessageDropped as MessageDropped
from cadenza.protocols import MessageSent as MessageSent
from cadenza.protocols import MessageUndelivered as MessageUndelivered
from cadenza.protocols import Output as Output
from cadenza.protocols import Payload as Payload
from cadenza.protocols import ResultRejected as ResultRejected
from cadenza.protocols import RunResumed as RunResumed
from cadenza.protocols import SignalReceived as SignalReceived
from cadenza.protocols import StepDispatched as StepDispatched
from cadenza.protocols import StepEnd as StepEnd
from cadenza.protocols import StepError as StepError
from cadenza.protocols import StepQueued as StepQueued
from cadenza.protocols import StepReplayed as StepReplayed
from cadenza.protocols import StepRequeued as StepRequeued
from cadenza.protocols import StepRestart as StepRestart
from cadenza.protocols import StepRetry as StepRetry
from cadenza.protocols import StepStart as StepStart
from cadenza.protocols import StepWaiting as StepWaiting
from cadenza.protocols import Tokens as Tokens
from cadenza.protocols import ToolCall as ToolCall
from cadenza.protocols import ToolPermission as ToolPermission
from cadenza.protocols import WorkflowEnd as WorkflowEnd
from cadenza.protocols import WorkflowStart as WorkflowStart
from cadenza.protocols import WorktreeDone as WorktreeDone
from cadenza.protocols import WorktreeKept as WorktreeKept
from cadenza.protocols import ZenflowKeys as ZenflowKeys
from cadenza.protocols import extra_keys as extra_keys
from cadenza.protocols import payload as payload

__all__ = [
    "ADDED_TYPES",
    "NO_PAYLOAD",
    "PAYLOADS",
    "ZENFLOW",
    "AgentInboxDrain",
    "AgentMemory",
    "AgentTurn",
    "Checkpoint",
    "ControlDecision",
    "CoordinatorWake",
    "Event",
    "EventType",
    "ForEachMessage",
    "GraphEnd",
    "GraphTransition",
    "ItemEnd",
    "ItemStart",
    "IterationEnd",
    "IterationStart",
    "JudgeVerdict",
    "LoopEnd",
    "MaxWakeCyclesWarning",
    "McpToolFailed",
    "MessageDropped",
    "MessageSent",
    "MessageUndelivered",
    "Output",
    "Payload",
    "ResultRejected",
    "RunResumed",
    "SignalReceived",
    "StepDispatched",
    "StepEnd",
    "StepError",
    "StepQueued",
    "StepReplayed",
    "StepRequeued",
    "StepRestart",
    "StepRetry",
    "StepStart",
    "StepWaiting",
    "Tokens",
    "ToolCall",
    "ToolPermission",
    "WorkflowEnd",
    "WorkflowStart",
    "WorktreeDone",
    "WorktreeKept",
    "ZenflowKeys",
    "extra_keys",
    "payload",
]
