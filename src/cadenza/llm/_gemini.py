"""Google's Gemini wire format (provider ``google``; Vertex AI's ``vertex`` speaks it too).

The mapping to the neutral types: system messages become ``systemInstruction``;
the assistant is the ``model`` role; a tool call is a ``functionCall`` part (its
arguments' JSON text parsed into ``args``) and a tool result a
``functionResponse`` part in a user turn, naming the tool it answers.
Consecutive messages of one role are merged into one turn, because all the
results of a turn's calls must come back together. A tool's schema goes as
``parametersJsonSchema``, which takes JSON Schema as it is: ``parameters``
takes only an OpenAPI subset and refuses ``additionalProperties``, which a
``resultSchema`` may well have.

Two things of Gemini's have no field in the neutral types, so they ride in the
call's id, which Cadenza hands back unchanged with the call's result:

- Gemini gives a call an ``id`` only sometimes; a call without one gets
  ``gemini-call-<n>`` (its place in the reply), which is never sent back.
- Gemini 3 signs each turn's first call (``thoughtSignature``) and refuses a
  history that drops the signature (HTTP 400), so it is kept after
  ``#ts=`` in the id and put back on the call when the history is sent.

A ``thinking`` level sets ``generationConfig.thinkingConfig``: a budget and
``includeThoughts``, so that the reply's thought summaries (parts marked
``thought``) come back as its reasoning. ``off`` is a budget of 0, except on
the models that cannot stop thinking (2.5 Pro, Gemini 3), which are sent none.
Thoughts are never sent back: the signatures are what Gemini needs of them.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec

from ._errors import LLMResponseError
from ._stream import StreamError, _Assembler
from ._thinking import thinking_budget, thinking_level
from ._types import Completion, DeltaHook, LLMRequest, LLMUsage, Message, ModelToolCall, Reasoning
from ._wire import WireFormat, arguments_object

__all__ = [
    "API_VERSION",
    "WIRE",
    "GeminiStream",
    "decode_gemini",
    "encode_gemini",
    "gemini_body",
]

API_VERSION: Final = "v1beta"
"""The Gemini API version in the URL (function-call ids and JSON schemas are there)."""

_MADE_ID: Final = "gemini-call-"  # an id Cadenza made: never sent to Gemini
_SIGNATURE: Final = "#ts="  # what follows it in an id is the call's thoughtSignature
# Models that think whatever they are told: a budget of 0 is refused (HTTP 400).
_THINKS_ALWAYS: Final = ("gemini-2.5-pro", "gemini-3")

# A negative count would wind the run's token budget back: refused at the edge.
_Tokens = Annotated[int, msgspec.Meta(ge=0)]


class _FunctionCall(msgspec.Struct):
    name: str
    args: dict[str, Any] = {}
    id: str | None = None


class _Part(msgspec.Struct, rename="camel"):
    # One lenient shape for every kind of part, so kinds this code does not
    # know (inline data, executable code) are skipped rather than rejected.
    text: str | None = None
    thought: bool = False
    function_call: _FunctionCall | None = None
    thought_signature: str | None = None


class _Content(msgspec.Struct):
    parts: list[_Part] = []


class _Candidate(msgspec.Struct, rename="camel"):
    content: _Content | None = None
    finish_reason: str | None = None


class _Usage(msgspec.Struct, rename="camel"):
    prompt_token_count: _Tokens = 0
    candidates_token_count: _Tokens = 0
    thoughts_token_count: _Tokens = 0
    tool_use_prompt_token_count: _Tokens = 0
    cached_content_token_count: _Tokens = 0

    def counted(self) -> LLMUsage:
        """Thinking is billed as output and the tool-use prompt as input: both count.
        The cached tokens are part of the prompt's count, as they are of Gemini's."""
        return LLMUsage(
            self.prompt_token_count + self.tool_use_prompt_token_count,
            self.candidates_token_count + self.thoughts_token_count,
            cached_tokens=self.cached_content_token_count,
            reasoning_tokens=self.thoughts_token_count,
        )


class _Feedback(msgspec.Struct, rename="camel"):
    block_reason: str | None = None


class _Error(msgspec.Struct):
    message: str = "error"


class _Response(msgspec.Struct, rename="camel"):
    candidates: list[_Candidate] = []
    usage_metadata: _Usage | None = None
    model_version: str | None = None
    prompt_feedback: _Feedback | None = None
    error: _Error | None = None  # a stream's error event


_decoder = msgspec.json.Decoder(_Response)
_encoder = msgspec.json.Encoder()
_any_decoder = msgspec.json.Decoder()


def encode_gemini(request: LLMRequest, *, stream: bool = False) -> bytes:
    """The ``generateContent`` request body for ``request`` (a stream is asked for by URL)."""
    return _encoder.encode(gemini_body(request))


def gemini_body(request: LLMRequest) -> dict[str, Any]:
    """The ``generateContent`` request for ``request``, as data."""
    body: dict[str, Any] = {"contents": _turns(request.messages)}
    system = [m.content for m in request.messages if m.role == "system" and m.content]
    if system:
        body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
    if request.tools:
        declarations = [
            {"name": t.name, "description": t.description, "parametersJsonSchema": t.parameters}
            for t in request.tools
        ]
        body["tools"] = [{"functionDeclarations": declarations}]
    config: dict[str, Any] = {}
    if request.temperature is not None:
        config["temperature"] = request.temperature
    if request.top_p is not None:
        config["topP"] = request.top_p
    if request.max_tokens is not None:
        config["maxOutputTokens"] = request.max_tokens
    thinking = _thinking_config(request)
    if thinking is not None:
        config["thinkingConfig"] = thinking
    if config:
        body["generationConfig"] = config
    return body


def _thinking_config(request: LLMRequest) -> dict[str, Any] | None:
    """``thinkingConfig`` for ``request``'s level; None for no level, and for ``off`` on a
    model that cannot stop thinking."""
    budget = thinking_budget(request)
    if budget is not None:
        return {"thinkingBudget": budget, "includeThoughts": True}
    if thinking_level(request) != "off":
        return None
    name = request.model.rpartition("/")[2]  # Vertex AI may name it models/...
    return None if name.startswith(_THINKS_ALWAYS) else {"thinkingBudget": 0}


def _turns(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """The conversation as ``contents``: system messages left out, one turn per role change."""
    names: dict[str, str] = {}  # call id -> tool name: a functionResponse names its tool
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "model" if message.role == "assistant" else "user"
        parts = _parts(message, names)
        if not parts:
            continue  # the API rejects a turn without parts
        if turns and turns[-1]["role"] == role:
            turns[-1]["parts"].extend(parts)
        else:
            turns.append({"role": role, "parts": parts})
    return turns


def _parts(message: Message, names: dict[str, str]) -> list[dict[str, Any]]:
    if message.role == "tool":
        call_id = message.tool_call_id or ""
        answer: dict[str, Any] = {
            "name": message.name or names.get(call_id, ""),
            "response": _response(message.content or ""),
        }
        own_id = _sent_id(call_id)
        if own_id:
            answer["id"] = own_id
        return [{"functionResponse": answer}]
    parts: list[dict[str, Any]] = []
    if message.content:
        parts.append({"text": message.content})
    for call in message.tool_calls:
        names[call.id] = call.name
        function: dict[str, Any] = {"name": call.name, "args": arguments_object(call.arguments)}
        own_id = _sent_id(call.id)
        if own_id:
            function["id"] = own_id
        part: dict[str, Any] = {"functionCall": function}
        signature = call.id.partition(_SIGNATURE)[2]
        if signature:
            part["thoughtSignature"] = signature
        parts.append(part)
    return parts


def _sent_id(call_id: str) -> str:
    """The id Gemini gave a call, as it gave it; empty for one Cadenza made."""
    own = call_id.partition(_SIGNATURE)[0]
    return "" if own.startswith(_MADE_ID) else own


def _response(text: str) -> dict[str, Any]:
    """A tool's output as the object ``functionResponse.response`` must be."""
    try:
        value = _any_decoder.decode(text)
    except msgspec.DecodeError:
        return {"output": text}
    return value if isinstance(value, dict) else {"output": value}


def _call(function: _FunctionCall, signature: str | None, index: int) -> ModelToolCall:
    """A ``functionCall`` part as a tool call, its id carrying what must go back."""
    call_id = function.id or f"{_MADE_ID}{index}"
    if signature:
        call_id += _SIGNATURE + signature
    return ModelToolCall(call_id, function.name, _encoder.encode(function.args).decode())


def decode_gemini(data: bytes, *, what: str, model: str, attempts: int) -> Completion:
    """The ``Completion`` in a ``generateContent`` response body.

    The first candidate's text parts are joined into ``content``, its thought
    summaries into the reasoning, and its ``functionCall`` parts become tool calls.

    Raises:
        LLMResponseError: The body is not JSON or not a response, or the
            prompt was blocked (the reason is in the message).
    """
    try:
        response = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise LLMResponseError(f"{what}: malformed response: {exc}", attempts=attempts) from None
    if not response.candidates:
        feedback = response.prompt_feedback
        reason = feedback.block_reason if feedback is not None else None
        raise LLMResponseError(
            f"{what}: the response has no candidates"
            + (f" (the prompt was blocked: {reason})" if reason else ""),
            attempts=attempts,
        )
    candidate = response.candidates[0]
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[ModelToolCall] = []
    for part in candidate.content.parts if candidate.content is not None else ():
        if part.function_call is not None:
            calls.append(_call(part.function_call, part.thought_signature, len(calls)))
        elif part.text is not None:
            (thoughts if part.thought else texts).append(part.text)
    usage = response.usage_metadata or _Usage()
    return Completion(
        content="".join(texts) if texts else None,
        tool_calls=tuple(calls),
        usage=usage.counted(),
        model=response.model_version or model,
        finish_reason=candidate.finish_reason,
        attempts=attempts,
        reasoning=(Reasoning("".join(thoughts)),) if thoughts else (),
    )


class GeminiStream(_Assembler[_Response]):
    """Assembles a ``streamGenerateContent?alt=sse`` stream.

    Each event is a whole ``GenerateContentResponse`` holding the reply's next
    parts: text in pieces, a function call whole. The usage is cumulative (the
    last one counts) and the last event has the ``finishReason``.
    """

    __slots__ = ("_finish", "_list", "_usage")
    _decoder = msgspec.json.Decoder(list[_Response])
    _unit = "chunk"

    def __init__(
        self, on_delta: DeltaHook, attempt: int, on_reasoning: DeltaHook | None = None
    ) -> None:
        super().__init__(on_delta, attempt, on_reasoning)
        self._finish: str | None = None
        self._usage = _Usage()
        self._list: list[ModelToolCall] = []

    def _take(self, chunk: _Response) -> None:
        if chunk.error is not None:
            raise StreamError(chunk.error.message)
        self._model = chunk.model_version or self._model
        if chunk.usage_metadata is not None:
            self._usage = chunk.usage_metadata
        for candidate in chunk.candidates[:1]:
            self._finish = candidate.finish_reason or self._finish
            for part in candidate.content.parts if candidate.content is not None else ():
                if part.function_call is not None:
                    call = _call(part.function_call, part.thought_signature, len(self._list))
                    self._list.append(call)
                elif part.text and part.thought:
                    self._think(part.text)
                elif part.text:
                    self._text.append(part.text)

    def completion(self, *, what: str, model: str, attempts: int) -> Completion:
        usage = self._usage.counted()
        reply = self._reply(self._finish is not None, tuple(self._list), usage, self._finish)
        return reply(what, model, attempts)


def _api_key(api_key: str) -> dict[str, str]:
    # In a header, not ``?key=``: a URL ends up in logs and error messages.
    return {"x-goog-api-key": api_key}


WIRE = WireFormat(
    name="gemini",
    path=f"/{API_VERSION}/models/{{model}}:generateContent",
    encode=encode_gemini,
    decode=decode_gemini,
    auth_headers=_api_key,
    stream=GeminiStream,
    stream_path=f"/{API_VERSION}/models/{{model}}:streamGenerateContent?alt=sse",
)
"""The Gemini API: ``POST {base}/v1beta/models/{model}:generateContent``."""
