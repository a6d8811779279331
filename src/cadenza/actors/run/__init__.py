"""What the actors of one run share: its context, journal and replay, and the words they speak.

`RunContext` (with `Scope`, `Brief` and `Placement`) is handed to every actor of a
run; `RunJournal` writes down every fact about it, `Replay` reads an interrupted
run's record back, `Recording` holds a recorded run up to its offline replay;
`_messages` are the letters agents exchange, `_outcome` how a step reports its
end. Nothing here knows any particular kind of step.
"""

from ._budget import BudgetExceeded as BudgetExceeded
from ._context import NO_BRIEF as NO_BRIEF
from ._context import Brief as Brief
from ._context import Cancellable as Cancellable
from ._context import PlacedActor as PlacedActor
from ._context import Placement as Placement
from ._context import RunBasis as RunBasis
from ._context import RunContext as RunContext
from ._context import Scope as Scope
from ._context import cancel_parked as cancel_parked
from ._context import document_step_ids as document_step_ids
from ._dispatch import DispatchSink as DispatchSink
from ._dispatch import StepDispatcher as StepDispatcher
from ._document import RunDocument as RunDocument
from ._document import decode_document as decode_document
from ._document import encode_document as encode_document
from ._journal import MAX_RESULT_MESSAGES as MAX_RESULT_MESSAGES
from ._journal import EventSink as EventSink
from ._journal import Position as Position
from ._journal import RunJournal as RunJournal
from ._mcp import McpHost as McpHost
from ._mcp import McpUnavailable as McpUnavailable
from ._messages import COORDINATOR as COORDINATOR
from ._messages import INBOX_BYTES as INBOX_BYTES
from ._messages import INBOX_SIZE as INBOX_SIZE
from ._messages import MSG_TYPES as MSG_TYPES
from ._messages import POSTER as POSTER
from ._messages import RUN_MAIL_BYTES as RUN_MAIL_BYTES
from ._messages import RUN_MAIL_SIZE as RUN_MAIL_SIZE
from ._messages import AgentMessage as AgentMessage
from ._messages import Backlog as Backlog
from ._messages import Drain as Drain
from ._messages import Outgoing as Outgoing
from ._messages import Unanswered as Unanswered
from ._messages import letter_size as letter_size
from ._messages import pending_bytes as pending_bytes
from ._messages import step_name as step_name
from ._outcome import Report as Report
from ._outcome import StepFailure as StepFailure
from ._outcome import StepFinished as StepFinished
from ._outcome import work_error as work_error
from ._permissions import READ_ONLY_TOOLS as READ_ONLY_TOOLS
from ._permissions import Asker as Asker
from ._permissions import PermissionAnswer as PermissionAnswer
from ._permissions import PermissionDecision as PermissionDecision
from ._permissions import PermissionHook as PermissionHook
from ._permissions import PermissionPolicy as PermissionPolicy
from ._permissions import PermissionRule as PermissionRule
from ._permissions import StoredPolicy as StoredPolicy
from ._permissions import ToolPolicy as ToolPolicy
from ._permissions import ToolRequest as ToolRequest
from ._permissions import resume_refusal as resume_refusal
from ._permissions import resumed_policy as resumed_policy
from ._pricing import PricesLike as PricesLike
from ._pricing import as_prices as as_prices
from ._pricing import caller_prices as caller_prices
from ._pricing import cost_budget as cost_budget
from ._pricing import run_prices as run_prices
from ._pricing import unpriced as unpriced
from ._recording import Recording as Recording
from ._recording import ReplayDiffers as ReplayDiffers
from ._replay import REPLAYABLE as REPLAYABLE
from ._replay import Replay as Replay
from ._replayed import ReplayedStep as ReplayedStep
from ._shell import Reading as Reading
from ._shell import SimpleCommand as SimpleCommand
from ._shell import read_command as read_command
from ._worktrees import IsolationError as IsolationError
from ._worktrees import StepWorktree as StepWorktree
from ._worktrees import Worktrees as Worktrees

__all__ = [
    "COORDINATOR",
    "INBOX_BYTES",
    "INBOX_SIZE",
    "MAX_RESULT_MESSAGES",
    "MSG_TYPES",
    "NO_BRIEF",
    "POSTER",
    "READ_ONLY_TOOLS",
    "REPLAYABLE",
    "RUN_MAIL_BYTES",
    "RUN_MAIL_SIZE",
    "AgentMessage",
    "Asker",
    "Backlog",
    "Brief",
    "BudgetExceeded",
    "Cancellable",
    "DispatchSink",
    "Drain",
    "EventSink",
    "IsolationError",
    "McpHost",
    "McpUnavailable",
    "Outgoing",
    "PermissionAnswer",
    "PermissionDecision",
    "PermissionHook",
    "PermissionPolicy",
    "PermissionRule",
    "PlacedActor",
    "Placement",
    "Position",
    "PricesLike",
    "Reading",
    "Recording",
    "Replay",
    "ReplayDiffers",
    "ReplayedStep",
    "Report",
    "RunBasis",
    "RunContext",
    "RunDocument",
    "RunJournal",
    "Scope",
    "SimpleCommand",
    "StepDispatcher",
    "StepFailure",
    "StepFinished",
    "StepWorktree",
    "StoredPolicy",
    "ToolPolicy",
    "ToolRequest",
    "Unanswered",
    "Worktrees",
    "as_prices",
    "caller_prices",
    "cancel_parked",
    "cost_budget",
    "decode_document",
    "document_step_ids",
    "encode_document",
    "letter_size",
    "pending_bytes",
    "read_command",
    "resume_refusal",
    "resumed_policy",
    "run_prices",
    "step_name",
    "unpriced",
    "work_error",
]
