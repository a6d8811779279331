"""The wire formats ``ScriptedLLMServer`` speaks: reading requests, writing replies.

OpenAI's, Anthropic's and Google's (the Gemini API, Vertex AI's Gemini and
Claude) are here; Bedrock's Converse (signed, binary streams) is in
``_llm_bedrock``.

Request bodies come from clients under test, so reading them is defensive:
a missing or oddly typed field reads as empty instead of crashing the server.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final, Protocol

from ._llm_rules import RequestView, ServerReply, ServerToolCall

__all__ = ["WIRES", "ServerWire", "thinking_signature"]


class ServerWire(Protocol):
    """One API family, as the server sees it."""

    name: str
    stream_type: str
    """The content type of a streamed reply."""

    def accepts(self, path: str) -> bool:
        """Whether a POST to ``path`` is a completion request."""
        ...

    def refuse(
        self, path: str, headers: Mapping[str, str], raw: bytes, key: str
    ) -> tuple[int, dict[str, Any]] | None:
        """The status and error body refusing a request whose credentials are not ``key``'s.

        None lets it through (OpenAI's and Anthropic's dialects take any key).
        """
        ...

    def view(self, body: Any, path: str) -> RequestView:
        """What rules match on, from a parsed request body and its path."""
        ...

    def streams(self, body: Any, path: str) -> bool:
        """Whether the request asks for a streamed reply."""
        ...

    def success(self, body: Any, reply: ServerReply, serial: int) -> dict[str, Any]:
        """The 200 response body for ``reply``."""
        ...

    def error(self, status: int, message: str) -> dict[str, Any]:
        """An error response body."""
        ...

    def stream(self, body: Any, reply: ServerReply, serial: int) -> bytes:
        """The reply as the family's server-sent events, ``reply.chunk`` characters a delta."""
        ...

    def middle(self, data: bytes) -> int:
        """The offset just after the event at the middle of a streamed reply."""
        ...


def thinking_signature(reasoning: str, serial: int) -> str:
    """The signature the server puts on a reply's reasoning: a test can tell that the
    block sent back is the one it gave (Anthropic's and Bedrock's dialects)."""
    return f"sig-{serial}-{len(reasoning)}"


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _sse(events: list[tuple[str | None, dict[str, Any]]], done: bool) -> bytes:
    lines = []
    for name, data in events:
        if name is not None:
            lines.append(f"event: {name}\n")
        lines.append(f"data: {json.dumps(data)}\n\n")
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(content: Any) -> str:
    """The text of a content field: a string, or a list of parts/blocks."""
    if isinstance(content, str):
        return content
    parts = []
    for part in _list(content):
        part = _dict(part)
        if isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif part.get("type") == "tool_result":
            parts.append(_text(part.get("content")))
    return "".join(parts)


def _arguments_text(call: ServerToolCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


class _Family:
    """What the families share: a completion request is a POST to ``path``."""

    name: str
    path: str
    stream_type = "text/event-stream"

    def accepts(self, path: str) -> bool:
        # The query is not the path: Azure's deployments carry ?api-version=... .
        return path.partition("?")[0].rstrip("/").endswith(self.path)

    def refuse(
        self, path: str, headers: Mapping[str, str], raw: bytes, key: str
    ) -> tuple[int, dict[str, Any]] | None:
        return None

    def streams(self, body: Any, path: str) -> bool:
        return isinstance(body, dict) and body.get("stream") is True

    def middle(self, data: bytes) -> int:
        return data.find(b"\n\n", len(data) // 2) + 2


def _conversation(body: Any) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """A request body, its ``messages`` and the last of them (``{}`` for what is missing)."""
    body = _dict(body)
    messages = [_dict(m) for m in _list(body.get("messages"))]
    return body, messages, messages[-1] if messages else {}


class _OpenAI(_Family):
    name = "openai"
    path = "/chat/completions"

    def view(self, body: Any, path: str) -> RequestView:
        body, messages, last = _conversation(body)
        return RequestView(
            system="\n".join(
                _text(m.get("content"))
                for m in messages
                if m.get("role") in ("system", "developer")
            ),
            user="\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user"),
            last=_text(last.get("content")),
            last_role=last.get("role"),
            model=body.get("model"),
            tools=tuple(
                str(_dict(_dict(t).get("function")).get("name", ""))
                for t in _list(body.get("tools"))
            ),
        )

    def success(self, body: Any, reply: ServerReply, serial: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.reasoning:  # as DeepSeek and vLLM return it
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{serial}_{index}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": _arguments_text(call)},
                }
                for index, call in enumerate(reply.tool_calls)
            ]
        prompt, completion = reply.usage
        return {
            "id": f"chatcmpl-{serial}",
            "object": "chat.completion",
            "created": 0,
            "model": _dict(body).get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": reply.cached_tokens},
                "completion_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
            },
        }

    def error(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": "scripted_error", "code": status}}

    def stream(self, body: Any, reply: ServerReply, serial: int) -> bytes:
        whole = self.success(body, reply, serial)
        head = {key: whole[key] for key in ("id", "created", "model")}
        head["object"] = "chat.completion.chunk"

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        chunks = [chunk({"role": "assistant", "content": ""})]
        chunks += [
            chunk({"reasoning_content": piece})
            for piece in _pieces(reply.reasoning or "", reply.chunk)
        ]
        chunks += [chunk({"content": piece}) for piece in _pieces(reply.content or "", reply.chunk)]
        for index, call in enumerate(whole["choices"][0]["message"].get("tool_calls") or ()):
            function = call["function"]
            first = {"name": function["name"], "arguments": ""}
            chunks.append(chunk({"tool_calls": [{**call, "index": index, "function": first}]}))
            chunks += [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in _pieces(function["arguments"], reply.chunk)
            ]
        chunks.append(chunk({}, whole["choices"][0]["finish_reason"]))
        if _dict(_dict(body).get("stream_options")).get("include_usage"):
            chunks.append({**head, "choices": [], "usage": whole["usage"]})
        return _sse([(None, c) for c in chunks], done=True)


class _Anthropic(_Family):
    name = "anthropic"
    path = "/v1/messages"

    def view(self, body: Any, path: str) -> RequestView:
        body, messages, last = _conversation(body)
        role = last.get("role")
        blocks = _list(last.get("content"))
        if role == "user" and blocks and all(_dict(b).get("type") == "tool_result" for b in blocks):
            role = "tool"
        return RequestView(
            system=_text(body.get("system")),
            user="\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user"),
            last=_text(last.get("content")),
            last_role=role,
            model=body.get("model"),
            tools=tuple(str(_dict(t).get("name", "")) for t in _list(body.get("tools"))),
        )

    def success(self, body: Any, reply: ServerReply, serial: int) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.reasoning:
            signature = thinking_signature(reply.reasoning, serial)
            content.append(
                {"type": "thinking", "thinking": reply.reasoning, "signature": signature}
            )
        if reply.content:
            content.append({"type": "text", "text": reply.content})
        for index, call in enumerate(reply.tool_calls):
            arguments: Any = call.arguments
            if isinstance(arguments, str):
                # Raw text stays raw if it is not JSON: a test may want it malformed.
                with contextlib.suppress(ValueError):
                    arguments = json.loads(arguments)
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{serial}_{index}",
                    "name": call.name,
                    "input": arguments,
                }
            )
        prompt, completion = reply.usage
        return {
            "id": f"msg_{serial}",
            "type": "message",
            "role": "assistant",
            "model": _dict(body).get("model"),
            "content": content,
            "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": prompt - reply.cached_tokens,
                "cache_read_input_tokens": reply.cached_tokens,
                "output_tokens": completion,
            },
        }

    def error(self, status: int, message: str) -> dict[str, Any]:
        kind = "rate_limit_error" if status == 429 else "api_error"
        return {"type": "error", "error": {"type": kind, "message": message}}

    def stream(self, body: Any, reply: ServerReply, serial: int) -> bytes:
        whole = self.success(body, reply, serial)
        completion = reply.usage[1]
        start = {key: whole[key] for key in ("id", "type", "role", "model")}
        usage = {key: whole["usage"][key] for key in ("input_tokens", "cache_read_input_tokens")}
        start.update(content=[], stop_reason=None, usage={**usage, "output_tokens": 1})
        events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
        for index, block in enumerate(whole["content"]):
            if block["type"] == "text":
                opened: dict[str, Any] = {"type": "text", "text": ""}
                deltas = [
                    {"type": "text_delta", "text": p} for p in _pieces(block["text"], reply.chunk)
                ]
            elif block["type"] == "thinking":  # its text, then its signature
                opened = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [
                    {"type": "thinking_delta", "thinking": p}
                    for p in _pieces(block["thinking"], reply.chunk)
                ]
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
            else:
                opened = {**block, "input": {}}
                arguments = block["input"]
                text = arguments if isinstance(arguments, str) else json.dumps(arguments)
                deltas = [
                    {"type": "input_json_delta", "partial_json": p}
                    for p in _pieces(text, reply.chunk)
                ]
            events.append({"type": "content_block_start", "index": index, "content_block": opened})
            events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
            events.append({"type": "content_block_stop", "index": index})
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": completion},
            }
        )
        events.append({"type": "message_stop"})
        return _sse([(e["type"], e) for e in events], done=False)


# Vertex AI's endpoints of a publisher's model (the Gemini API's start at /v1beta/models/).
_VERTEX: Final = r"/v1/projects/[^/?#]+/locations/[^/?#]+/publishers/"
_GEMINI_PATH: Final = re.compile(
    rf"(?:/v1beta|{_VERTEX}google)/models/(?P<model>[^/:?#]+)"
    r":(?P<method>generateContent|streamGenerateContent)(?:\?alt=sse)?"
)
_VERTEX_CLAUDE_PATH: Final = re.compile(
    rf"{_VERTEX}anthropic/models/(?P<model>[^/:?#]+):(?P<method>rawPredict|streamRawPredict)"
)


class _ModelInPath(_Family):
    """A family whose URL names the model and says whether to stream."""

    _pattern: re.Pattern[str]
    _streamed: str  # the method of a streamed request

    def accepts(self, path: str) -> bool:
        return self._pattern.fullmatch(path) is not None

    def streams(self, body: Any, path: str) -> bool:
        found = self._pattern.fullmatch(path)
        return found is not None and found["method"] == self._streamed

    def named(self, body: Any, path: str) -> dict[str, Any]:
        """The body with the ``model`` its URL names, as rules match on it."""
        found = self._pattern.fullmatch(path)
        return {**_dict(body), "model": found["model"] if found is not None else None}


def _gemini_text(part: Any) -> str:
    part = _dict(part)
    if isinstance(part.get("text"), str):
        return str(part["text"])
    answer = _dict(part.get("functionResponse")).get("response")
    if answer is None:
        return ""
    output = _dict(answer).get("output")
    return output if isinstance(output, str) else json.dumps(answer)


def _gemini_role(role: Any, parts: list[Any]) -> str | None:
    """``assistant`` for the model's turn; ``tool`` for a user turn of function responses."""
    if role == "model":
        return "assistant"
    if role != "user":
        return None
    answers = parts and all("functionResponse" in _dict(p) for p in parts)
    return "tool" if answers else "user"


class _Gemini(_ModelInPath):
    """The Gemini API (``/v1beta/models/...``) and Vertex AI's (``.../publishers/google/...``)."""

    name = "gemini"
    _pattern = _GEMINI_PATH
    _streamed = "streamGenerateContent"

    def view(self, body: Any, path: str) -> RequestView:
        body = self.named(body, path)
        turns = [_dict(t) for t in _list(body.get("contents"))]
        last = turns[-1] if turns else {}
        parts = _list(last.get("parts"))
        declarations = [
            _dict(d)
            for tool in _list(body.get("tools"))
            for d in _list(_dict(tool).get("functionDeclarations"))
        ]
        system = _list(_dict(body.get("systemInstruction")).get("parts"))
        return RequestView(
            system="".join(_gemini_text(p) for p in system),
            user="\n".join(
                "".join(_gemini_text(p) for p in _list(t.get("parts")) if "text" in _dict(p))
                for t in turns
                if t.get("role") == "user"
            ),
            last="".join(_gemini_text(p) for p in parts),
            last_role=_gemini_role(last.get("role"), parts),
            model=body.get("model"),
            tools=tuple(str(d.get("name", "")) for d in declarations),
        )

    def success(self, body: Any, reply: ServerReply, serial: int) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        if reply.reasoning:  # a thought summary, as includeThoughts returns it
            parts.append({"text": reply.reasoning, "thought": True})
        if reply.content:
            parts.append({"text": reply.content})
        for index, call in enumerate(reply.tool_calls):
            arguments: Any = call.arguments
            if isinstance(arguments, str):
                with contextlib.suppress(ValueError):
                    arguments = json.loads(arguments)
            part: dict[str, Any] = {"functionCall": {"name": call.name, "args": arguments}}
            if index == 0:  # as Gemini 3 does: the turn's first call is signed
                part["thoughtSignature"] = f"c2lnbmF0dXJl-{serial}"
            parts.append(part)
        prompt, completion = reply.usage
        return {
            "candidates": [
                {
                    "content": {"role": "model", "parts": parts},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": prompt,
                "cachedContentTokenCount": reply.cached_tokens,
                # Gemini counts the thoughts apart from the candidates: the two make the reply.
                "candidatesTokenCount": completion - reply.reasoning_tokens,
                "thoughtsTokenCount": reply.reasoning_tokens,
                "totalTokenCount": prompt + completion,
            },
            "responseId": f"resp-{serial}",
        }

    def error(self, status: int, message: str) -> dict[str, Any]:
        kinds = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 429: "RESOURCE_EXHAUSTED"}
        kind = kinds.get(status, "INTERNAL")
        return {"error": {"code": status, "message": message, "status": kind}}

    def stream(self, body: Any, reply: ServerReply, serial: int) -> bytes:
        whole = self.success(body, reply, serial)
        candidate = whole["candidates"][0]
        prompt, _ = reply.usage
        head = {"responseId": whole["responseId"]}

        def chunk(parts: list[dict[str, Any]]) -> dict[str, Any]:
            return {
                **head,
                "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
                "usageMetadata": {"promptTokenCount": prompt, "totalTokenCount": prompt},
            }

        thoughts = _pieces(reply.reasoning or "", reply.chunk)
        chunks = [chunk([{"text": p, "thought": True}]) for p in thoughts]
        chunks += [chunk([{"text": p}]) for p in _pieces(reply.content or "", reply.chunk)]
        chunks += [chunk([part]) for part in candidate["content"]["parts"] if "text" not in part]
        last = chunk([])
        last["candidates"][0]["finishReason"] = candidate["finishReason"]
        last["usageMetadata"] = whole["usageMetadata"]
        chunks.append(last)
        return _sse([(None, c) for c in chunks], done=False)


class _VertexAnthropic(_ModelInPath, _Anthropic):
    """Claude on Vertex AI: the Messages API at ``.../publishers/anthropic/...:rawPredict``."""

    name = "vertex-anthropic"
    _pattern = _VERTEX_CLAUDE_PATH
    _streamed = "streamRawPredict"

    def view(self, body: Any, path: str) -> RequestView:
        return _Anthropic.view(self, self.named(body, path), path)


WIRES: dict[str, ServerWire] = {
    "openai": _OpenAI(),
    "anthropic": _Anthropic(),
    "gemini": _Gemini(),
    "vertex-anthropic": _VertexAnthropic(),
}
"""The wire formats by name."""
