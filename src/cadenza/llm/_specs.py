"""Model specs: the providers Cadenza knows and how a spec names one (``provider:model``).

This is the one table of providers (the registry builds clients for them, and
``cadenza validate`` checks documents against it); it imports no HTTP client, so
checking a spec costs no more than reading this module.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Final

from ._errors import LLMConfigError

__all__ = [
    "DEFAULT_PROVIDER_VARIABLE",
    "PROVIDERS",
    "VERTEX_CLAUDE",
    "VERTEX_CREDENTIALS",
    "VERTEX_LOCATION",
    "VERTEX_PROJECT",
    "Provider",
    "hint",
    "http_provider",
    "key_variable",
    "key_variables",
    "parse_model",
]


@dataclass(frozen=True, slots=True)
class Provider:
    """One provider of models: how to reach it, and which of its names are its own.

    Attributes:
        name: What a model spec names (``openai`` in ``openai:gpt-4o``).
        wire: The API family it speaks: the module ``cadenza/llm/_<wire>.py``,
            whose ``WIRE`` is the `WireFormat` (``openai``: Chat Completions).
        url_variable: The variable that moves its base URL (``OPENAI_BASE_URL``).
        default_url: Its base URL when that variable is not set.
        key_variable: The variable holding its API key; None when it needs none.
        bare_prefixes: Bare model names it serves natively (``gpt-``), as zenflow
            places them.
        url_suffix: Appended to the base URL (``/v1`` for ollama's OpenAI API).
        bare_host: Whether the variable may give a bare ``host:port`` (ollama's
            ``OLLAMA_HOST`` may, as ollama allows): ``http://`` is put before it.
        also_keys: Other variables that may hold the key, read after
            ``key_variable`` (zenflow reads two for Gemini).
        variables: Other variables its client reads (Vertex AI's project,
            region and credentials); the registry keeps them for it.
    """

    name: str
    wire: str
    url_variable: str
    default_url: str
    key_variable: str | None = None
    bare_prefixes: tuple[str, ...] = ()
    url_suffix: str = ""
    bare_host: bool = False
    also_keys: tuple[str, ...] = ()
    variables: tuple[str, ...] = ()


# Google's native wires: where Vertex AI finds its project and region (the first
# variable set wins; zenflow's, then the Anthropic SDK's for Claude) and its token.
VERTEX_PROJECT: Final = ("GOOGLE_VERTEX_PROJECT", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT")
VERTEX_LOCATION: Final = ("GOOGLE_VERTEX_LOCATION", "GOOGLE_CLOUD_LOCATION")
VERTEX_CLAUDE: Final = ("ANTHROPIC_VERTEX_PROJECT_ID", "CLOUD_ML_REGION")
VERTEX_CREDENTIALS: Final = ("GOOGLE_OAUTH_ACCESS_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS")
_VERTEX_HOST: Final = "https://{location}-aiplatform.googleapis.com"


# The providers served over HTTP. An OpenAI-compatible one is a line here; a new
# API family is a module ``_<wire>.py`` (its ``WIRE``) and a line here.
_TABLE: Final = (
    Provider(
        "anthropic",
        "anthropic",
        "ANTHROPIC_BASE_URL",
        "https://api.anthropic.com",
        "ANTHROPIC_API_KEY",
        ("claude-",),
    ),
    # Google's native wires
    Provider(
        "google",
        "gemini",
        "GOOGLE_GENERATIVE_AI_BASE_URL",
        "https://generativelanguage.googleapis.com",
        "GOOGLE_GENERATIVE_AI_API_KEY",
        ("gemini-",),
        also_keys=("GEMINI_API_KEY",),
    ),
    Provider(
        "vertex",
        "vertex",
        "GOOGLE_VERTEX_BASE_URL",
        _VERTEX_HOST,
        variables=VERTEX_PROJECT + VERTEX_LOCATION + VERTEX_CREDENTIALS,
    ),
    Provider(
        "vertex-anthropic",
        "vertex_anthropic",
        "GOOGLE_VERTEX_BASE_URL",
        _VERTEX_HOST,
        variables=VERTEX_PROJECT + VERTEX_LOCATION + VERTEX_CLAUDE + VERTEX_CREDENTIALS,
    ),
    Provider(
        "ollama",
        "openai",
        "OLLAMA_HOST",
        "http://127.0.0.1:11434",
        url_suffix="/v1",
        bare_host=True,
    ),
    Provider(
        "openai",
        "openai",
        "OPENAI_BASE_URL",
        "https://api.openai.com/v1",
        "OPENAI_API_KEY",
        ("gpt-", "chatgpt-", "o1", "o3", "o4"),
    ),
)
_BY_NAME: Final = {entry.name: entry for entry in _TABLE}

PROVIDERS: Final = tuple(sorted([*_BY_NAME, "scripted"]))
"""The providers a model spec may name (``scripted`` runs an agent's script, no model)."""

DEFAULT_PROVIDER_VARIABLE: Final = "CADENZA_DEFAULT_PROVIDER"
"""Names the provider of bare model names no well-known prefix places (e.g. ``ollama``)."""

# zenflow's provider prefixes that Cadenza has no client for (they need their own
# cloud credentials there too): served through CADENZA_DEFAULT_PROVIDER's gateway.
_GATEWAY_PROVIDERS: Final = frozenset({
    "azure", "azure-deployment", "bedrock", "cerebras", "cloudflare", "cohere", "compat",
    "deepinfra", "deepseek", "fireworks", "fptcloud", "groq", "minimax", "mistral",
    "nvidia", "openrouter", "perplexity", "runpod", "together", "vllm", "xai",
})  # fmt: skip


def http_provider(name: str) -> Provider | None:
    """The HTTP provider called ``name``; None for ``scripted`` or an unknown name."""
    return _BY_NAME.get(name)


def parse_model(spec: str, *, default_provider: str | None = None) -> tuple[str, str]:
    """Split a model spec into ``(provider, model)``.

    ``openai:gpt-4o-mini`` and zenflow's ``openai/gpt-4o-mini`` both give
    ``("openai", "gpt-4o-mini")``; the first ``:`` or ``/`` separates, so
    ``ollama:llama3.1:8b`` keeps its tag. A bare ``scripted`` is allowed and
    gives ``("scripted", "scripted")``: a script has no model to name.

    A bare model name, as zenflow's documents write them, is placed as zenflow
    places it: ``gpt-*``, ``o1``/``o3``/``o4*`` go to ``openai``, ``claude-*``
    to ``anthropic`` and ``gemini-*`` to ``google``; any other bare name goes
    to ``default_provider`` (the ``CADENZA_DEFAULT_PROVIDER`` variable), and
    without one it is an error: names like ``llama3`` are served by many
    providers, and guessing would be wrong as often as right. zenflow's other
    provider prefixes (``bedrock/``, ``groq/``...), for which Cadenza has no
    client, go to ``default_provider`` too (an OpenAI-compatible gateway,
    typically), with the whole name as the model; without one they are an
    error that says so.

    Raises:
        LLMConfigError: No provider, no model, or a provider that is not one of
            ``PROVIDERS`` (the message lists them and suggests a close match).
    """
    text = spec.strip()
    if text.lower() == "scripted":
        return "scripted", "scripted"
    cuts = [i for i in (text.find(":"), text.find("/")) if i >= 0]
    cut = min(cuts, default=-1)
    if cut < 0 and text:
        return _bare(spec, text, default_provider), text
    if cut <= 0:
        raise LLMConfigError(
            f"model {spec!r} names no provider; write provider:model, e.g. openai:gpt-4o-mini "
            f"({_known()})"
        )
    provider, model = text[:cut].lower(), text[cut + 1 :]
    if provider in _GATEWAY_PROVIDERS and provider not in PROVIDERS:
        if not default_provider:
            raise LLMConfigError(
                f"model {spec!r}: Cadenza has no {provider!r} client; set "
                f"{DEFAULT_PROVIDER_VARIABLE} (e.g. openai, with OPENAI_BASE_URL at a "
                f"gateway that serves {provider} models) or write provider:model ({_known()})"
            )
        return _default(default_provider), text
    if provider not in PROVIDERS:
        raise LLMConfigError(f"unknown provider {provider!r} in model {spec!r}{hint(provider)}")
    if not model:
        raise LLMConfigError(f"model {spec!r} names no model after the provider {provider!r}")
    return provider, model


def key_variable(provider: str) -> str | None:
    """The environment variable that holds ``provider``'s API key; None if it needs none."""
    entry = _BY_NAME.get(provider)
    return None if entry is None else entry.key_variable


def key_variables(provider: str) -> tuple[str, ...]:
    """Every variable that may hold ``provider``'s API key, the one read first first."""
    entry = _BY_NAME.get(provider)
    if entry is None or entry.key_variable is None:
        return ()
    return (entry.key_variable, *entry.also_keys)


def _bare(spec: str, name: str, default_provider: str | None) -> str:
    """The provider of a bare model name (see `parse_model`)."""
    lowered = name.lower()
    for entry in _TABLE:
        if lowered.startswith(entry.bare_prefixes):
            return entry.name
    if default_provider:
        return _default(default_provider)
    raise LLMConfigError(
        f"model {spec!r} names no provider; write provider:model, e.g. openai:{name}, or set "
        f"{DEFAULT_PROVIDER_VARIABLE} for bare names ({_known()})"
    )


def _default(default_provider: str) -> str:
    """``CADENZA_DEFAULT_PROVIDER``'s provider, checked."""
    provider = default_provider.strip().lower()
    if provider not in PROVIDERS:
        raise LLMConfigError(
            f"unknown provider {provider!r} in {DEFAULT_PROVIDER_VARIABLE}{hint(provider)}"
        )
    return provider


def _known() -> str:
    return "known providers: " + ", ".join(PROVIDERS)


def hint(provider: str) -> str:
    """``; did you mean 'openai'? (known providers: ...)`` for an unknown provider."""
    close = difflib.get_close_matches(provider, PROVIDERS, n=1)
    suggestion = f"; did you mean {close[0]!r}?" if close else ""
    return f"{suggestion} ({_known()})"
