"""Rules for ``ScriptedLLMServer``: which request gets which scripted reply.

A rule matches on what the request contains (system prompt, user text, the
last message, the tools offered, the model) and answers with its replies in
order; after the last one it repeats it or cycles. Replies can also be
faults: an error status with headers, a reset connection, a slow or trickled
body. Rules and replies are dataclasses, and dicts in the shape of the
conformance suite's ``fake_openai.py`` rules are accepted too.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

__all__ = [
    "ReplyLike",
    "RequestMatch",
    "RequestView",
    "RuleLike",
    "Script",
    "ServerReply",
    "ServerRule",
    "ServerToolCall",
]


@dataclass(frozen=True, slots=True)
class RequestView:
    """The parts of a request that rules match on, the same for every wire format.

    Attributes:
        system: The system prompt text.
        user: The text of every user message, joined by newlines.
        last: The text of the last message.
        last_role: The last message's role; ``tool`` for tool results,
            Anthropic's included (a user turn made only of ``tool_result``).
        model: The requested model.
        tools: The names of the offered tools.
    """

    system: str = ""
    user: str = ""
    last: str = ""
    last_role: str | None = None
    model: str | None = None
    tools: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RequestMatch:
    """What a request must show for a rule to answer it; fields left None always hold.

    Attributes:
        system: A substring of the system prompt.
        user: A substring of the user messages' text.
        last: A substring of the last message's text.
        last_role: The last message's role (``user``, ``assistant``, ``tool``).
        model: The exact model name.
        tools: The name of a tool the request offers.
    """

    system: str | None = None
    user: str | None = None
    last: str | None = None
    last_role: str | None = None
    model: str | None = None
    tools: str | None = None

    def matches(self, view: RequestView) -> bool:
        """Whether every given field holds for ``view``."""
        return (
            (self.system is None or self.system in view.system)
            and (self.user is None or self.user in view.user)
            and (self.last is None or self.last in view.last)
            and (self.last_role is None or self.last_role == view.last_role)
            and (self.model is None or self.model == view.model)
            and (self.tools is None or self.tools in view.tools)
        )


@dataclass(frozen=True, slots=True)
class ServerToolCall:
    """A tool call in a scripted reply; ``arguments`` as a mapping, or raw (even bad) JSON text."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ServerReply:
    """One scripted answer, or fault.

    Attributes:
        content: The reply text.
        tool_calls: Tool calls the model makes.
        usage: ``(prompt_tokens, completion_tokens)`` reported.
        status: The HTTP status; anything but 200 sends an error body.
        headers: Extra response headers, e.g. ``{"Retry-After": "2"}``.
        body: Raw body text sent instead of the generated one (any status).
        delay: Seconds to wait before answering (wall time, on the server's thread).
        reset: Close the connection without any response.
        trickle: When positive, send the body one byte at a time, this many
            seconds apart (headers go out at once).
        hold: When given, answer only once the test sets this event: a way
            to keep requests in flight without guessing at delays.
        chunk: Characters per text delta when the request asks for a stream
            (tool-call arguments go in fragments of the same size).
        stream: False answers a streamed request with a whole body, as a
            server that cannot stream does.
        pause: With a streamed reply: send about half of its events, then the
            rest only once the test sets this event (a model caught mid-reply).
        reasoning: The model's reasoning, before its text, as each wire returns it
            (OpenAI-compatible ``reasoning_content``; a signed ``thinking`` block;
            a Gemini ``thought`` part; a signed ``reasoningContent`` block).
        cached_tokens: Of the prompt tokens, those reported read from the cache.
        reasoning_tokens: Of the completion tokens, those reported spent reasoning
            (where the wire counts them apart: OpenAI's, Gemini's).
    """

    content: str | None = None
    tool_calls: Sequence[ServerToolCall] = ()
    usage: tuple[int, int] = (10, 5)
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str | None = None
    delay: float = 0.0
    reset: bool = False
    trickle: float = 0.0
    hold: threading.Event | None = None
    chunk: int = 7
    stream: bool = True
    pause: threading.Event | None = None
    reasoning: str | None = None
    cached_tokens: int = 0
    reasoning_tokens: int = 0

    @classmethod
    def coerce(cls, value: ReplyLike) -> ServerReply:
        """A reply from a ``ServerReply``, a string (the content) or a dict of the same fields.

        Dicts may spell ``tool_calls`` as ``toolCalls``, give ``usage`` as
        ``{prompt_tokens, completion_tokens}`` and ``body`` as JSON data.

        Raises:
            ValueError: The dict has keys a reply does not have.
        """
        if isinstance(value, ServerReply):
            return value
        if isinstance(value, str):
            return cls(content=value)
        data = dict(value)
        if "toolCalls" in data:
            data["tool_calls"] = data.pop("toolCalls")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown reply key(s) {unknown} in {value!r}")
        data["tool_calls"] = tuple(
            c if isinstance(c, ServerToolCall) else ServerToolCall(**c)
            for c in data.get("tool_calls") or ()
        )
        usage = data.get("usage")
        if isinstance(usage, Mapping):
            data["usage"] = (usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
        body = data.get("body")
        if body is not None and not isinstance(body, str):
            data["body"] = json.dumps(body)
        return cls(**data)


ReplyLike = ServerReply | str | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ServerRule:
    """Replies for the requests that match.

    Attributes:
        replies: The answers, in order (``ServerReply``, a string, or a dict).
        match: What a request must show; None (or empty) matches every request.
        name: Recorded with each request the rule answers.
        after: Once the replies are used up: ``repeat-last`` or ``cycle``.
    """

    replies: Sequence[ReplyLike]
    match: RequestMatch | Mapping[str, str] | None = None
    name: str = ""
    after: Literal["repeat-last", "cycle"] = "repeat-last"

    @classmethod
    def coerce(cls, value: RuleLike) -> ServerRule:
        """A rule from a ``ServerRule`` or a dict with the same keys (fake_openai.py's form)."""
        if isinstance(value, ServerRule):
            return value
        return cls(**value)


RuleLike = ServerRule | Mapping[str, Any]


class Script:
    """The rules with their counters; ``pick`` is safe from many server threads.

    Raises:
        ValueError: A rule has no replies, or a reply or match is malformed.
    """

    def __init__(self, rules: Sequence[RuleLike]) -> None:
        self._rules: list[tuple[str, RequestMatch, tuple[ServerReply, ...], bool]] = []
        for index, value in enumerate(rules):
            try:
                rule = ServerRule.coerce(value)
                match = rule.match
                if not isinstance(match, RequestMatch):
                    match = RequestMatch(**(match or {}))
                replies = tuple(ServerReply.coerce(r) for r in rule.replies)
            except TypeError as exc:  # a dict with keys the dataclass does not have
                raise ValueError(f"rule {index}: {exc}") from None
            if not replies:
                raise ValueError(f"rule {rule.name or index} has no replies")
            if rule.after not in ("repeat-last", "cycle"):
                raise ValueError(f"rule {rule.name or index}: after must be repeat-last or cycle")
            self._rules.append((rule.name or str(index), match, replies, rule.after == "cycle"))
        self._counts = [0] * len(self._rules)
        self._lock = threading.Lock()

    def pick(self, view: RequestView) -> tuple[str, ServerReply] | None:
        """The first matching rule's name and its next reply, or None when none matches."""
        for index, (name, match, replies, cycle) in enumerate(self._rules):
            if not match.matches(view):
                continue
            with self._lock:
                count = self._counts[index]
                self._counts[index] += 1
            if count >= len(replies):
                count = count % len(replies) if cycle else len(replies) - 1
            return name, replies[count]
        return None
