"""A canary API key never shows in errors, reprs or logs, even when the server echoes it."""

from __future__ import annotations

import logging

import pytest

from cadenza._logging import FIELDS
from cadenza.kernel import Clock
from cadenza.llm import LLMError, LLMRequest, Message, ProviderRegistry, RetryPolicy
from cadenza.testing import ServerRule
from cadenza.testing.pytest_plugin import StartLLMServer
from tests.llm._providers import CASES, Case, environ_for

CANARY = "canary-7f3a9c41e2b8d605"


async def test_canary_key_is_never_shown(
    llm_server: StartLLMServer, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """401 and 500 bodies that echo the key reach the caller with the key masked."""
    echo = f'{{"error": {{"message": "Incorrect API key provided: {CANARY}"}}}}'
    server = llm_server(
        [
            ServerRule([{"status": 401, "body": echo}], match={"model": "gpt-401"}),
            ServerRule([{"status": 500, "body": f"upstream said Bearer {CANARY}"}]),
        ]
    )
    environ = server.environ(api_key=CANARY)
    request = LLMRequest("gpt-401", (Message("user", "hi"),))
    errors: list[LLMError] = []
    with caplog.at_level(logging.DEBUG, logger="cadenza"):
        async with ProviderRegistry(
            environ=environ, clock=clock, policy=RetryPolicy(max_attempts=2)
        ) as providers:
            client = providers.client("openai")
            for model in ("gpt-401", "gpt-500"):
                try:
                    await client.complete(LLMRequest(model, request.messages))
                except LLMError as error:
                    errors.append(error)
            shown = [repr(providers), repr(client), *map(str, errors), *map(repr, errors)]
    assert [type(e).__name__ for e in errors] == ["LLMHTTPError", "LLMHTTPError"]
    assert "Incorrect API key provided: ***" in str(errors[0])
    assert "upstream said Bearer ***" in str(errors[1])
    assert server.requests[0].headers["authorization"] == f"Bearer {CANARY}"
    logs = [f"{r.getMessage()} {getattr(r, FIELDS)!r}" for r in caplog.records]
    assert logs  # every attempt is logged at debug level
    for text in [*shown, *logs]:
        assert CANARY not in text


@pytest.mark.parametrize("case", [c for c in CASES if c.key_variable], ids=lambda c: c.key_variable)
async def test_every_providers_key_is_masked_when_its_server_echoes_it(
    case: Case, llm_server: StartLLMServer, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """The attacker's way: a server that puts the key in its error body, as JSON and as text.

    For each provider's key variable (CLOUDFLARE_API_TOKEN, AZURE_OPENAI_API_KEY...),
    the error a user sees, the reprs and the debug logs show the key masked.
    """
    echo = f'{{"error": {{"message": "key {CANARY} has no access", "type": "auth"}}}}'
    server = llm_server(
        [
            ServerRule([{"status": 401, "body": echo}], match={"model": "m-401"}),
            ServerRule([{"status": 503, "body": f"<html>api-key: {CANARY}</html>"}]),
        ],
        wire=case.wire,  # type: ignore[arg-type]
    )
    errors: list[LLMError] = []
    with caplog.at_level(logging.DEBUG, logger="cadenza"):
        async with ProviderRegistry(
            environ=environ_for(case, server.url, key=CANARY),
            clock=clock,
            policy=RetryPolicy(max_attempts=2),
        ) as providers:
            client = providers.client(case.provider)
            for model in ("m-401", "m-503"):
                with pytest.raises(LLMError) as caught:
                    await client.complete(LLMRequest(model, (Message("user", "hi"),)))
                errors.append(caught.value)
            shown = [repr(providers), repr(client), *map(str, errors), *map(repr, errors)]
    assert "key *** has no access" in str(errors[0])
    assert "api-key: ***" in str(errors[1])
    assert case.header is not None
    assert CANARY in server.requests[0].headers[case.header]  # the key was sent, and only there
    logs = [f"{r.getMessage()} {getattr(r, FIELDS)!r}" for r in caplog.records]
    for text in [*shown, *logs]:
        assert CANARY not in text
