"""Test helpers for Cadenza users: a scripted chat-model server, canned HTTP, a fixture.

``ScriptedLLMServer`` is a real local HTTP server speaking the OpenAI or
Anthropic wire format from rules, so a test can drive the real providers end
to end, faults included::

    from cadenza.testing import ScriptedLLMServer, ServerRule

    with ScriptedLLMServer([ServerRule(["Hello!"])]) as server:
        environ = server.environ()  # OPENAI_BASE_URL and OPENAI_API_KEY
        ...

``ScriptedTransport`` answers a ``ProviderRegistry`` from canned responses
without any sockets. With pytest, ``pytest_plugins =
["cadenza.testing.pytest_plugin"]`` in the root ``conftest.py`` adds an
``llm_server`` fixture. This package itself does not import pytest.

``run_workflow`` runs a workflow on a fresh runtime and returns its result;
``MessageRecorder`` (an ``on_event`` sink) keeps the messages agents sent and
which step read them; ``FakeClock`` makes delays and timeouts instant.

``CrashHarness`` runs a workflow in a real ``cadenza`` process, kills it with
SIGKILL at a chosen moment (``KillPoint``), resumes it, and
``compare_results`` tells how the result differs from an uninterrupted run's.

``replay_run`` replays a recorded run offline, against its recorded model replies
and tool outputs, and its ``ReplayReport`` names the first place where the
workflow (or an edited copy of it) decides otherwise than the record.
"""

from cadenza.api import ReplayReport as ReplayReport
from cadenza.api import replay_run as replay_run
from cadenza.kernel import FakeClock as FakeClock

from ._crash import CrashHarness as CrashHarness
from ._crash import CrashOutcome as CrashOutcome
from ._crash import KillPoint as KillPoint
from ._crash import ProcessOutcome as ProcessOutcome
from ._crash import compare_results as compare_results
from ._helpers import MessageRecorder as MessageRecorder
from ._helpers import RecordedMessage as RecordedMessage
from ._helpers import run_workflow as run_workflow
from ._llm_rules import ReplyLike as ReplyLike
from ._llm_rules import RequestMatch as RequestMatch
from ._llm_rules import RequestView as RequestView
from ._llm_rules import RuleLike as RuleLike
from ._llm_rules import ServerReply as ServerReply
from ._llm_rules import ServerRule as ServerRule
from ._llm_rules import ServerToolCall as ServerToolCall
from ._llm_server import RecordedRequest as RecordedRequest
from ._llm_server import ScriptedLLMServer as ScriptedLLMServer
from ._transport import CannedAnswer as CannedAnswer
from ._transport import ScriptedTransport as ScriptedTransport

__all__ = [
    "CannedAnswer",
    "CrashHarness",
    "CrashOutcome",
    "FakeClock",
    "KillPoint",
    "MessageRecorder",
    "ProcessOutcome",
    "RecordedMessage",
    "RecordedRequest",
    "ReplayReport",
    "ReplyLike",
    "RequestMatch",
    "RequestView",
    "RuleLike",
    "ScriptedLLMServer",
    "ScriptedTransport",
    "ServerReply",
    "ServerRule",
    "ServerToolCall",
    "compare_results",
    "replay_run",
    "run_workflow",
]
