"""Amazon Bedrock's Converse API (provider ``bedrock``), signed with SigV4 by botocore.

``POST {endpoint}/model/{modelId}/converse`` answers with one JSON body;
``.../converse-stream`` with an AWS event stream (binary messages, decoded by
botocore in `AWSEventStreamParser`). Every attempt is signed afresh by
botocore's ``SigV4Auth`` as an ``httpx.Auth``, or carries the Bedrock API key
(``AWS_BEARER_TOKEN_BEDROCK``) as a bearer token. botocore is the ``bedrock``
extra, imported when a Bedrock client is first made.

The environment is read as the AWS SDKs read it: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN``; the region from
``AWS_REGION``, then ``AWS_DEFAULT_REGION`` (``us-east-1`` without either);
the endpoint from ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``, then
``AWS_ENDPOINT_URL`` (both ignored under ``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS``).
Shared config files, profiles and instance roles are not read.

The mapping to the neutral types mirrors the Anthropic one: system messages
become the top-level ``system`` blocks; an assistant's tool calls become
``toolUse`` blocks; ``tool`` messages become ``toolResult`` blocks in a user
turn; consecutive messages of one role are merged into one turn, because
Converse wants user and assistant turns to alternate.

A ``thinking`` level reaches Claude (a model id with ``anthropic.`` in it) as
Anthropic's own field, passed through ``additionalModelRequestFields``, with
``maxTokens`` raised by the budget; other models get nothing (Converse has no
common field for it). Whatever the model, ``reasoningContent`` blocks are the
reply's reasoning, and go back, signed, at the head of the assistant's turn.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from functools import partial
from typing import Annotated, Any, Final

import httpx
import msgspec

from ._errors import LLMConfigError, LLMResponseError
from ._stream import StreamError, _Assembler, _Call
from ._thinking import thinking_budget, with_budget
from ._types import Completion, DeltaHook, LLMRequest, LLMUsage, Message, ModelToolCall, Reasoning
from ._wire import Connection, WireFormat, alternating_turns, arguments_object

__all__ = ["WIRE", "connect_bedrock", "decode_bedrock", "encode_bedrock"]

SIGNING_NAME: Final = "bedrock"
"""The service name in Bedrock Runtime's SigV4 credential scope."""

_DEFAULT_REGION: Final = "us-east-1"
_ANTHROPIC: Final = "anthropic."  # in every Claude model id (anthropic.claude-..., us.anthropic...)
_EXTRA: Final = "pip install 'cadenza[bedrock]'"

# A negative count would wind the run's token budget back: refused at the edge.
_Tokens = Annotated[int, msgspec.Meta(ge=0)]


class _Usage(msgspec.Struct, rename="camel"):
    input_tokens: _Tokens = 0
    output_tokens: _Tokens = 0
    cache_read_input_tokens: _Tokens = 0
    cache_write_input_tokens: _Tokens = 0

    def counted(self) -> LLMUsage:
        # As on the Anthropic wire: cache reads and writes count as prompt tokens.
        prompt = self.input_tokens + self.cache_read_input_tokens + self.cache_write_input_tokens
        return LLMUsage(prompt, self.output_tokens, cached_tokens=self.cache_read_input_tokens)


class _ToolUse(msgspec.Struct, rename="camel"):
    tool_use_id: str
    name: str
    input: Any = None


class _ReasoningText(msgspec.Struct):
    text: str = ""
    signature: str | None = None


class _ReasoningContent(msgspec.Struct, rename="camel"):
    reasoning_text: _ReasoningText | None = None
    redacted_content: str | None = None  # base64, as JSON carries a blob


class _Block(msgspec.Struct, rename="camel"):
    # Blocks this code does not read (images, guard content) are skipped.
    text: str | None = None
    tool_use: _ToolUse | None = None
    reasoning_content: _ReasoningContent | None = None

    def reasoning(self) -> Reasoning | None:
        content = self.reasoning_content
        if content is None:
            return None
        if content.redacted_content is not None:
            return Reasoning(redacted=content.redacted_content)
        said = content.reasoning_text or _ReasoningText()
        return Reasoning(said.text, said.signature)


class _Message(msgspec.Struct):
    content: list[_Block]


class _Output(msgspec.Struct):
    message: _Message


class _Response(msgspec.Struct, rename="camel"):
    output: _Output
    stop_reason: str | None = None
    usage: _Usage | None = None


_decoder = msgspec.json.Decoder(_Response)
_encoder = msgspec.json.Encoder()


def encode_bedrock(request: LLMRequest, *, stream: bool = False) -> bytes:
    """The Converse request body for ``request`` (the model and streaming are in the path)."""
    budget = thinking_budget(request) if _ANTHROPIC in request.model else None
    body: dict[str, Any] = {
        "messages": alternating_turns(
            request.messages, partial(_blocks, thinking=budget is not None)
        )
    }
    system = [{"text": m.content} for m in request.messages if m.role == "system" and m.content]
    if system:
        body["system"] = system
    max_tokens = request.max_tokens
    if budget is not None:
        max_tokens = with_budget(max_tokens, budget)
        body["additionalModelRequestFields"] = {
            "thinking": {"type": "enabled", "budget_tokens": budget}
        }
    settings = (
        ("maxTokens", max_tokens),
        ("temperature", request.temperature),
        ("topP", request.top_p),
    )
    inference = {key: value for key, value in settings if value is not None}
    if inference:
        body["inferenceConfig"] = inference
    if request.tools:
        specs = [
            {"name": t.name, "description": t.description, "inputSchema": {"json": t.parameters}}
            for t in request.tools
        ]
        body["toolConfig"] = {"tools": [{"toolSpec": spec} for spec in specs]}
    return _encoder.encode(body)


def _blocks(message: Message, *, thinking: bool) -> list[dict[str, Any]]:
    if message.role == "tool":
        content = [{"text": message.content}] if message.content else []
        return [{"toolResult": {"toolUseId": message.tool_call_id or "", "content": content}}]
    blocks = _reasoning_blocks(message) if thinking else []
    if message.content:
        blocks.append({"text": message.content})
    blocks.extend(
        {
            "toolUse": {
                "toolUseId": call.id,
                "name": call.name,
                "input": arguments_object(call.arguments),
            }
        }
        for call in message.tool_calls
    )
    return blocks


def _reasoning_blocks(message: Message) -> list[dict[str, Any]]:
    """An assistant turn's reasoning as Converse takes it back: signed or redacted."""
    blocks: list[dict[str, Any]] = []
    for block in message.reasoning or ():
        if block.redacted is not None:
            blocks.append({"reasoningContent": {"redactedContent": block.redacted}})
        elif block.signature:
            said = {"text": block.text, "signature": block.signature}
            blocks.append({"reasoningContent": {"reasoningText": said}})
    return blocks


def decode_bedrock(data: bytes, *, what: str, model: str, attempts: int) -> Completion:
    """The ``Completion`` in a Converse response body.

    Text blocks are joined into ``content``; ``toolUse`` blocks become tool
    calls with their ``input`` encoded as JSON text; ``reasoningContent`` blocks
    are the reasoning; other blocks are skipped.

    Raises:
        LLMResponseError: The body is not JSON or has no ``output.message.content``.
    """
    try:
        response = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise LLMResponseError(f"{what}: malformed reply: {exc}", attempts=attempts) from None
    texts: list[str] = []
    calls: list[ModelToolCall] = []
    reasoning: list[Reasoning] = []
    for block in response.output.message.content:
        thought = block.reasoning()
        if block.text is not None:
            texts.append(block.text)
        elif block.tool_use is not None:
            use = block.tool_use
            arguments = _encoder.encode(use.input if use.input is not None else {}).decode()
            calls.append(ModelToolCall(use.tool_use_id, use.name, arguments))
        elif thought is not None:
            reasoning.append(thought)
    return Completion(
        content="".join(texts) if texts else None,
        tool_calls=tuple(calls),
        usage=(response.usage or _Usage()).counted(),
        model=model,  # a Converse reply does not name its model: the one asked for
        finish_reason=response.stop_reason,
        attempts=attempts,
        reasoning=tuple(reasoning),
    )


class _Start(msgspec.Struct, rename="camel"):
    tool_use: _ToolUse | None = None


class _BlockStart(msgspec.Struct, rename="camel"):
    content_block_index: int = 0
    start: _Start | None = None


class _ToolDelta(msgspec.Struct):
    input: str = ""


class _ReasoningDelta(msgspec.Struct, rename="camel"):
    text: str | None = None
    signature: str | None = None
    redacted_content: str | None = None


class _Delta(msgspec.Struct, rename="camel"):
    text: str | None = None
    tool_use: _ToolDelta | None = None
    reasoning_content: _ReasoningDelta | None = None


class _BlockDelta(msgspec.Struct, rename="camel"):
    content_block_index: int = 0
    delta: _Delta | None = None


class _Stop(msgspec.Struct, rename="camel"):
    stop_reason: str | None = None


class _Metadata(msgspec.Struct):
    usage: _Usage | None = None


class _Event(msgspec.Struct, rename="camel"):
    """One event of a ConverseStream reply: the one member its event type names."""

    content_block_start: _BlockStart | None = None
    content_block_delta: _BlockDelta | None = None
    message_stop: _Stop | None = None
    metadata: _Metadata | None = None


class BedrockStream(_Assembler[_Event]):
    """Assembles a ConverseStream reply (``messageStart`` ... ``messageStop``, ``metadata``)."""

    __slots__ = ("_stop", "_usage")
    _decoder = msgspec.json.Decoder(list[_Event])
    _unit = "event"

    def __init__(
        self, on_delta: DeltaHook, attempt: int, on_reasoning: DeltaHook | None = None
    ) -> None:
        super().__init__(on_delta, attempt, on_reasoning)
        self._stop: str | None = None
        self._usage = _Usage()

    def _take(self, event: _Event) -> None:
        if event.content_block_delta is not None:
            self._delta(event.content_block_delta)
        elif event.content_block_start is not None:
            block = event.content_block_start
            use = block.start.tool_use if block.start is not None else None
            if use is not None:
                self._calls[block.content_block_index] = _Call(use.tool_use_id, use.name)
        elif event.message_stop is not None:
            self._stop = event.message_stop.stop_reason or "end_turn"
        elif event.metadata is not None and event.metadata.usage is not None:
            self._usage = event.metadata.usage

    def _delta(self, event: _BlockDelta) -> None:
        delta = event.delta
        if delta is None:
            return
        if delta.text:
            self._text.append(delta.text)
        elif delta.tool_use is not None:
            call = self._calls.get(event.content_block_index)
            if call is None:
                raise StreamError(f"tool input for block {event.content_block_index} never opened")
            call.arguments.append(delta.tool_use.input)
        elif delta.reasoning_content is not None:
            self._reasoning(event.content_block_index, delta.reasoning_content)

    def _reasoning(self, index: int, delta: _ReasoningDelta) -> None:
        if delta.text:
            self._think(delta.text, index)
        if delta.signature:
            self._thought(index).signature = delta.signature
        if delta.redacted_content is not None:
            self._thought(index).redacted = delta.redacted_content

    def completion(self, *, what: str, model: str, attempts: int) -> Completion:
        calls = tuple(self._calls[index].done_compact() for index in sorted(self._calls))
        usage = self._usage.counted()
        return self._reply(self._stop is not None, calls, usage, self._stop)(what, model, attempts)


class _Bearer(httpx.Auth):
    """A Bedrock API key (``AWS_BEARER_TOKEN_BEDROCK``): sent as it is, no signature."""

    def __init__(self, token: str) -> None:
        self._header = f"Bearer {token}"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self._header
        yield request

    def __repr__(self) -> str:
        return "_Bearer(***)"


class _SigV4(httpx.Auth):
    """Signs the request httpx is about to send with botocore's SigV4 (each attempt afresh).

    Only ``host``, ``content-type`` and botocore's own ``x-amz-*`` headers are
    signed: the others (``accept-encoding``, ``connection``) may be rewritten on
    the way by a proxy without the request becoming a forgery.
    """

    requires_request_body = True

    def __init__(self, access_key: str, secret_key: str, token: str | None, region: str) -> None:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        self._signer = SigV4Auth(Credentials(access_key, secret_key, token), SIGNING_NAME, region)
        self._request = AWSRequest

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        signed = self._request(
            method=request.method,
            url=str(request.url),
            data=request.content,
            headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
        )
        self._signer.add_auth(signed)
        for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token"):
            value = signed.headers.get(name)
            if value is not None:
                request.headers[name] = value
        yield request

    def __repr__(self) -> str:
        return "_SigV4(***)"


def connect_bedrock(environ: Mapping[str, str]) -> Connection:
    """Bedrock's endpoint and signer from the environment, as the AWS SDKs read it.

    A Bedrock API key (``AWS_BEARER_TOKEN_BEDROCK``) is used when set, as the
    SDKs do; otherwise the access key pair (and session token) signs with SigV4.

    Raises:
        LLMConfigError: botocore (the ``bedrock`` extra) is not installed.
    """
    try:
        import botocore  # noqa: F401  (the extra's presence, checked before anything else)
    except ImportError:
        raise LLMConfigError(f"the bedrock provider needs botocore: {_EXTRA}") from None
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or _DEFAULT_REGION
    variable, url = (
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
        f"https://bedrock-runtime.{region}.amazonaws.com",
    )
    if environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() != "true":
        for name in ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "AWS_ENDPOINT_URL"):
            if environ.get(name):
                variable, url = name, environ[name]
                break
    bearer = environ.get("AWS_BEARER_TOKEN_BEDROCK")
    if bearer:
        return Connection(url, variable, _Bearer(bearer))
    access, secret = environ.get("AWS_ACCESS_KEY_ID"), environ.get("AWS_SECRET_ACCESS_KEY")
    if not access:
        return Connection(url, variable, None, "AWS_ACCESS_KEY_ID (or AWS_BEARER_TOKEN_BEDROCK)")
    if not secret:
        return Connection(url, variable, None, "AWS_SECRET_ACCESS_KEY")
    token = environ.get("AWS_SESSION_TOKEN") or None
    return Connection(url, variable, _SigV4(access, secret, token, region))


WIRE = WireFormat(
    name="bedrock",
    path="/model/{model}/converse",
    stream_path="/model/{model}/converse-stream",
    encode=encode_bedrock,
    decode=decode_bedrock,
    stream=BedrockStream,
    connect=connect_bedrock,
)
"""The Converse API: ``POST {endpoint}/model/{modelId}/converse`` (``converse-stream``)."""
