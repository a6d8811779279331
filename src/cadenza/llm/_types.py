"""The provider-neutral conversation types and the ``LLMClient`` interface.

Every provider maps these to and from its own wire format, so the tool-calling
loop above is written once. All types are frozen msgspec Structs: cheap to
build, safe to share between turns, and encodable into events as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol, TypedDict, Unpack

import msgspec
from msgspec import UNSET, UnsetType

__all__ = [
    "THINKING_LEVELS",
    "CallHooks",
    "Completion",
    "DeltaHook",
    "LLMClient",
    "LLMRequest",
    "LLMUsage",
    "Message",
    "ModelToolCall",
    "Reasoning",
    "RetryHook",
    "Role",
    "Thinking",
    "ToolSpec",
]

Role = Literal["system", "user", "assistant", "tool"]

Thinking = Literal["off", "low", "medium", "high"]
"""How much a model reasons before it answers; each wire maps it (docs/providers.md)."""

THINKING_LEVELS: tuple[Thinking, ...] = ("off", "low", "medium", "high")

RetryHook = Callable[[int, str], object]
"""``on_retry(attempt, reason)``: called before each retry's backoff sleep.

``attempt`` is the 1-based number of the attempt that just failed and
``reason`` says why, e.g. ``"HTTP 429"`` or ``"connection error: ReadError"``.
An exception it raises ends the call.
"""


DeltaHook = Callable[[str, int], object]
"""``on_delta(text, attempt)``: a fragment of a streamed reply's text as it arrives.

``attempt`` is the HTTP attempt it belongs to: when a stream breaks and the
call is retried, the new attempt's text starts again from its beginning.
"""


class CallHooks(TypedDict, total=False):
    """What a caller of `LLMClient.complete` may hear about the call as it goes.

    Attributes:
        on_retry: Called before each retry, e.g. to emit an event.
        on_delta: When given, the reply is streamed where the provider can, and
            each fragment of its text goes here as it arrives; the return value
            is the same whole reply either way.
        on_reasoning: Each fragment of the reply's reasoning as it arrives, kept
            apart from its text (where the provider returns reasoning).
    """

    on_retry: RetryHook | None
    on_delta: DeltaHook | None
    on_reasoning: DeltaHook | None


class ModelToolCall(msgspec.Struct, frozen=True):
    """A tool call the model asked for.

    Attributes:
        id: The provider's id for the call; a ``tool`` message answers it by id.
        name: The tool's name.
        arguments: The arguments as the raw JSON text the model sent. It is not
            parsed here, so the loop can report bad JSON back to the model.
    """

    id: str
    name: str
    arguments: str


class Reasoning(msgspec.Struct, frozen=True, omit_defaults=True):
    """A block of a model's reasoning: its text, and what its wire needs to take it back.

    Attributes:
        text: The reasoning (or its summary) as the provider returned it.
        signature: Anthropic's and Bedrock's proof that the block is the model's
            own: a thinking block sent back in a tool loop must carry it.
        redacted: The encrypted content of a block the provider would not show
            (Anthropic's ``redacted_thinking``), sent back as it came.
    """

    text: str = ""
    signature: str | None = None
    redacted: str | None = None


class Message(msgspec.Struct, frozen=True):
    """One message of a conversation.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: The text; None for an assistant turn that only calls tools.
        tool_calls: The calls an assistant message made.
        tool_call_id: For a ``tool`` message, the id of the call it answers.
        name: An optional participant or tool name (OpenAI's ``name``).
        reasoning: An assistant turn's reasoning blocks, for the wires that must
            see them again (Anthropic, Bedrock); the others never send them.
    """

    role: Role
    content: str | None = None
    tool_calls: tuple[ModelToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    # UNSET, not (): a message without reasoning encodes as it did before reasoning
    # existed, so the digests of recorded model calls still match (resume, replay).
    reasoning: tuple[Reasoning, ...] | UnsetType = UNSET


class ToolSpec(msgspec.Struct, frozen=True):
    """A tool offered to the model: its name, what it does, and a JSON Schema for its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


class LLMUsage(msgspec.Struct, frozen=True):
    """Tokens one completion used, as the provider reported them (estimated for ``scripted``)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    """Of ``prompt_tokens``, those the provider read from its prompt cache (priced as
    ``cachedInput``; 0 when the wire does not say)."""
    reasoning_tokens: int = 0
    """Of ``completion_tokens``, those the model spent reasoning (0 when the wire does
    not say)."""

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


class Completion(msgspec.Struct, frozen=True):
    """The model's answer to one request.

    Attributes:
        content: The reply text, or None when the model only called tools.
        tool_calls: The tool calls, in the order the model made them.
        usage: Token counts of the successful attempt.
        model: The model that answered, as the provider names it.
        finish_reason: Why generation stopped (``stop``, ``tool_calls``,
            ``length``; Anthropic's ``end_turn``, ``tool_use``...), if given.
        attempts: HTTP attempts made, retries included (1 without retries).
        script_position: The ``scripted`` model's reply this was (0-based, past
            the script's end when its last reply repeats); None for other models.
        reasoning: The reply's reasoning, apart from ``content`` (empty when the
            provider returned none).
    """

    content: str | None
    tool_calls: tuple[ModelToolCall, ...]
    usage: LLMUsage
    model: str
    finish_reason: str | None = None
    attempts: int = 1
    script_position: int | None = None
    reasoning: tuple[Reasoning, ...] = ()

    @property
    def reasoning_text(self) -> str:
        """The reasoning's text, its blocks joined."""
        return "".join(block.text for block in self.reasoning)


class LLMRequest(msgspec.Struct, frozen=True):
    """Everything one completion call sends.

    Attributes:
        model: The model name without its provider (``gpt-4o-mini``).
        messages: The conversation so far, system prompt included.
        tools: The tools offered; empty offers none.
        temperature: Sampling temperature, or None for the provider's default.
        top_p: Nucleus sampling, or None for the provider's default.
        max_tokens: A cap on the reply's tokens, or None: the provider's
            default (4096 for Anthropic, which requires one).
        max_retries: Retries of this call on transient failures (429, 5xx,
            connection errors, timeouts), or None: the provider's `RetryPolicy`.
            Not sent to the model.
        thinking: How much the model reasons (`Thinking`), mapped to each wire's
            options; unset sends none (the provider's default).
    """

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_retries: int | None = None
    # UNSET, not None: a request without it encodes as before (see Message.reasoning).
    thinking: Thinking | UnsetType = UNSET


class LLMClient(Protocol):
    """A chat model behind one provider; ``ProviderRegistry.client`` hands them out."""

    async def complete(self, request: LLMRequest, **hooks: Unpack[CallHooks]) -> Completion:
        """Send ``request`` and return the model's reply, retrying transient failures.

        Args:
            request: The model, conversation and tools.
            **hooks: ``on_retry`` and ``on_delta`` (`CallHooks`).

        Raises:
            LLMConfigError: The provider is not configured (a key is missing).
            LLMHTTPError: The server answered with an error status, or kept
                answering 429/5xx until the attempts ran out.
            LLMConnectionError: The server could not be reached, attempts included.
            LLMTimeout: An attempt ran past the policy's deadline, attempts included.
            LLMResponseError: The response was malformed or too large.
        """
        ...
