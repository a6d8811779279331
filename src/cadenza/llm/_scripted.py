"""The ``scripted`` provider: an agent's own list of replies, no network.

For demos and tests (SPEC.md section 5). Each reply is a string (the content)
or ``{content, toolCalls: [{name, arguments}], reasoning}``, as a mapping or as
any object with ``content`` and ``tool_calls`` attributes (the workflow's
``ScriptReply``). Replies are used in order and the last one repeats. Token
usage is estimated at about four characters a token, so budgets work in demos.
A reply's ``reasoning`` is streamed as a reasoning model's would be, apart
from its text, unless the request's ``thinking`` is ``off``.

Each completion says which reply it was (`Completion.script_position`), and the
run records it with the call; a resumed run hands the client the positions its
finished work already used (``taken``), so the agent goes on where the
interrupted run was instead of starting its script again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, Protocol, Unpack

import msgspec

from ._errors import LLMConfigError
from ._types import CallHooks, Completion, LLMRequest, LLMUsage, ModelToolCall, Reasoning

__all__ = ["ScriptReplyLike", "ScriptedClient", "estimate_tokens"]

_CHARS_PER_TOKEN: Final = 4
_REPLY_KEYS: Final = frozenset({"content", "toolCalls", "tool_calls", "reasoning"})
_encoder = msgspec.json.Encoder()


class _ScriptToolCallObject(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> Mapping[str, Any] | str: ...


class _ScriptReplyObject(Protocol):
    @property
    def content(self) -> str | None: ...

    @property
    def tool_calls(self) -> Sequence[_ScriptToolCallObject]: ...


ScriptReplyLike = Mapping[str, Any] | _ScriptReplyObject
"""A scripted reply besides a bare string: a mapping, or an object such as ``ScriptReply``."""


class _Reply(msgspec.Struct, frozen=True):
    content: str | None
    calls: tuple[tuple[str, str], ...]  # (name, arguments as JSON text)
    reasoning: str | None = None


class ScriptedClient:
    """An ``LLMClient`` that answers from a fixed script, never sleeping.

    Args:
        script: The replies, in order; the last repeats once the others are used.
        taken: Positions (0-based) already used by a resumed run's finished work:
            each call gets the lowest position not taken yet, so the calls that
            run again get the replies they had, in the order they make them.

    Raises:
        LLMConfigError: The script is empty or a reply has the wrong shape
            (the message says which reply and what is wrong).
    """

    __slots__ = ("_ahead", "_next", "_replies", "_turns")

    def __init__(
        self, script: Sequence[str | ScriptReplyLike], *, taken: Collection[int] = ()
    ) -> None:
        if not script:
            raise LLMConfigError(
                "the scripted model needs a script: list the agent's replies under `script:`"
            )
        self._replies = tuple(_reply(index, item) for index, item in enumerate(script))
        self._turns = 0
        self._ahead = set(taken)  # taken positions not reached yet
        self._next = 0
        self._skip_taken()

    @property
    def turns(self) -> int:
        """How many completions this client has answered."""
        return self._turns

    def _skip_taken(self) -> None:
        ahead = self._ahead
        while self._next in ahead:
            ahead.discard(self._next)
            self._next += 1

    def take(self, position: int) -> None:
        """Marks reply ``position`` used by a call a resumed step replayed from its
        journal: no later call is given it."""
        if position == self._next:
            self._next += 1
            self._skip_taken()
        elif position > self._next:
            self._ahead.add(position)

    async def complete(self, request: LLMRequest, **hooks: Unpack[CallHooks]) -> Completion:
        """The next scripted reply; ``on_retry`` is never called (nothing fails).

        ``on_delta`` gets the reply's text in one piece, after ``on_reasoning`` its
        reasoning (unless ``thinking`` is ``off``).
        """
        # A checkpoint, so a scripted agent loop can be cancelled and lets others run.
        await asyncio.sleep(0)
        turn = self._next
        self._next += 1
        self._turns += 1
        if self._ahead:
            self._skip_taken()
        reply = self._replies[min(turn, len(self._replies) - 1)]
        calls = tuple(
            ModelToolCall(id=f"call_{turn + 1}_{index + 1}", name=name, arguments=arguments)
            for index, (name, arguments) in enumerate(reply.calls)
        )
        thought = reply.reasoning if request.thinking != "off" else None
        on_reasoning, on_delta = hooks.get("on_reasoning"), hooks.get("on_delta")
        if on_reasoning is not None and thought:
            on_reasoning(thought, 1)
        if on_delta is not None and reply.content:
            on_delta(reply.content, 1)
        completion_chars = len(reply.content or "") + sum(len(n) + len(a) for n, a in reply.calls)
        reasoning_tokens = _tokens(len(thought or ""))
        usage = LLMUsage(
            estimate_tokens(request),
            _tokens(completion_chars) + reasoning_tokens,
            reasoning_tokens=reasoning_tokens,
        )
        return Completion(
            content=reply.content,
            tool_calls=calls,
            usage=usage,
            model=request.model,
            finish_reason="tool_calls" if calls else "stop",
            script_position=turn,
            reasoning=(Reasoning(thought),) if thought else (),
        )

    def __repr__(self) -> str:
        return f"ScriptedClient(replies={len(self._replies)}, turns={self._turns})"


def estimate_tokens(request: LLMRequest) -> int:
    """About how many tokens ``request`` would take: its text's length over four."""
    chars = 0
    for message in request.messages:
        chars += len(message.content or "")
        chars += sum(len(call.name) + len(call.arguments) for call in message.tool_calls)
    for tool in request.tools:
        chars += len(tool.name) + len(tool.description) + len(_encoder.encode(tool.parameters))
    return _tokens(chars)


def _tokens(chars: int) -> int:
    return -(-chars // _CHARS_PER_TOKEN)


def _reply(index: int, item: object) -> _Reply:
    where = f"script reply {index + 1}"
    if isinstance(item, str):
        return _Reply(item, ())
    content, reasoning, raw_calls = _fields(where, item)
    for key, value in (("content", content), ("reasoning", reasoning)):
        if value is not None and not isinstance(value, str):
            raise LLMConfigError(f"{where}: {key} must be a string, got {type(value).__name__}")
    if isinstance(raw_calls, str | bytes) or not isinstance(raw_calls, Sequence):
        raise LLMConfigError(f"{where}: toolCalls must be a list")
    calls = tuple(_call(f"{where}: toolCalls[{i}]", call) for i, call in enumerate(raw_calls))
    return _Reply(content, calls, reasoning)


def _fields(where: str, item: object) -> tuple[Any, Any, Any]:
    """A reply's content, reasoning and tool calls, as its mapping or object has them."""
    if isinstance(item, Mapping):
        unknown = sorted(str(key) for key in item if key not in _REPLY_KEYS)
        if unknown:
            raise LLMConfigError(
                f"{where}: unknown key(s) {', '.join(unknown)};"
                " a reply has content, toolCalls and reasoning"
            )
        calls = item.get("toolCalls", item.get("tool_calls")) or ()
        return item.get("content"), item.get("reasoning"), calls
    if hasattr(item, "content") or hasattr(item, "tool_calls"):
        calls = getattr(item, "tool_calls", None) or ()
        return getattr(item, "content", None), getattr(item, "reasoning", None), calls
    raise LLMConfigError(
        f"{where}: expected a string or {{content, toolCalls}}, got {type(item).__name__}"
    )


def _call(where: str, call: object) -> tuple[str, str]:
    if isinstance(call, Mapping):
        name, arguments = call.get("name"), call.get("arguments", {})
    else:
        name, arguments = getattr(call, "name", None), getattr(call, "arguments", {})
    if not isinstance(name, str) or not name:
        raise LLMConfigError(f"{where} has no name")
    if isinstance(arguments, str):
        return name, arguments  # raw JSON text, passed on as is (even if it is not valid)
    if isinstance(arguments, Mapping):
        try:
            return name, _encoder.encode(dict(arguments)).decode()
        except (TypeError, msgspec.EncodeError) as exc:
            raise LLMConfigError(f"{where}: arguments are not JSON data: {exc}") from None
    raise LLMConfigError(
        f"{where}: arguments must be an object or JSON text, got {type(arguments).__name__}"
    )
