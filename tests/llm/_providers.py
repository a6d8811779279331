"""The providers as a user configures them, for the tests of each prefix."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CASES", "KEY", "Case", "environ_for"]

KEY = "key-5d1e0c7a9b"


@dataclass(frozen=True)
class Case:
    """A provider as a user configures it, and what its server must see."""

    provider: str
    wire: str  # the scripted server's: openai or anthropic
    url_variable: str  # set to the server's root + ``mount``
    key_variable: str | None  # set to KEY; None: the provider takes no key
    path: str  # the request's path (and query) on the server
    header: str | None = "authorization"  # where the key goes
    scheme: str = "Bearer "
    mount: str = ""  # a path under the server's root, to tell the base URL was used
    bare_host: bool = False  # the variable takes host:port (OLLAMA_HOST)


def compatible(provider: str, key: str, url: str) -> Case:
    """An OpenAI-compatible provider, its base URL mounted at ``/<provider>/v1``."""
    return Case(
        provider, "openai", url, key, f"/{provider}/v1/chat/completions", mount=f"/{provider}/v1"
    )


CASES = [
    Case("anthropic", "anthropic", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "/v1/messages",
         header="x-api-key", scheme=""),
    Case("azure", "openai", "AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY",
         "/openai/v1/chat/completions", header="api-key", scheme=""),
    Case("azure", "openai", "AZURE_OPENAI_ENDPOINT", "AZURE_API_KEY",
         "/openai/v1/chat/completions", header="api-key", scheme=""),
    Case("azure-deployment", "openai", "AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY",
         "/openai/deployments/m-1/chat/completions?api-version=2025-03-01-preview",
         header="api-key", scheme=""),
    compatible("cerebras", "CEREBRAS_API_KEY", "CEREBRAS_BASE_URL"),
    compatible("cloudflare", "CLOUDFLARE_API_TOKEN", "CLOUDFLARE_BASE_URL"),
    compatible("cohere", "COHERE_API_KEY", "COHERE_BASE_URL"),
    compatible("compat", "COMPAT_API_KEY", "COMPAT_BASE_URL"),
    Case("compat", "openai", "COMPAT_BASE_URL", None, "/v1/chat/completions", mount="/v1"),
    compatible("deepinfra", "DEEPINFRA_API_KEY", "DEEPINFRA_BASE_URL"),
    compatible("deepseek", "DEEPSEEK_API_KEY", "DEEPSEEK_BASE_URL"),
    compatible("fireworks", "FIREWORKS_API_KEY", "FIREWORKS_BASE_URL"),
    compatible("fptcloud", "FPT_API_KEY", "FPT_BASE_URL"),
    compatible("groq", "GROQ_API_KEY", "GROQ_BASE_URL"),
    Case("minimax", "anthropic", "MINIMAX_BASE_URL", "MINIMAX_API_KEY",
         "/anthropic/v1/messages", header="x-api-key", scheme="", mount="/anthropic"),
    compatible("mistral", "MISTRAL_API_KEY", "MISTRAL_BASE_URL"),
    compatible("nvidia", "NVIDIA_API_KEY", "NVIDIA_BASE_URL"),
    Case("ollama", "openai", "OLLAMA_HOST", None, "/v1/chat/completions", bare_host=True),
    compatible("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
    compatible("openrouter", "OPENROUTER_API_KEY", "OPENROUTER_BASE_URL"),
    compatible("perplexity", "PERPLEXITY_API_KEY", "PERPLEXITY_BASE_URL"),
    compatible("runpod", "RUNPOD_API_KEY", "RUNPOD_BASE_URL"),
    compatible("together", "TOGETHER_AI_API_KEY", "TOGETHER_AI_BASE_URL"),
    compatible("together", "TOGETHER_API_KEY", "TOGETHER_AI_BASE_URL"),
    compatible("vllm", "VLLM_API_KEY", "VLLM_BASE_URL"),
    Case("vllm", "openai", "VLLM_BASE_URL", None, "/v1/chat/completions", mount="/v1"),
    compatible("xai", "XAI_API_KEY", "XAI_BASE_URL"),
]  # fmt: skip


def environ_for(case: Case, root: str, key: str = KEY) -> dict[str, str]:
    """The environment a user sets for ``case``, with the server at ``root``."""
    base = root.removeprefix("http://") if case.bare_host else root
    environ = {case.url_variable: base + case.mount}
    if case.key_variable is not None:
        environ[case.key_variable] = key
    return environ
