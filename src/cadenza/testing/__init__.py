"""Test helpers for Cadenza users: a scripted chat-model server, and its pytest fixture.

``ScriptedLLMServer`` is a real local HTTP server speaking the OpenAI or
Anthropic wire format from rules, so a test can drive the real providers end
to end, faults included::

    from cadenza.testing import ScriptedLLMServer, ServerRule

    with ScriptedLLMServer([ServerRule(["Hello!"])]) as server:
        environ = server.environ()  # OPENAI_BASE_URL and OPENAI_API_KEY
        ...

With pytest, ``pytest_plugins = ["cadenza.testing.pytest_plugin"]`` in the
root ``conftest.py`` adds an ``llm_server`` fixture. This package itself does
not import pytest.
"""

from ._llm_rules import ReplyLike as ReplyLike
from ._llm_rules import RequestMatch as RequestMatch
from ._llm_rules import RequestView as RequestView
from ._llm_rules import RuleLike as RuleLike
from ._llm_rules import ServerReply as ServerReply
from ._llm_rules import ServerRule as ServerRule
from ._llm_rules import ServerToolCall as ServerToolCall
from ._llm_server import RecordedRequest as RecordedRequest
from ._llm_server import ScriptedLLMServer as ScriptedLLMServer

__all__ = [
    "RecordedRequest",
    "ReplyLike",
    "RequestMatch",
    "RequestView",
    "RuleLike",
    "ScriptedLLMServer",
    "ServerReply",
    "ServerRule",
    "ServerToolCall",
]
