"""Model specs: ``provider:model`` and zenflow's ``provider/model``."""

from __future__ import annotations

import pytest

from cadenza.llm import PROVIDERS, LLMConfigError, ProviderRegistry, parse_model


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("openai:gpt-4o-mini", ("openai", "gpt-4o-mini")),
        ("openai/gpt-4o-mini", ("openai", "gpt-4o-mini")),
        ("anthropic:claude-3-5-haiku-latest", ("anthropic", "claude-3-5-haiku-latest")),
        ("ollama:llama3.1:8b", ("ollama", "llama3.1:8b")),
        ("openai/meta-llama/Llama-3-8b", ("openai", "meta-llama/Llama-3-8b")),
        ("OpenAI:gpt-4o", ("openai", "gpt-4o")),
        ("scripted:demo", ("scripted", "demo")),
        ("scripted", ("scripted", "scripted")),
    ],
)
def test_splits_at_the_first_separator(spec: str, expected: tuple[str, str]) -> None:
    """The first ``:`` or ``/`` separates provider and model; the model keeps the rest."""
    assert parse_model(spec) == expected


def test_unknown_provider_lists_the_known_ones() -> None:
    """An unknown provider is a config error that names every known provider and a close match."""
    with pytest.raises(LLMConfigError) as caught:
        parse_model("opnai:gpt-4o")
    message = str(caught.value)
    assert "'opnai'" in message
    assert "did you mean 'openai'" in message
    for provider in PROVIDERS:
        assert provider in message


@pytest.mark.parametrize("spec", [":gpt-4o", "openai:", "", "llama3"])
def test_rejects_specs_without_provider_or_model(spec: str) -> None:
    """A spec must name both a provider and a model (a bare name outside the known families too)."""
    with pytest.raises(LLMConfigError, match="names no"):
        parse_model(spec)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("claude-sonnet-4-6", ("anthropic", "claude-sonnet-4-6")),
        ("gpt-4o-mini", ("openai", "gpt-4o-mini")),
        ("o3-mini", ("openai", "o3-mini")),
        ("gemini-2.5-flash", ("google", "gemini-2.5-flash")),
    ],
)
def test_bare_zenflow_names_go_to_their_makers(spec: str, expected: tuple[str, str]) -> None:
    """zenflow's documents write bare names; the well-known families are placed as zenflow does."""
    assert parse_model(spec) == expected


@pytest.mark.parametrize("prefix", ["bedrock", "google", "vertex", "vertex-anthropic", "groq"])
def test_every_zenflow_prefix_resolves_natively(prefix: str) -> None:
    """No zenflow prefix goes to a gateway any more: each is its own provider, default or not."""
    spec = f"{prefix}/some-model@2025"
    assert parse_model(spec) == (prefix, "some-model@2025")
    assert parse_model(spec, default_provider="openai") == (prefix, "some-model@2025")


def test_bedrock_has_its_own_client() -> None:
    """``bedrock/`` speaks Bedrock's own wire, whatever the default provider."""
    spec = "bedrock/anthropic.claude-sonnet-4-6"
    assert parse_model(spec, default_provider="openai") == (
        "bedrock",
        "anthropic.claude-sonnet-4-6",
    )
    assert parse_model("bedrock:us.anthropic.claude-3-5-sonnet-20240620-v1:0") == (
        "bedrock",
        "us.anthropic.claude-3-5-sonnet-20240620-v1:0",
    )


def test_other_bare_names_go_to_the_default_provider() -> None:
    assert parse_model("llama3", default_provider="ollama") == ("ollama", "llama3")
    with pytest.raises(LLMConfigError, match="CADENZA_DEFAULT_PROVIDER"):
        parse_model("llama3", default_provider="olama")


async def test_the_registry_reads_the_default_provider_from_the_environment() -> None:
    environ = {"CADENZA_DEFAULT_PROVIDER": "openai", "OPENAI_API_KEY": "k"}
    async with ProviderRegistry(environ=environ) as providers:
        assert providers.check("qwen2.5-coder") == ("openai", "qwen2.5-coder")


async def test_check_answers_the_same_every_time() -> None:
    """``check`` remembers a passed spec; a failing one fails again, every time."""
    async with ProviderRegistry(environ={"OPENAI_API_KEY": "k"}) as providers:
        assert providers.check("openai:gpt-4o") == ("openai", "gpt-4o")
        assert providers.check("openai:gpt-4o") == ("openai", "gpt-4o")
        for _ in range(2):
            with pytest.raises(LLMConfigError, match="ANTHROPIC_API_KEY is not set"):
                providers.check("anthropic:claude")
            with pytest.raises(LLMConfigError, match="unknown provider"):
                providers.check("nope:model")
