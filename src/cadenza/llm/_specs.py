"""Model specs: the providers Cadenza knows and how a spec names one (``provider:model``).

This is the one table of providers (the registry builds clients for them, and
``cadenza validate`` checks documents against it); it imports no HTTP client, so
checking a spec costs no more than reading this module.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
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
    "URLSetting",
    "fill_url",
    "hint",
    "http_provider",
    "key_variable",
    "missing_variable",
    "parse_model",
]


@dataclass(frozen=True, slots=True)
class URLSetting:
    """A variable with a default that fills ``{VARIABLE}`` in a provider's URL.

    Attributes:
        variable: The environment variable (``FPT_REGION``).
        default: Its value when it is not set.
        choices: The values it may take, each with the text it puts in the URL
            (``jp`` puts ``jp``, ``global`` puts ``com``); empty: any value, as is.
    """

    variable: str
    default: str
    choices: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Provider:
    """One provider of models: how to reach it, and which of its names are its own.

    A ``{VARIABLE}`` in ``default_url``, ``url_suffix`` or ``query`` is filled from
    the environment: by a `URLSetting` when one names it, else the variable is
    needed (Cloudflare's account id, RunPod's endpoint id) and a call without it
    fails naming it. ``{model}`` is the request's model (an Azure deployment).

    Attributes:
        name: What a model spec names (``openai`` in ``openai:gpt-4o``).
        wire: The API family it speaks: the module ``cadenza/llm/_<wire>.py``,
            whose ``WIRE`` is the `WireFormat` (``openai``: Chat Completions).
        url_variable: The variable that moves its base URL (``OPENAI_BASE_URL``).
        default_url: Its base URL when that variable is not set.
        key_variables: The variables holding its API key, the first set one used
            (``TOGETHER_AI_API_KEY``, then ``TOGETHER_API_KEY``); empty when it
            takes none.
        bare_prefixes: Bare model names it serves natively (``gpt-``), as zenflow
            places them.
        url_suffix: Appended to the base URL (``/v1`` for ollama's OpenAI API).
        bare_host: Whether the variable may give a bare ``host:port`` (ollama's
            ``OLLAMA_HOST`` may, as ollama allows): ``http://`` is put before it.
        key_optional: Whether a call goes without a key when none is set (a local
            server started with or without one: vLLM, ``compat``).
        query: Appended after the wire's path (Azure's ``?api-version=...``).
        settings: The URL's variables that have a default.
        variables: The other variables its wire reads (Bedrock's region,
            secret key, session token...).
    """

    name: str
    wire: str
    url_variable: str
    default_url: str
    key_variables: tuple[str, ...] = ()
    bare_prefixes: tuple[str, ...] = ()
    url_suffix: str = ""
    bare_host: bool = False
    key_optional: bool = False
    query: str = ""
    settings: tuple[URLSetting, ...] = ()
    variables: tuple[str, ...] = ()

    @property
    def key_variable(self) -> str | None:
        """The variable its key is asked for by (the first of ``key_variables``)."""
        return self.key_variables[0] if self.key_variables else None

    @property
    def url_variables(self) -> tuple[str, ...]:
        """Every variable its URL reads: the base URL's, then each ``{VARIABLE}``'s."""
        text = self.default_url + self.url_suffix + self.query
        return (self.url_variable, *dict.fromkeys(_placeholders(text)))


# Azure OpenAI: the resource's endpoint, or one built from its name.
_AZURE_ENDPOINT: Final = "https://{AZURE_RESOURCE_NAME}.openai.azure.com"
_AZURE_KEYS: Final = ("AZURE_OPENAI_API_KEY", "AZURE_API_KEY")
_AZURE_VERSION: Final = URLSetting("AZURE_OPENAI_API_VERSION", "2025-03-01-preview")

# Vertex AI: where its wires find the project and region (the first variable set
# wins; zenflow's, then the Anthropic SDK's for Claude) and the OAuth token.
VERTEX_PROJECT: Final = ("GOOGLE_VERTEX_PROJECT", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT")
VERTEX_LOCATION: Final = ("GOOGLE_VERTEX_LOCATION", "GOOGLE_CLOUD_LOCATION")
VERTEX_CLAUDE: Final = ("ANTHROPIC_VERTEX_PROJECT_ID", "CLOUD_ML_REGION")
VERTEX_CREDENTIALS: Final = ("GOOGLE_OAUTH_ACCESS_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS")
_VERTEX_HOST: Final = "https://us-central1-aiplatform.googleapis.com"


def _compatible(
    name: str,
    key_variable: str,
    url_variable: str,
    default_url: str,
    *,
    bare_prefixes: tuple[str, ...] = (),
    key_optional: bool = False,
    settings: tuple[URLSetting, ...] = (),
) -> Provider:
    """A provider of OpenAI's Chat Completions at its own URL, with a bearer key."""
    return Provider(
        name,
        "openai",
        url_variable,
        default_url,
        (key_variable,),
        bare_prefixes,
        key_optional=key_optional,
        settings=settings,
    )


# The providers served over HTTP, with zenflow's variables (its goai constructors
# read the same ones). An OpenAI-compatible one is a line here; a new API family is
# a module ``_<wire>.py`` (its ``WIRE``) and a line here.
_TABLE: Final = (
    Provider("anthropic", "anthropic", "ANTHROPIC_BASE_URL", "https://api.anthropic.com",
             ("ANTHROPIC_API_KEY",), ("claude-",)),
    # Azure's v1 API: one path for every model of the resource, no api-version.
    Provider("azure", "azure", "AZURE_OPENAI_ENDPOINT", _AZURE_ENDPOINT, _AZURE_KEYS,
             url_suffix="/openai/v1"),
    # The deployment-based API: the model is the deployment's name, in the path.
    Provider("azure-deployment", "azure", "AZURE_OPENAI_ENDPOINT", _AZURE_ENDPOINT, _AZURE_KEYS,
             url_suffix="/openai/deployments/{model}",
             query="?api-version={AZURE_OPENAI_API_VERSION}", settings=(_AZURE_VERSION,)),
    # Amazon Bedrock's native wire: the Converse API, signed with SigV4 (the
    # `bedrock` extra); credentials, region and endpoint as the AWS SDKs read them.
    Provider("bedrock", "bedrock", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
             "https://bedrock-runtime.us-east-1.amazonaws.com",
             ("AWS_ACCESS_KEY_ID", "AWS_BEARER_TOKEN_BEDROCK"),
             variables=("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK",
                        "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
                        "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")),
    _compatible("cerebras", "CEREBRAS_API_KEY", "CEREBRAS_BASE_URL", "https://api.cerebras.ai/v1"),
    _compatible("cloudflare", "CLOUDFLARE_API_TOKEN", "CLOUDFLARE_BASE_URL",
                "https://api.cloudflare.com/client/v4/accounts/{CLOUDFLARE_ACCOUNT_ID}/ai/v1"),
    # Cohere's Compatibility API (zenflow speaks its own v2 Chat API; same key).
    _compatible("cohere", "COHERE_API_KEY", "COHERE_BASE_URL",
                "https://api.cohere.ai/compatibility/v1"),
    # Any OpenAI-compatible server; zenflow's default is llama.cpp's llama-server.
    _compatible("compat", "COMPAT_API_KEY", "COMPAT_BASE_URL", "http://localhost:8080/v1",
                key_optional=True),
    _compatible("deepinfra", "DEEPINFRA_API_KEY", "DEEPINFRA_BASE_URL",
                "https://api.deepinfra.com/v1/openai"),
    _compatible("deepseek", "DEEPSEEK_API_KEY", "DEEPSEEK_BASE_URL", "https://api.deepseek.com"),
    _compatible("fireworks", "FIREWORKS_API_KEY", "FIREWORKS_BASE_URL",
                "https://api.fireworks.ai/inference/v1"),
    _compatible("fptcloud", "FPT_API_KEY", "FPT_BASE_URL", "https://mkp-api.fptcloud.{FPT_REGION}/v1",
                settings=(URLSetting("FPT_REGION", "global", (("global", "com"), ("jp", "jp"))),)),
    # Google's native wires: the Gemini API with a key; Vertex AI (Gemini, Claude)
    # with an OAuth token, its project and region in the path (the `vertex` extra).
    Provider("google", "gemini", "GOOGLE_GENERATIVE_AI_BASE_URL",
             "https://generativelanguage.googleapis.com",
             ("GOOGLE_GENERATIVE_AI_API_KEY", "GEMINI_API_KEY"), ("gemini-",)),
    _compatible("groq", "GROQ_API_KEY", "GROQ_BASE_URL", "https://api.groq.com/openai/v1"),
    # MiniMax recommends its Anthropic-compatible API, and zenflow speaks that one.
    Provider("minimax", "anthropic", "MINIMAX_BASE_URL", "https://api.minimax.io/anthropic",
             ("MINIMAX_API_KEY",)),
    _compatible("mistral", "MISTRAL_API_KEY", "MISTRAL_BASE_URL", "https://api.mistral.ai/v1"),
    _compatible("nvidia", "NVIDIA_API_KEY", "NVIDIA_BASE_URL",
                "https://integrate.api.nvidia.com/v1"),
    Provider("ollama", "openai", "OLLAMA_HOST", "http://127.0.0.1:11434", url_suffix="/v1",
             bare_host=True),
    _compatible("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL", "https://api.openai.com/v1",
                bare_prefixes=("gpt-", "chatgpt-", "o1", "o3", "o4")),
    _compatible("openrouter", "OPENROUTER_API_KEY", "OPENROUTER_BASE_URL",
                "https://openrouter.ai/api/v1"),
    _compatible("perplexity", "PERPLEXITY_API_KEY", "PERPLEXITY_BASE_URL",
                "https://api.perplexity.ai"),
    _compatible("runpod", "RUNPOD_API_KEY", "RUNPOD_BASE_URL",
                "https://api.runpod.ai/v2/{RUNPOD_ENDPOINT_ID}/openai/v1"),
    Provider("together", "openai", "TOGETHER_AI_BASE_URL", "https://api.together.xyz/v1",
             ("TOGETHER_AI_API_KEY", "TOGETHER_API_KEY")),
    Provider("vertex", "vertex", "GOOGLE_VERTEX_BASE_URL", _VERTEX_HOST,
             variables=VERTEX_PROJECT + VERTEX_LOCATION + VERTEX_CREDENTIALS),
    Provider("vertex-anthropic", "vertex_anthropic", "GOOGLE_VERTEX_BASE_URL", _VERTEX_HOST,
             variables=VERTEX_PROJECT + VERTEX_LOCATION + VERTEX_CLAUDE + VERTEX_CREDENTIALS),
    _compatible("vllm", "VLLM_API_KEY", "VLLM_BASE_URL", "http://localhost:8000/v1",
                key_optional=True),
    _compatible("xai", "XAI_API_KEY", "XAI_BASE_URL", "https://api.x.ai/v1",
                bare_prefixes=("grok-",)),
)  # fmt: skip
_BY_NAME: Final = {entry.name: entry for entry in _TABLE}

PROVIDERS: Final = tuple(sorted([*_BY_NAME, "scripted"]))
"""The providers a model spec may name (``scripted`` runs an agent's script, no model)."""

DEFAULT_PROVIDER_VARIABLE: Final = "CADENZA_DEFAULT_PROVIDER"
"""Names the provider of bare model names no well-known prefix places (e.g. ``ollama``)."""

_PLACEHOLDER: Final = re.compile(r"\{([A-Z][A-Z0-9_]*)\}")
# What a variable may put in a URL: an account id, an endpoint id, a resource name,
# an API version. Nothing that could end the host or the path early.
_URL_VALUE: Final = re.compile(r"(?!\.+\Z)[A-Za-z0-9._-]+\Z")  # not "..", a step up


def _placeholders(text: str) -> list[str]:
    return _PLACEHOLDER.findall(text)


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
    to ``anthropic``, ``gemini-*`` to ``google``, ``grok-*`` to ``xai``; any
    other bare name goes to ``default_provider`` (the ``CADENZA_DEFAULT_PROVIDER``
    variable), and without one it is an error: names like ``llama3`` are served
    by many providers, and guessing would be wrong as often as right.

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
    if provider not in PROVIDERS:
        raise LLMConfigError(f"unknown provider {provider!r} in model {spec!r}{hint(provider)}")
    if not model:
        raise LLMConfigError(f"model {spec!r} names no model after the provider {provider!r}")
    return provider, model


def key_variable(provider: str) -> str | None:
    """The environment variable that holds ``provider``'s API key; None if it takes none."""
    entry = _BY_NAME.get(provider)
    return None if entry is None else entry.key_variable


def missing_variable(provider: str, environ: Mapping[str, str]) -> str | None:
    """What ``provider`` needs that ``environ`` does not set; None when nothing is missing.

    Its API key (``TOGETHER_AI_API_KEY (or TOGETHER_API_KEY)``), unless it may go
    without one, then a variable its URL is built from
    (``CLOUDFLARE_ACCOUNT_ID (or CLOUDFLARE_BASE_URL)``): each named as a message
    goes on with ``is not set``.
    """
    entry = _BY_NAME.get(provider)
    if entry is None:
        return None
    keys = entry.key_variables
    if keys and not entry.key_optional and not any(environ.get(name) for name in keys):
        return keys[0] + "".join(f" (or {other})" for other in keys[1:])
    defaulted = {setting.variable for setting in entry.settings}
    if not environ.get(entry.url_variable):
        for variable in _placeholders(entry.default_url):
            if variable not in defaulted and not environ.get(variable):
                return f"{variable} (or {entry.url_variable})"
    for variable in _placeholders(entry.url_suffix + entry.query):
        if variable not in defaulted and not environ.get(variable):
            return variable
    return None


def fill_url(entry: Provider, text: str, environ: Mapping[str, str]) -> str:
    """``text`` (a part of ``entry``'s URL) with each ``{VARIABLE}`` filled from ``environ``.

    A variable without a value and without a default stays as it is: the
    call that would use the URL fails first, naming it (see `missing_variable`).

    Raises:
        LLMConfigError: A value that is not one of its setting's choices, or
            that holds characters that have no place in a URL's host or path.
    """
    settings = {setting.variable: setting for setting in entry.settings}

    def value(match: re.Match[str]) -> str:
        variable = match[1]
        setting = settings.get(variable)
        given = environ.get(variable) or (setting.default if setting is not None else "")
        if not given:
            return match[0]
        if setting is not None and setting.choices:
            choices = dict(setting.choices)
            if given.lower() not in choices:
                raise LLMConfigError(
                    f"{variable} must be one of {', '.join(choices)}, got {given!r}"
                )
            return choices[given.lower()]
        if _URL_VALUE.match(given) is None:
            raise LLMConfigError(
                f"{variable} goes in {entry.name}'s URL and must be letters, digits, "
                f"'.', '_' or '-', got {given!r}"
            )
        return given

    return _PLACEHOLDER.sub(value, text)


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
