"""The OpenAI Chat Completions wire format (providers ``openai`` and ``ollama``).

Requests are plain dicts encoded by msgspec; responses decode into typed
Structs, so a malformed answer fails at the edge with msgspec's precise
description of what and where (``Expected `str`, got `int` - at
`$.choices[0].message.content```).

A ``thinking`` level goes as ``reasoning_effort`` (``off`` sends none). OpenAI
returns no reasoning text on this API; compatible servers do, as
``reasoning_content`` or ``reasoning`` beside ``content``: it is the reply's
reasoning, never its text, and is not sent back (DeepSeek refuses a history
that holds it).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._errors import LLMResponseError
from ._stream import OpenAIStream, _OpenAIUsage
from ._thinking import thinking_budget, thinking_level
from ._types import Completion, LLMRequest, Message, ModelToolCall, Reasoning
from ._wire import WireFormat, sampling

__all__ = ["WIRE", "decode_openai", "encode_openai"]


class _Function(msgspec.Struct):
    name: str
    # Some compatible servers send the arguments as an object, not JSON text.
    arguments: str | dict[str, Any] = ""


class _ToolCall(msgspec.Struct):
    id: str
    function: _Function
    type: str = "function"


class _Message(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None
    reasoning_content: str | None = None  # DeepSeek, vLLM
    reasoning: str | None = None  # OpenRouter, Groq, Ollama


class _Choice(msgspec.Struct):
    message: _Message
    finish_reason: str | None = None


class _Response(msgspec.Struct):
    choices: list[_Choice]
    model: str | None = None
    usage: _OpenAIUsage | None = None


_decoder = msgspec.json.Decoder(_Response)
_encoder = msgspec.json.Encoder()


def encode_openai(request: LLMRequest, *, stream: bool = False) -> bytes:
    """The Chat Completions request body for ``request``.

    A streamed request asks for the usage in the stream's last chunk
    (``stream_options.include_usage``): the run's token budget needs it.
    """
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [_wire_message(m) for m in request.messages],
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in request.tools
        ]
    body.update(sampling(request))
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if thinking_budget(request) is not None:
        body["reasoning_effort"] = thinking_level(request)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return _encoder.encode(body)


def _wire_message(message: Message) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        wire["name"] = message.name
    return wire


def decode_openai(data: bytes, *, what: str, model: str, attempts: int) -> Completion:
    """The ``Completion`` in a Chat Completions response body.

    Args:
        data: The response body.
        what: Names the call in error messages.
        model: The requested model, used when the response does not name one.
        attempts: Attempts the call took, recorded in the completion.

    Raises:
        LLMResponseError: The body is not JSON, does not have the expected
            shape, or has no choices.
    """
    try:
        response = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise LLMResponseError(
            f"{what}: malformed chat completion: {exc}", attempts=attempts
        ) from None
    if not response.choices:
        raise LLMResponseError(f"{what}: the response has no choices", attempts=attempts)
    choice = response.choices[0]
    calls = tuple(
        ModelToolCall(
            id=call.id,
            name=call.function.name,
            arguments=(
                call.function.arguments
                if isinstance(call.function.arguments, str)
                else _encoder.encode(call.function.arguments).decode()
            ),
        )
        for call in choice.message.tool_calls or ()
    )
    thought = choice.message.reasoning_content or choice.message.reasoning
    return Completion(
        content=choice.message.content,
        tool_calls=calls,
        usage=(response.usage or _OpenAIUsage()).counted(),
        model=response.model or model,
        finish_reason=choice.finish_reason,
        attempts=attempts,
        reasoning=(Reasoning(thought),) if thought else (),
    )


def _bearer(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


WIRE = WireFormat(
    name="openai",
    path="/chat/completions",
    encode=encode_openai,
    decode=decode_openai,
    auth_headers=_bearer,
    stream=OpenAIStream,
)
"""Chat Completions: ``POST {base}/chat/completions``."""
