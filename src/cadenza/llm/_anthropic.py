"""The Anthropic Messages wire format (provider ``anthropic``).

The mapping to the neutral types: system messages become the top-level
``system`` text; an assistant's tool calls become ``tool_use`` blocks (the
arguments' JSON text parsed into ``input``); ``tool`` messages become
``tool_result`` blocks in a user turn. Consecutive messages of one role are
merged into one turn, because the API wants user and assistant turns to
alternate and all results of one assistant turn in the next user turn.

A ``thinking`` level turns extended thinking on (``thinking: {type: enabled,
budget_tokens}``), with ``max_tokens`` raised by the budget so the answer keeps
the room it had. The reply's ``thinking`` and ``redacted_thinking`` blocks are
its reasoning; they go back, signed as they came, at the head of the
assistant's turn, because a tool loop with thinking on is refused without them.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Final

import msgspec

from ._errors import LLMResponseError
from ._stream import AnthropicStream, _AnthropicUsage
from ._thinking import ANSWER_TOKENS, thinking_budget, with_budget
from ._types import Completion, LLMRequest, Message, ModelToolCall, Reasoning
from ._wire import WireFormat, alternating_turns, arguments_object, sampling

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "WIRE",
    "anthropic_body",
    "decode_anthropic",
    "encode_anthropic",
]

ANTHROPIC_VERSION: Final = "2023-06-01"
DEFAULT_MAX_TOKENS: Final = ANSWER_TOKENS
"""``max_tokens`` when the request sets none (the Messages API requires one)."""


class _Block(msgspec.Struct):
    # One lenient shape for every block type, so block types this code does
    # not know (server tool results, say) are skipped rather than rejected.
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None  # a redacted_thinking block's


class _Response(msgspec.Struct):
    content: list[_Block]
    model: str | None = None
    stop_reason: str | None = None
    usage: _AnthropicUsage | None = None


_decoder = msgspec.json.Decoder(_Response)
_encoder = msgspec.json.Encoder()


def encode_anthropic(request: LLMRequest, *, stream: bool = False) -> bytes:
    """The Messages API request body for ``request``."""
    return _encoder.encode(anthropic_body(request, stream=stream))


def anthropic_body(request: LLMRequest, *, stream: bool = False) -> dict[str, Any]:
    """The Messages API request for ``request``, as data (Vertex AI sends it amended)."""
    system = [m.content for m in request.messages if m.role == "system" and m.content]
    budget = thinking_budget(request)
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
        "messages": alternating_turns(
            request.messages, partial(_blocks, thinking=budget is not None)
        ),
    }
    if budget is not None:
        body["max_tokens"] = with_budget(request.max_tokens, budget)
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if system:
        body["system"] = "\n\n".join(system)
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
    body.update(sampling(request))
    if stream:
        body["stream"] = True
    return body


def _blocks(message: Message, *, thinking: bool) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.content or "",
            }
        ]
    blocks = _thinking_blocks(message) if thinking else []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": arguments_object(call.arguments),
        }
        for call in message.tool_calls
    )
    return blocks


def _thinking_blocks(message: Message) -> list[dict[str, Any]]:
    """An assistant turn's reasoning as the blocks it came in; a block without a
    signature (another provider's reasoning) cannot be sent, and is not."""
    blocks: list[dict[str, Any]] = []
    for block in message.reasoning or ():
        if block.redacted is not None:
            blocks.append({"type": "redacted_thinking", "data": block.redacted})
        elif block.signature:
            signed = {"thinking": block.text, "signature": block.signature}
            blocks.append({"type": "thinking", **signed})
    return blocks


def decode_anthropic(data: bytes, *, what: str, model: str, attempts: int) -> Completion:
    """The ``Completion`` in a Messages API response body.

    Text blocks are joined into ``content``; ``tool_use`` blocks become tool
    calls with their ``input`` encoded as JSON text; ``thinking`` and
    ``redacted_thinking`` blocks are the reasoning; other blocks are skipped.
    Cache reads and writes count as prompt tokens.

    Raises:
        LLMResponseError: The body is not JSON, has no ``content`` list, or a
            block misses a field its type needs.
    """
    try:
        response = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise LLMResponseError(f"{what}: malformed message: {exc}", attempts=attempts) from None
    texts, calls, reasoning = _blocks_of(response, what, attempts)
    return Completion(
        content="".join(texts) if texts else None,
        tool_calls=tuple(calls),
        usage=(response.usage or _AnthropicUsage()).counted(),
        model=response.model or model,
        finish_reason=response.stop_reason,
        attempts=attempts,
        reasoning=tuple(reasoning),
    )


def _blocks_of(
    response: _Response, what: str, attempts: int
) -> tuple[list[str], list[ModelToolCall], list[Reasoning]]:
    """The texts, tool calls and reasoning of a response's ``content`` blocks, in order."""
    texts: list[str] = []
    calls: list[ModelToolCall] = []
    reasoning: list[Reasoning] = []
    for index, block in enumerate(response.content):
        if block.type == "text":
            if block.text is None:
                raise LLMResponseError(
                    f"{what}: content[{index}] is a text block without text", attempts=attempts
                )
            texts.append(block.text)
        elif block.type == "tool_use":
            if block.id is None or block.name is None or block.input is None:
                raise LLMResponseError(
                    f"{what}: content[{index}] is a tool_use block without id, name or input",
                    attempts=attempts,
                )
            calls.append(ModelToolCall(block.id, block.name, _encoder.encode(block.input).decode()))
        elif block.type == "thinking":
            reasoning.append(Reasoning(block.thinking or "", block.signature or None))
        elif block.type == "redacted_thinking" and block.data is not None:
            reasoning.append(Reasoning(redacted=block.data))
    return texts, calls, reasoning


def _api_key(api_key: str) -> dict[str, str]:
    return {"x-api-key": api_key}


WIRE = WireFormat(
    name="anthropic",
    path="/v1/messages",
    encode=encode_anthropic,
    decode=decode_anthropic,
    auth_headers=_api_key,
    extra_headers=(("anthropic-version", ANTHROPIC_VERSION),),
    stream=AnthropicStream,
)
"""The Messages API: ``POST {base}/v1/messages``."""
