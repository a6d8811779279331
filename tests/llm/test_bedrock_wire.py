"""The bedrock provider: Converse over real HTTP to a local server that verifies SigV4.

The server (``ScriptedLLMServer(wire="bedrock")``) recomputes every request's
signature with botocore from the secret it knows: a request the client signed
wrongly, or not at all, is HTTP 403, so each test that gets a reply shows the
signature was right.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cadenza._redact import secrets_from
from cadenza.llm import (
    LLMConfigError,
    LLMHTTPError,
    LLMRequest,
    LLMResponseError,
    LLMUsage,
    Message,
    ProviderRegistry,
    ToolSpec,
)
from cadenza.llm._stream import AWSEventStreamParser, StreamError
from cadenza.testing import (
    RequestMatch,
    ScriptedLLMServer,
    ServerReply,
    ServerRule,
    ServerToolCall,
)
from cadenza.testing._llm_bedrock import event_stream_message

SECRET = "bedrock-test-secret-access-key-7Qx2"
TOKEN = "bedrock-test-session-token-Zy91kWq"
MODEL = "anthropic.claude-sonnet-4-6"
LOOKUP = ToolSpec("lookup", "Look a word up.", {"type": "object"})


@pytest.fixture
def server() -> Iterator[ScriptedLLMServer]:
    rules = [
        ServerRule(
            [ServerReply(tool_calls=[ServerToolCall("lookup", {"word": "cadenza"})])],
            match=RequestMatch(tools="lookup", last_role="user"),
        ),
        ServerRule(["A cadenza is a solo passage."], match=RequestMatch(last_role="tool")),
        ServerRule([ServerReply(content="Hello from Bedrock.", usage=(21, 4), chunk=3)]),
    ]
    with ScriptedLLMServer(rules, wire="bedrock", api_key=SECRET) as running:
        yield running


def ask(text: str = "hi", **fields: Any) -> LLMRequest:
    return LLMRequest(MODEL, (Message("system", "Be brief."), Message("user", text)), **fields)


async def test_a_signed_request_gets_its_reply(server: ScriptedLLMServer) -> None:
    """POST /model/{id}/converse, SigV4 for bedrock in the region, the Converse body."""
    environ = server.environ() | {"AWS_SESSION_TOKEN": TOKEN}
    async with ProviderRegistry(environ=environ) as providers:
        assert providers.check(f"bedrock/{MODEL}") == ("bedrock", MODEL)
        completion = await providers.client("bedrock").complete(
            ask(max_tokens=300, temperature=0.2)
        )
    assert completion.content == "Hello from Bedrock."
    assert completion.usage == LLMUsage(21, 4)
    assert (completion.model, completion.finish_reason) == (MODEL, "end_turn")
    sent = server.requests[0]
    assert sent.path == f"/model/{MODEL}/converse"
    assert sent.headers["authorization"].startswith(
        "AWS4-HMAC-SHA256 Credential=AKIDCADENZATEST00001/"
    )
    assert "/us-east-1/bedrock/aws4_request" in sent.headers["authorization"]
    assert sent.headers["x-amz-security-token"] == TOKEN
    assert sent.body == {
        "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        "system": [{"text": "Be brief."}],
        "inferenceConfig": {"maxTokens": 300, "temperature": 0.2},
    }


async def test_a_streamed_reply_arrives_in_pieces(server: ScriptedLLMServer) -> None:
    """converse-stream answers in AWS's event-stream framing; the text comes as it arrives."""
    pieces: list[str] = []
    async with ProviderRegistry(environ=server.environ()) as providers:
        completion = await providers.client("bedrock").complete(
            ask(), on_delta=lambda text, attempt: pieces.append(text)
        )
    assert completion.content == "Hello from Bedrock."
    assert completion.usage == LLMUsage(21, 4)  # from the stream's metadata event
    assert completion.finish_reason == "end_turn"
    assert "".join(pieces) == "Hello from Bedrock."
    assert server.requests[0].path == f"/model/{MODEL}/converse-stream"


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_tool_call_round_trip(server: ScriptedLLMServer, streamed: bool) -> None:
    """toolConfig offers the tool; toolUse comes back; the toolResult goes in the next user turn."""
    hooks: dict[str, Any] = {"on_delta": lambda text, attempt: None} if streamed else {}
    async with ProviderRegistry(environ=server.environ()) as providers:
        client = providers.client("bedrock")
        first = await client.complete(ask("Define cadenza.", tools=(LOOKUP,)), **hooks)
        assert first.finish_reason == "tool_use"
        (call,) = first.tool_calls
        assert (call.name, call.arguments) == ("lookup", '{"word":"cadenza"}')
        history = (
            *ask("Define cadenza.").messages,
            Message("assistant", None, tool_calls=first.tool_calls),
            Message("tool", "a solo passage", tool_call_id=call.id),
        )
        second = await client.complete(LLMRequest(MODEL, history, tools=(LOOKUP,)), **hooks)
    assert second.content == "A cadenza is a solo passage."
    offered, answered = server.requests[0].body, server.requests[1].body
    assert offered["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "name": "lookup",
                    "description": "Look a word up.",
                    "inputSchema": {"json": {"type": "object"}},
                }
            }
        ]
    }
    assert answered["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"toolUse": {"toolUseId": call.id, "name": "lookup", "input": {"word": "cadenza"}}}
            ],
        },
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": call.id, "content": [{"text": "a solo passage"}]}}
            ],
        },
    ]


async def test_a_model_id_with_a_colon_is_encoded_in_the_path_and_signed(
    server: ScriptedLLMServer,
) -> None:
    """Versioned ids and inference profiles hold ``:``; the path and the signature agree on it."""
    model = "us.anthropic.claude-3-5-sonnet-20240620-v1:0"
    async with ProviderRegistry(environ=server.environ()) as providers:
        completion = await providers.client("bedrock").complete(LLMRequest(model, ask().messages))
    assert completion.content == "Hello from Bedrock."
    assert server.requests[0].path == f"/model/{model.replace(':', '%3A')}/converse"
    assert server.requests[0].model == model


async def test_a_request_signed_with_another_secret_is_refused_and_leaks_nothing(
    server: ScriptedLLMServer,
) -> None:
    """The server answers 403 echoing the credentials it got; the error masks the session token."""
    wrong = "not-the-secret-access-key-00000"
    environ = server.environ(api_key=wrong) | {"AWS_SESSION_TOKEN": TOKEN}
    async with ProviderRegistry(environ=environ) as providers:
        with pytest.raises(LLMHTTPError) as caught:
            await providers.client("bedrock").complete(ask())
    assert caught.value.status == 403
    message = str(caught.value)
    assert "X-Amz-Security-Token ***" in message  # the echo was there, masked
    assert TOKEN not in message
    assert wrong not in message
    assert server.requests[0].headers["x-amz-security-token"] == TOKEN  # it did travel


async def test_an_unsigned_or_tampered_request_is_refused(server: ScriptedLLMServer) -> None:
    """The test server verifies: no signature, or a body changed after signing, is 403."""
    body = b'{"messages": [{"role": "user", "content": [{"text": "hi"}]}]}'
    url = f"{server.base_url}/model/{MODEL}/converse"
    async with httpx.AsyncClient() as http:
        unsigned = await http.post(url, content=body)
        environ = server.environ()
        async with ProviderRegistry(environ=environ) as providers:
            client = providers.client("bedrock")
            await client.complete(ask())
        signed = server.requests[-1].headers
        replay = {name: signed[name] for name in ("authorization", "x-amz-date", "content-type")}
        tampered = await http.post(url, content=body + b" ", headers=replay)
    assert (unsigned.status_code, tampered.status_code) == (403, 403)
    assert "does not match the signature" in tampered.json()["message"]


async def test_a_bedrock_api_key_is_a_bearer_token_and_never_echoed(
    server: ScriptedLLMServer,
) -> None:
    """AWS_BEARER_TOKEN_BEDROCK goes as ``Authorization: Bearer``; a wrong one's echo is masked."""
    right = {
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": server.base_url,
        "AWS_BEARER_TOKEN_BEDROCK": SECRET,
    }
    async with ProviderRegistry(environ=right) as providers:
        assert (await providers.client("bedrock").complete(ask())).content == "Hello from Bedrock."
    assert server.requests[-1].headers["authorization"] == f"Bearer {SECRET}"
    wrong_key = "bedrock-api-key-that-is-wrong-551"
    wrong = right | {"AWS_BEARER_TOKEN_BEDROCK": wrong_key}
    async with ProviderRegistry(environ=wrong) as providers:
        with pytest.raises(LLMHTTPError) as caught:
            await providers.client("bedrock").complete(ask())
    assert caught.value.status == 403
    assert wrong_key not in str(caught.value)


def test_aws_secrets_are_registered_for_redaction() -> None:
    found = secrets_from(
        {
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_SESSION_TOKEN": TOKEN,
            "AWS_BEARER_TOKEN_BEDROCK": "bedrock-api-key-0001",
            "AWS_REGION": "eu-west-1",
        }
    )
    assert found == {SECRET, TOKEN, "bedrock-api-key-0001"}


async def test_an_error_body_names_the_problem_and_a_throttle_is_retried(clock: Any) -> None:
    """AWS's error JSON is ``{"message": ...}``; 429 is retried, a 400 is not."""
    rules = [
        ServerRule([ServerReply(status=429), "recovered"], match=RequestMatch(user="retry")),
        ServerRule(
            [ServerReply(status=400, body='{"message": "The model id is not valid."}')],
        ),
    ]
    with ScriptedLLMServer(rules, wire="bedrock", api_key=SECRET) as server:
        async with ProviderRegistry(environ=server.environ(), clock=clock) as providers:
            client = providers.client("bedrock")
            retried = await client.complete(ask("retry"))
            with pytest.raises(LLMHTTPError) as caught:
                await client.complete(ask("fail"))
    assert (retried.content, retried.attempts) == ("recovered", 2)
    assert caught.value.status == 400
    assert "HTTP 400 (after 1 attempt): The model id is not valid." in str(caught.value)


async def test_missing_credentials_are_named_before_a_run() -> None:
    async with ProviderRegistry(environ={}) as providers:
        with pytest.raises(
            LLMConfigError, match=r"AWS_ACCESS_KEY_ID \(or AWS_BEARER_TOKEN_BEDROCK\)"
        ):
            providers.check(f"bedrock/{MODEL}")
    async with ProviderRegistry(environ={"AWS_ACCESS_KEY_ID": "AKID"}) as providers:
        with pytest.raises(LLMConfigError, match="AWS_SECRET_ACCESS_KEY is not set"):
            providers.check(f"bedrock/{MODEL}")


@pytest.mark.parametrize(
    ("environ", "url"),
    [
        ({}, "https://bedrock-runtime.us-east-1.amazonaws.com"),
        ({"AWS_DEFAULT_REGION": "eu-west-1"}, "https://bedrock-runtime.eu-west-1.amazonaws.com"),
        (
            {"AWS_REGION": "ap-south-1", "AWS_DEFAULT_REGION": "eu-west-1"},
            "https://bedrock-runtime.ap-south-1.amazonaws.com",
        ),
        ({"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "http://127.0.0.1:9"),
        (
            {
                "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
                "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "http://127.0.0.1:8",
            },
            "http://127.0.0.1:8",
        ),
        (
            {
                "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
                "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true",
            },
            "https://bedrock-runtime.us-east-1.amazonaws.com",
        ),
    ],
)
async def test_the_endpoint_is_found_as_the_aws_sdks_find_it(
    environ: dict[str, str], url: str
) -> None:
    keys = {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": SECRET}
    async with ProviderRegistry(environ=keys | environ) as providers:
        client = providers.client("bedrock")
    assert (
        repr(client) == f"HTTPModelClient(provider='bedrock', url='{url}/model/{{model}}/converse')"
    )


def test_the_event_stream_parser_reads_events_and_refuses_exceptions_and_corruption() -> None:
    """botocore decodes the framing; an exception message is a StreamError, a bad CRC malformed."""
    delta = event_stream_message(
        {":event-type": "contentBlockDelta", ":message-type": "event"},
        b'{"contentBlockIndex":0,"delta":{"text":"Hi"}}',
    )
    parser = AWSEventStreamParser()
    assert parser.feed(delta[:10]) == []  # half a prelude: nothing yet
    assert parser.feed(delta[10:]) == [
        b'{"contentBlockDelta":{"contentBlockIndex":0,"delta":{"text":"Hi"}}}'
    ]
    throttled = event_stream_message(
        {":exception-type": "throttlingException", ":message-type": "exception"},
        b'{"message":"Too many requests"}',
    )
    with pytest.raises(StreamError, match="throttlingException: Too many requests"):
        AWSEventStreamParser().feed(throttled)
    corrupt = delta[:-1] + bytes([delta[-1] ^ 1])
    with pytest.raises(LLMResponseError, match="malformed event-stream message"):
        AWSEventStreamParser().feed(corrupt)


async def test_a_stream_broken_off_by_an_exception_is_retried(clock: Any) -> None:
    """A throttlingException mid-stream is retried, as a 429 is."""
    throttled = event_stream_message(
        {":exception-type": "throttlingException", ":message-type": "exception"},
        b'{"message":"slow down"}',
    )
    done = [
        event_stream_message({":event-type": kind, ":message-type": "event"}, payload)
        for kind, payload in (
            ("contentBlockDelta", b'{"contentBlockIndex":0,"delta":{"text":"ok"}}'),
            ("messageStop", b'{"stopReason":"end_turn"}'),
            ("metadata", b'{"usage":{"inputTokens":3,"outputTokens":1}}'),
        )
    ]
    answers = iter([throttled, b"".join(done)])

    def answer(request: httpx.Request) -> httpx.Response:
        kind = {"content-type": "application/vnd.amazon.eventstream"}
        return httpx.Response(200, headers=kind, content=next(answers))

    environ = {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": SECRET}
    transport = httpx.MockTransport(answer)
    async with ProviderRegistry(environ=environ, transport=transport, clock=clock) as providers:
        completion = await providers.client("bedrock").complete(
            ask(), on_delta=lambda text, attempt: None
        )
    assert (completion.content, completion.attempts) == ("ok", 2)
    assert completion.usage == LLMUsage(3, 1)
    assert completion.tool_calls == ()


async def test_without_botocore_a_bedrock_model_is_refused_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "botocore", None)  # import botocore now fails
    environ = {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": SECRET}
    async with ProviderRegistry(environ=environ) as providers:
        with pytest.raises(
            LLMConfigError, match=r"needs botocore: pip install 'cadenza\[bedrock\]'"
        ):
            providers.check(f"bedrock/{MODEL}")
