"""Streamed replies: server-sent events in, one ``Completion`` out.

A streamed reply arrives as server-sent events (``data: {...}`` lines, a blank
line after each event), or from AWS as an event stream (binary messages, each
with its length, headers and checksums). A framer chosen by the reply's content
type (`framer_for`: `SSEParser`, `AWSEventStreamParser`) splits the bytes into
event payloads; an assembler per API family reads each payload, hands every fragment of text to
the caller's ``on_delta`` as it arrives (and of reasoning to ``on_reasoning``),
and pieces the text, the reasoning, the tool calls (whose arguments come in
fragments too) and the usage together into the same ``Completion`` the
unstreamed reply would have given.

A payload that does not have the family's shape is `LLMResponseError`, as a
malformed whole reply is; an ``error`` event the server sends mid-stream (an
overloaded server, say) is `StreamError`, which the caller retries as it
retries an HTTP 529.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Annotated, Final, Generic, Protocol, TypeVar

import msgspec

from ._errors import LLMResponseError
from ._types import Completion, DeltaHook, LLMUsage, ModelToolCall, Reasoning

__all__ = [
    "AWSEventStreamParser",
    "AnthropicStream",
    "Framer",
    "OpenAIStream",
    "SSEParser",
    "StreamAssembler",
    "StreamError",
    "StreamFactory",
    "framer_for",
]


class StreamError(Exception):
    """The server reported an error inside a stream it had begun (retried)."""


class StreamAssembler(Protocol):
    """Reads one streamed reply's event payloads and builds its ``Completion``."""

    def feed(self, payloads: list[bytes]) -> None:
        """The ``data`` of the events one read brought; their text goes to ``on_delta``,
        their reasoning to ``on_reasoning``.

        The text of one read goes out as one fragment (its reasoning first): the
        events of a read arrived together, and a call per event would only cost.

        Raises:
            LLMResponseError: The payload does not have the expected shape.
            StreamError: The payload is the server's error event.
        """
        ...

    def completion(self, *, what: str, model: str, attempts: int) -> Completion:
        """The assembled reply.

        Raises:
            LLMResponseError: The stream ended before the reply did.
        """
        ...


class SSEParser:
    """Splits a server-sent-event byte stream into the ``data`` of each event.

    Lines other than ``data:`` (``event:``, ``id:``, comments) are skipped: every
    payload a provider sends names its own type. Several ``data`` lines of one
    event are joined with newlines, as the standard says. ``[DONE]`` (OpenAI's
    end marker) is not a payload.
    """

    __slots__ = ("_data", "_rest")

    def __init__(self) -> None:
        self._rest = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """The payloads of the events ``chunk`` completes."""
        lines = (self._rest + chunk).split(b"\n")
        self._rest = lines.pop()
        return self._lines(lines)

    def close(self) -> list[bytes]:
        """The payload of an event the stream ended in without its blank line."""
        rest, self._rest = self._rest, b""
        return self._lines([rest, b""])

    def _lines(self, lines: list[bytes]) -> list[bytes]:
        payloads: list[bytes] = []
        data = self._data
        for line in lines:  # the hot loop of a stream: two lines an event
            if line.startswith(b"data:"):
                line = line.rstrip(b"\r")
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif data and (not line or line == b"\r"):
                payload = data[0] if len(data) == 1 else b"\n".join(data)
                data.clear()
                if payload != b"[DONE]":
                    payloads.append(payload)
        return payloads


class Framer(Protocol):
    """Splits a streamed reply's bytes into its events' payloads (`SSEParser` is one)."""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The payloads of the events ``chunk`` completes."""
        ...

    def close(self) -> list[bytes]:
        """The payloads still held when the stream ended."""
        ...


# An AWS event's type names a member of the service's event union: a plain identifier.
_EVENT_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


class AWSEventStreamParser:
    """Splits an AWS event stream (``application/vnd.amazon.eventstream``) into payloads.

    The binary framing (lengths, headers, CRCs) is decoded by botocore's
    ``EventStreamBuffer``, not by hand. Each event becomes the JSON
    ``{"<its :event-type>": <its payload>}``: the shape in which the service
    documents its event union (Bedrock's ``contentBlockDelta``, ``messageStop``...),
    so an assembler decodes the events like any other family's JSON. An
    exception message (a throttled or failed model mid-reply) is `StreamError`.

    Raises:
        ImportError: botocore is not installed (the ``bedrock`` extra).
    """

    __slots__ = ("_buffer", "_parser_error")

    def __init__(self) -> None:
        from botocore.eventstream import EventStreamBuffer, ParserError

        self._buffer = EventStreamBuffer()
        self._parser_error = ParserError

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer.add_data(chunk)
        try:
            # The stubs type ``headers`` wrongly; the response dict has them as a dict.
            messages = [message.to_response_dict() for message in self._buffer]
        except self._parser_error as exc:
            raise LLMResponseError(f"malformed event-stream message: {exc}") from None
        return [self._payload(message["headers"], message["body"]) for message in messages]

    def close(self) -> list[bytes]:
        # A message cut off mid-way is no event; the assembler then finds its
        # reply unfinished and says so.
        return []

    @staticmethod
    def _payload(headers: dict[str, object], payload: bytes) -> bytes:
        kind = headers.get(":message-type")
        if kind == "exception":
            said = None
            with contextlib.suppress(msgspec.DecodeError):
                problem = _any.decode(payload or b"{}")
                said = problem.get("message") if isinstance(problem, dict) else None
            raise StreamError(f"{headers.get(':exception-type')}: {said or 'no message'}")
        if kind == "error":
            raise StreamError(f"{headers.get(':error-code')}: {headers.get(':error-message')}")
        event = headers.get(":event-type")
        if not isinstance(event, str) or not _EVENT_TYPE.match(event):
            raise LLMResponseError(f"event-stream message without a valid :event-type: {event!r}")
        return b'{"' + event.encode() + b'":' + (payload or b"{}") + b"}"


_FRAMERS: Final[dict[str, Callable[[], Framer]]] = {
    "text/event-stream": SSEParser,
    "application/vnd.amazon.eventstream": AWSEventStreamParser,
}


def framer_for(content_type: str) -> Callable[[], Framer] | None:
    """The framer of a streamed reply with ``content_type``; None for a whole body."""
    return _FRAMERS.get(content_type.partition(";")[0].strip().lower())


_Item = TypeVar("_Item")

# A negative count would wind the run's token budget back: refused at the edge.
_Tokens = Annotated[int, msgspec.Meta(ge=0)]


class _OpenAIFunction(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _OpenAIToolDelta(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: _OpenAIFunction | None = None


class _OpenAIDelta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_OpenAIToolDelta] | None = None
    # OpenAI's own Chat Completions return no reasoning; compatible servers do, under
    # either name: DeepSeek and vLLM ``reasoning_content``, OpenRouter, Groq and Ollama
    # ``reasoning``.
    reasoning_content: str | None = None
    reasoning: str | None = None


class _OpenAIChoice(msgspec.Struct):
    delta: _OpenAIDelta | None = None
    finish_reason: str | None = None


class _OpenAIPromptDetails(msgspec.Struct):
    cached_tokens: _Tokens | None = None


class _OpenAICompletionDetails(msgspec.Struct):
    reasoning_tokens: _Tokens | None = None


class _OpenAIUsage(msgspec.Struct):
    """Chat Completions' ``usage``, in a whole response and in a stream's last chunk."""

    prompt_tokens: _Tokens = 0
    completion_tokens: _Tokens = 0
    prompt_tokens_details: _OpenAIPromptDetails | None = None
    completion_tokens_details: _OpenAICompletionDetails | None = None

    def counted(self) -> LLMUsage:
        """The counts, cached prompt tokens and reasoning tokens among them where given."""
        cached = self.prompt_tokens_details
        reasoning = self.completion_tokens_details
        return LLMUsage(
            self.prompt_tokens,
            self.completion_tokens,
            cached_tokens=(cached.cached_tokens or 0) if cached is not None else 0,
            reasoning_tokens=(reasoning.reasoning_tokens or 0) if reasoning is not None else 0,
        )


class _OpenAIError(msgspec.Struct):
    message: str = "error"


class _OpenAIChunk(msgspec.Struct):
    choices: list[_OpenAIChoice] = []
    model: str | None = None
    usage: _OpenAIUsage | None = None
    error: _OpenAIError | None = None


class _Call:
    """A tool call whose arguments are still arriving."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self, id: str, name: str) -> None:
        self.id = id
        self.name = name
        self.arguments: list[str] = []

    def done(self) -> ModelToolCall:
        return ModelToolCall(self.id, self.name, "".join(self.arguments))

    def done_compact(self) -> ModelToolCall:
        """The call with its arguments re-encoded, as the unstreamed reply gives them.

        Anthropic streams the JSON text of ``input`` in fragments of its own
        spacing; a whole reply has ``input`` as an object, which is encoded
        compactly. Text that is not JSON stays as it came: the tool loop
        reports it to the model.
        """
        text = "".join(self.arguments) or "{}"
        with contextlib.suppress(msgspec.DecodeError):
            text = _compact.encode(_any.decode(text)).decode()
        return ModelToolCall(self.id, self.name, text)


class _Thought:
    """A block of reasoning whose text (and signature) is still arriving."""

    __slots__ = ("parts", "redacted", "signature")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.signature: str | None = None
        self.redacted: str | None = None

    def done(self) -> Reasoning:
        return Reasoning("".join(self.parts), self.signature, self.redacted)


_any = msgspec.json.Decoder()
_compact = msgspec.json.Encoder()


class _Assembler(Generic[_Item]):
    """What every family's assembler does: decode a read's events, hand out its text.

    Args:
        on_delta: Receives the text of each read with ``attempt``.
        attempt: The HTTP attempt this stream answers.
        on_reasoning: Receives the reasoning of each read, when given.
    """

    __slots__ = (
        "_attempt",
        "_calls",
        "_heard",
        "_model",
        "_on_delta",
        "_on_reasoning",
        "_text",
        "_thoughts",
    )
    _decoder: msgspec.json.Decoder[list[_Item]]
    _unit: str  # what one event is called in errors

    def __init__(
        self, on_delta: DeltaHook, attempt: int, on_reasoning: DeltaHook | None = None
    ) -> None:
        self._on_delta = on_delta
        self._on_reasoning = on_reasoning
        self._attempt = attempt
        self._text: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._thoughts: dict[int, _Thought] = {}  # by block index (0 where no blocks)
        self._heard: list[str] = []  # this read's reasoning, for on_reasoning
        self._model: str | None = None

    def feed(self, payloads: list[bytes]) -> None:
        if not payloads:
            return
        try:  # one decode for the read: the events as one JSON array
            items = self._decoder.decode(b"[" + b",".join(payloads) + b"]")
        except msgspec.DecodeError as exc:
            raise LLMResponseError(f"malformed stream {self._unit}: {exc}") from None
        start = len(self._text)
        for item in items:
            self._take(item)
        if self._heard:
            if self._on_reasoning is not None:
                self._on_reasoning("".join(self._heard), self._attempt)
            self._heard.clear()
        if len(self._text) > start:
            self._on_delta("".join(self._text[start:]), self._attempt)

    def _take(self, item: _Item) -> None:
        raise NotImplementedError

    def _thought(self, index: int) -> _Thought:
        """The reasoning block at ``index``, opened if it is new."""
        thought = self._thoughts.get(index)
        if thought is None:
            thought = self._thoughts[index] = _Thought()
        return thought

    def _think(self, text: str, index: int = 0) -> None:
        """Reasoning text for the block at ``index``."""
        self._thought(index).parts.append(text)
        self._heard.append(text)

    def _reply(
        self, ended: bool, calls: tuple[ModelToolCall, ...], usage: LLMUsage, finish: str | None
    ) -> Callable[[str, str, int], Completion]:
        """What `completion` gives once the family has said whether its stream ended."""

        def complete(what: str, model: str, attempts: int) -> Completion:
            if not ended:
                raise LLMResponseError(
                    f"{what}: the stream ended before the reply did", attempts=attempts
                )
            text = "".join(self._text) if self._text else None
            thoughts = self._thoughts
            reasoning = tuple(thoughts[index].done() for index in sorted(thoughts))
            return Completion(
                text, calls, usage, self._model or model, finish, attempts, reasoning=reasoning
            )

        return complete


class OpenAIStream(_Assembler[_OpenAIChunk]):
    """Assembles a Chat Completions stream (``openai``; ``ollama``'s compatible API)."""

    __slots__ = ("_finish", "_usage")
    _decoder = msgspec.json.Decoder(list[_OpenAIChunk])
    _unit = "chunk"

    def __init__(
        self, on_delta: DeltaHook, attempt: int, on_reasoning: DeltaHook | None = None
    ) -> None:
        super().__init__(on_delta, attempt, on_reasoning)
        self._finish: str | None = None
        self._usage: _OpenAIUsage | None = None

    def _take(self, chunk: _OpenAIChunk) -> None:
        if chunk.error is not None:
            raise StreamError(chunk.error.message)
        self._model = chunk.model or self._model
        if chunk.usage is not None:
            self._usage = chunk.usage
        for choice in chunk.choices[:1]:
            self._finish = choice.finish_reason or self._finish
            delta = choice.delta
            if delta is None:
                continue
            thought = delta.reasoning_content or delta.reasoning
            if thought:
                self._think(thought)
            if delta.content:
                self._text.append(delta.content)
            for part in delta.tool_calls or ():
                self._call_part(part)

    def _call_part(self, part: _OpenAIToolDelta) -> None:
        call = self._calls.get(part.index)
        function = part.function or _OpenAIFunction()
        if call is None:
            call = self._calls[part.index] = _Call(part.id or "", function.name or "")
        elif function.name and not call.name:
            call.name = function.name
        if function.arguments:
            call.arguments.append(function.arguments)

    def completion(self, *, what: str, model: str, attempts: int) -> Completion:
        usage = (self._usage or _OpenAIUsage()).counted()
        calls = tuple(self._calls[index].done() for index in sorted(self._calls))
        reply = self._reply(self._finish is not None, calls, usage, self._finish)
        return reply(what, model, attempts)


class _AnthropicBlock(msgspec.Struct):
    type: str
    id: str | None = None
    name: str | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None  # a redacted_thinking block's


class _AnthropicDelta(msgspec.Struct):
    type: str | None = None
    text: str | None = None
    partial_json: str | None = None
    thinking: str | None = None
    signature: str | None = None
    stop_reason: str | None = None


class _AnthropicUsage(msgspec.Struct):
    """The Messages API's ``usage``, in a whole response and in a stream's events."""

    input_tokens: _Tokens | None = None
    output_tokens: _Tokens | None = None
    cache_creation_input_tokens: _Tokens | None = None
    cache_read_input_tokens: _Tokens | None = None

    @property
    def prompt(self) -> int:
        """The prompt's tokens: cache reads and writes count as prompt tokens."""
        return (
            (self.input_tokens or 0)
            + (self.cache_creation_input_tokens or 0)
            + (self.cache_read_input_tokens or 0)
        )

    def counted(self) -> LLMUsage:
        """The counts; the cache's reads are the prompt's cached tokens (thinking is
        billed as output, and Anthropic does not count it apart)."""
        return LLMUsage(
            self.prompt, self.output_tokens or 0, cached_tokens=self.cache_read_input_tokens or 0
        )


class _AnthropicMessage(msgspec.Struct):
    model: str | None = None
    usage: _AnthropicUsage | None = None


class _AnthropicError(msgspec.Struct):
    message: str = "error"


class _AnthropicEvent(msgspec.Struct):
    type: str
    index: int = 0
    message: _AnthropicMessage | None = None
    content_block: _AnthropicBlock | None = None
    delta: _AnthropicDelta | None = None
    usage: _AnthropicUsage | None = None
    error: _AnthropicError | None = None


class AnthropicStream(_Assembler[_AnthropicEvent]):
    """Assembles a Messages API stream (``message_start`` ... ``message_stop``)."""

    __slots__ = ("_cached", "_completion", "_done", "_prompt", "_stop")
    _decoder = msgspec.json.Decoder(list[_AnthropicEvent])
    _unit = "event"

    def __init__(
        self, on_delta: DeltaHook, attempt: int, on_reasoning: DeltaHook | None = None
    ) -> None:
        super().__init__(on_delta, attempt, on_reasoning)
        self._stop: str | None = None
        self._prompt = 0
        self._cached = 0
        self._completion = 0
        self._done = False

    def _take(self, event: _AnthropicEvent) -> None:
        kind = event.type
        if kind == "content_block_delta" and event.delta is not None:
            self._delta(event.index, event.delta)
        elif kind == "content_block_start" and event.content_block is not None:
            block = event.content_block
            if block.type == "tool_use":
                self._calls[event.index] = _Call(block.id or "", block.name or "")
            elif block.type == "thinking":
                self._thought(event.index).signature = block.signature or None
                if block.thinking:
                    self._think(block.thinking, event.index)
            elif block.type == "redacted_thinking":
                self._thought(event.index).redacted = block.data
        else:
            self._message(event)

    def _message(self, event: _AnthropicEvent) -> None:
        """An event about the whole message: its start, its end, its usage, an error."""
        kind = event.type
        if kind == "message_start" and event.message is not None:
            self._model = event.message.model
            self._count(event.message.usage)
        elif kind == "message_delta":
            if event.delta is not None and event.delta.stop_reason:
                self._stop = event.delta.stop_reason
            self._count(event.usage)
        elif kind == "message_stop":
            self._done = True
        elif kind == "error":
            raise StreamError(event.error.message if event.error else "error event")

    def _delta(self, index: int, delta: _AnthropicDelta) -> None:
        if delta.text:
            self._text.append(delta.text)
        elif delta.partial_json is not None and index in self._calls:
            self._calls[index].arguments.append(delta.partial_json)
        elif delta.thinking:
            self._think(delta.thinking, index)
        elif delta.signature:
            self._thought(index).signature = delta.signature

    def _count(self, usage: _AnthropicUsage | None) -> None:
        # message_start carries the prompt's count, message_delta the reply's, cumulative.
        if usage is None:
            return
        self._prompt = max(self._prompt, usage.prompt)
        self._cached = max(self._cached, usage.cache_read_input_tokens or 0)
        self._completion = max(self._completion, usage.output_tokens or 0)

    def completion(self, *, what: str, model: str, attempts: int) -> Completion:
        calls = tuple(self._calls[index].done_compact() for index in sorted(self._calls))
        usage = LLMUsage(self._prompt, self._completion, cached_tokens=self._cached)
        return self._reply(self._done, calls, usage, self._stop)(what, model, attempts)


StreamFactory = Callable[[DeltaHook, int, DeltaHook | None], StreamAssembler]
"""Builds the assembler of one attempt's stream: ``factory(on_delta, attempt, on_reasoning)``."""
