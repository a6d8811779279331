"""Bedrock's Converse API as ``ScriptedLLMServer`` speaks it: SigV4 checked, streams framed.

Every request's SigV4 signature is recomputed with botocore from the secret
the server knows and compared, so a request signed with another secret, for
another service, or with its body changed after signing is HTTP 403, as AWS
answers it. The 403 body echoes the ``Authorization`` and session-token
headers the request carried, as a careless (or hostile) server would: a
client must not let them reach its errors.

A streamed reply is an AWS event stream. botocore only decodes that framing,
so the encoder here is written by hand (test-side only: the client decodes with
botocore): each message is its total and header lengths, a CRC-32 of those,
the headers (``:event-type``, ``:content-type``, ``:message-type``), the JSON
payload and a CRC-32 of it all.
"""

from __future__ import annotations

import hmac
import json
import re
import struct
import zlib
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import unquote

from ._llm_rules import RequestView, ServerReply
from ._llm_wire import _dict, _list, _pieces, thinking_signature

__all__ = ["BEDROCK_ACCESS_KEY_ID", "BedrockWire", "event_stream_message"]

BEDROCK_ACCESS_KEY_ID: Final = "AKIDCADENZATEST00001"
"""The access key id the scripted Bedrock server knows (its secret is the server's key)."""

_PATH = re.compile(r"/model/(?P<model>[^/]+)/(?P<op>converse|converse-stream)/?\Z")
_SIGV4 = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, SignedHeaders=(?P<signed>[a-z0-9;-]+), "
    r"Signature=(?P<signature>[0-9a-f]{64})\Z"
)
_STRING: Final = 7  # the header value type of a string, in the event-stream framing


def event_stream_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message: string ``headers`` and ``payload``, with both CRCs."""
    encoded = b"".join(
        struct.pack("!B", len(name)) + name.encode() + struct.pack("!BH", _STRING, len(value))
        + value.encode()
        for name, value in headers.items()
    )  # fmt: skip
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack("!II", total, len(encoded))
    head = prelude + struct.pack("!I", zlib.crc32(prelude))
    body = head + encoded + payload
    return body + struct.pack("!I", zlib.crc32(body))


def _event(kind: str, data: dict[str, Any]) -> bytes:
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return event_stream_message(headers, json.dumps(data).encode())


def _text(blocks: Any) -> str:
    """The text of a Converse content list: text blocks, and the text inside tool results."""
    parts = []
    for block in _list(blocks):
        block = _dict(block)
        if isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif "toolResult" in block:
            parts.append(_text(_dict(block["toolResult"]).get("content")))
    return "".join(parts)


class BedrockWire:
    """Converse: ``POST /model/{modelId}/converse`` and ``/converse-stream``."""

    name = "bedrock"
    stream_type = "application/vnd.amazon.eventstream"

    def accepts(self, path: str) -> bool:
        return _PATH.search(path) is not None

    def refuse(
        self, path: str, headers: Mapping[str, str], raw: bytes, key: str
    ) -> tuple[int, dict[str, Any]] | None:
        authorization = headers.get("authorization", "")
        if authorization.startswith("Bearer "):
            if hmac.compare_digest(authorization[7:].encode(), key.encode()):
                return None
            return 403, {"message": f"Invalid API key: received {authorization}"}
        problem = _signature_problem(path, headers, raw, key)
        if problem is None:
            return None
        # What a careless server answers: the credentials it received, first.
        token = headers.get("x-amz-security-token", "")
        echoed = f"received X-Amz-Security-Token {token} and Authorization {authorization}"
        return 403, {"message": f"{echoed}: {problem}"}

    def view(self, body: Any, path: str) -> RequestView:
        body = _dict(body)
        messages = [_dict(m) for m in _list(body.get("messages"))]
        last = messages[-1] if messages else {}
        role = last.get("role")
        blocks = [_dict(b) for b in _list(last.get("content"))]
        if role == "user" and blocks and all("toolResult" in b for b in blocks):
            role = "tool"
        match = _PATH.search(path)
        tools = _list(_dict(body.get("toolConfig")).get("tools"))
        return RequestView(
            system=_text(body.get("system")),
            user="\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user"),
            last=_text(last.get("content")),
            last_role=role,
            model=unquote(match["model"]) if match else None,
            tools=tuple(str(_dict(_dict(t).get("toolSpec")).get("name", "")) for t in tools),
        )

    def streams(self, body: Any, path: str) -> bool:
        match = _PATH.search(path)
        return match is not None and match["op"] == "converse-stream"

    def success(self, body: Any, reply: ServerReply, serial: int) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.reasoning:
            said = {
                "text": reply.reasoning,
                "signature": thinking_signature(reply.reasoning, serial),
            }
            content.append({"reasoningContent": {"reasoningText": said}})
        if reply.content:
            content.append({"text": reply.content})
        for index, call in enumerate(reply.tool_calls):
            arguments: Any = call.arguments
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    arguments = {"raw": arguments}  # Converse's input is always an object
            use = {"toolUseId": f"tooluse_{serial}_{index}", "name": call.name, "input": arguments}
            content.append({"toolUse": use})
        prompt, completion = reply.usage
        return {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": "tool_use" if reply.tool_calls else "end_turn",
            "usage": {
                "inputTokens": prompt - reply.cached_tokens,
                "cacheReadInputTokens": reply.cached_tokens,
                "outputTokens": completion,
                "totalTokens": prompt + completion,
            },
            "metrics": {"latencyMs": 1},
        }

    def error(self, status: int, message: str) -> dict[str, Any]:
        return {"message": message}

    def stream(self, body: Any, reply: ServerReply, serial: int) -> bytes:
        whole = self.success(body, reply, serial)
        events = [_event("messageStart", {"role": "assistant"})]
        for index, block in enumerate(whole["output"]["message"]["content"]):
            deltas: list[dict[str, Any]]
            if "text" in block:  # a text block opens with its first delta, as Bedrock's do
                deltas = [{"text": piece} for piece in _pieces(block["text"], reply.chunk)]
            elif "reasoningContent" in block:  # its text, then its signature
                said = block["reasoningContent"]["reasoningText"]
                deltas = [
                    {"reasoningContent": {"text": piece}}
                    for piece in _pieces(said["text"], reply.chunk)
                ]
                deltas.append({"reasoningContent": {"signature": said["signature"]}})
            else:
                use = block["toolUse"]
                opened = {"toolUseId": use["toolUseId"], "name": use["name"]}
                start: dict[str, Any] = {"contentBlockIndex": index, "start": {"toolUse": opened}}
                text = _arguments_text_of(use["input"])
                deltas = [{"toolUse": {"input": piece}} for piece in _pieces(text, reply.chunk)]
                events.append(_event("contentBlockStart", start))
            events += [
                _event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta})
                for delta in deltas
            ]
            events.append(_event("contentBlockStop", {"contentBlockIndex": index}))
        events.append(_event("messageStop", {"stopReason": whole["stopReason"]}))
        events.append(_event("metadata", {"usage": whole["usage"], "metrics": whole["metrics"]}))
        return b"".join(events)

    def middle(self, data: bytes) -> int:
        offset = 0
        while offset < len(data) // 2:
            offset += struct.unpack_from("!I", data, offset)[0]
        return offset


def _arguments_text_of(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _signature_problem(path: str, headers: Mapping[str, str], raw: bytes, key: str) -> str | None:
    """Why the request's SigV4 signature is not one made with ``key``; None when it is."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    found = _SIGV4.match(headers.get("authorization", ""))
    if found is None:
        return "Missing Authentication Token"
    if found["key"] != BEDROCK_ACCESS_KEY_ID:
        return "The security token included in the request is invalid"
    if found["service"] != "bedrock":
        return "Credential should be scoped to correct service: 'bedrock'"
    stamp = headers.get("x-amz-date", "")
    if not stamp.startswith(found["date"]):
        return "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date"
    signed = found["signed"].split(";")
    if any(name not in headers for name in signed):
        return "A header named in SignedHeaders is missing"
    request = AWSRequest(
        method="POST",
        url=f"http://{headers.get('host', '')}{path}",
        data=raw,
        headers={name: headers[name] for name in signed},
    )
    request.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(found["key"], key), found["service"], found["region"])
    expected = signer.signature(
        signer.string_to_sign(request, signer.canonical_request(request)), request
    )
    if hmac.compare_digest(expected, found["signature"]):
        return None
    return "The request signature we calculated does not match the signature you provided"
