"""The Anthropic Messages wire format (provider ``anthropic``).

The mapping to the neutral types: system messages become the top-level
``system`` text; an assistant's tool calls become ``tool_use`` blocks (the
arguments' JSON text parsed into ``input``); ``tool`` messages become
``tool_result`` blocks in a user turn. Consecutive messages of one role are
merged into one turn, because the API wants user and assistant turns to
alternate and all results of one assistant turn in the next user turn.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ._errors import LLMResponseError
from ._stream import AnthropicStream, _AnthropicUsage
from ._types import Completion, LLMRequest, LLMUsage, Message, ModelToolCall
from ._wire import WireFormat, sampling

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "WIRE",
    "anthropic_body",
    "decode_anthropic",
    "encode_anthropic",
]

ANTHROPIC_VERSION: Final = "2023-06-01"
DEFAULT_MAX_TOKENS: Final = 4096
"""``max_tokens`` when the request sets none (the Messages API requires one)."""


class _Block(msgspec.Struct):
    # One lenient shape for every block type, so block types this code does
    # not know (thinking, say) are skipped rather than rejected.
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None


class _Response(msgspec.Struct):
    content: list[_Block]
    model: str | None = None
    stop_reason: str | None = None
    usage: _AnthropicUsage | None = None


_decoder = msgspec.json.Decoder(_Response)
_encoder = msgspec.json.Encoder()
_arguments_decoder = msgspec.json.Decoder(dict[str, Any])


def encode_anthropic(request: LLMRequest, *, stream: bool = False) -> bytes:
    """The Messages API request body for ``request``."""
    return _encoder.encode(anthropic_body(request, stream=stream))


def anthropic_body(request: LLMRequest, *, stream: bool = False) -> dict[str, Any]:
    """The Messages API request for ``request``, as data (Vertex AI sends it amended)."""
    system = [m.content for m in request.messages if m.role == "system" and m.content]
    turns: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue  # the API rejects empty turns and empty text blocks
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
        "messages": turns,
    }
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


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.content or "",
            }
        ]
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call.arguments)}
        for call in message.tool_calls
    )
    return blocks


def _input(arguments: str) -> dict[str, Any]:
    # ``input`` must be an object. Arguments that are not one were already
    # reported back to the model by the loop; sending {} keeps the history valid.
    try:
        return _arguments_decoder.decode(arguments)
    except msgspec.DecodeError:
        return {}


def decode_anthropic(data: bytes, *, what: str, model: str, attempts: int) -> Completion:
    """The ``Completion`` in a Messages API response body.

    Text blocks are joined into ``content``; ``tool_use`` blocks become tool
    calls with their ``input`` encoded as JSON text; other blocks are skipped.
    Cache reads and writes count as prompt tokens.

    Raises:
        LLMResponseError: The body is not JSON, has no ``content`` list, or a
            block misses a field its type needs.
    """
    try:
        response = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise LLMResponseError(f"{what}: malformed message: {exc}", attempts=attempts) from None
    texts, calls = _blocks_of(response, what, attempts)
    usage = response.usage or _AnthropicUsage()
    return Completion(
        content="".join(texts) if texts else None,
        tool_calls=tuple(calls),
        usage=LLMUsage(usage.prompt, usage.output_tokens or 0),
        model=response.model or model,
        finish_reason=response.stop_reason,
        attempts=attempts,
    )


def _blocks_of(
    response: _Response, what: str, attempts: int
) -> tuple[list[str], list[ModelToolCall]]:
    """The texts and tool calls of a response's ``content`` blocks, in order."""
    texts: list[str] = []
    calls: list[ModelToolCall] = []
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
    return texts, calls


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
