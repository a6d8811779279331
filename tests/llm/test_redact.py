"""Redaction of secrets in text and in structlog events."""

from __future__ import annotations

from typing import Any

import pytest

from cadenza._redact import redact, redact_processor, register_secret, secrets_from


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("key sk-proj-abcdefghijklmnop is wrong", "key sk-*** is wrong"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.x", "Authorization: ***"),
        ("sent Bearer eyJhbGciOiJIUzI1NiJ9.e30.x", "sent Bearer ***"),
        ('{"api_key": "hunter2-hunter2", "model": "m"}', '{"api_key": "***", "model": "m"}'),
        ("OPENAI_API_KEY=abc123def456 next", "OPENAI_API_KEY=*** next"),
        ("{'x-api-key': 'abcdefgh'}", "{'x-api-key': '***'}"),
        ("https://h/v1?access_token=abcdef123&x=1", "https://h/v1?access_token=***&x=1"),
        ('"prompt_tokens": 12, "max_tokens": 40', '"prompt_tokens": 12, "max_tokens": 40'),
        ("nothing secret here", "nothing secret here"),
    ],
)
def test_masks_credential_shapes(text: str, expected: str) -> None:
    """sk- keys, bearer tokens and credential-named values are masked; other text is kept."""
    assert redact(text) == expected


def test_masks_given_and_registered_secrets() -> None:
    """Exact secret values are masked wherever they appear, given or registered."""
    assert redact("echo: plain-canary-123 end", ["plain-canary-123"]) == "echo: *** end"
    register_secret("registered-canary-456")
    assert redact("x registered-canary-456 y") == "x *** y"
    assert redact("short ab stays", ["ab"]) == "short ab stays"


def test_secrets_come_from_key_and_token_variables() -> None:
    """Variables named *_API_KEY or *_TOKEN are secrets; other variables are not."""
    environ = {
        "OPENAI_API_KEY": "openai-secret",
        "GITHUB_TOKEN": "ghp_tokenvalue",
        "OPENAI_BASE_URL": "http://example",
    }
    assert secrets_from(environ) == {"openai-secret", "ghp_tokenvalue"}


def test_processor_redacts_every_string_in_the_event() -> None:
    """Nested strings are redacted and credential-named fields are masked whole."""
    register_secret("processor-canary-789")
    event: dict[str, Any] = {
        "event": "call failed: processor-canary-789",
        "authorization": "Bearer short",
        "detail": {"body": ["sk-abcdefghijklmno", 3], "api_key": "k"},
        "attempt": 2,
    }
    assert redact_processor(None, "info", event) == {
        "event": "call failed: ***",
        "authorization": "***",
        "detail": {"body": ["sk-***", 3], "api_key": "***"},
        "attempt": 2,
    }
