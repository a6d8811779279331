"""Model providers: one ``LLMClient`` interface over OpenAI, Anthropic, Ollama and scripts.

A run opens one ``ProviderRegistry``; agents get clients from it by provider
and send provider-neutral ``LLMRequest``s, getting ``Completion``s back::

    async with ProviderRegistry(environ=os.environ, clock=clock) as providers:
        provider, model = providers.check("openai:gpt-4o-mini")
        client = providers.client(provider, key="writer")
        completion = await client.complete(
            LLMRequest(model=model, messages=(Message("user", "Hello"),))
        )

HTTP providers retry 429, 5xx, connection errors and timeouts with jittered
exponential backoff (honouring ``Retry-After``), bound every attempt by a
deadline on the run's clock, and cap response bodies. API keys never appear
in errors, reprs or logs.
"""

from ._errors import LLMConfigError as LLMConfigError
from ._errors import LLMConnectionError as LLMConnectionError
from ._errors import LLMError as LLMError
from ._errors import LLMHTTPError as LLMHTTPError
from ._errors import LLMResponseError as LLMResponseError
from ._errors import LLMTimeout as LLMTimeout
from ._registry import PROVIDERS as PROVIDERS
from ._registry import ProviderRegistry as ProviderRegistry
from ._registry import parse_model as parse_model
from ._retry import RetryPolicy as RetryPolicy
from ._scripted import ScriptReplyLike as ScriptReplyLike
from ._types import CallHooks as CallHooks
from ._types import Completion as Completion
from ._types import DeltaHook as DeltaHook
from ._types import LLMClient as LLMClient
from ._types import LLMRequest as LLMRequest
from ._types import LLMUsage as LLMUsage
from ._types import Message as Message
from ._types import RetryHook as RetryHook
from ._types import Role as Role
from ._types import ToolCall as ToolCall
from ._types import ToolSpec as ToolSpec

__all__ = [
    "PROVIDERS",
    "CallHooks",
    "Completion",
    "DeltaHook",
    "LLMClient",
    "LLMConfigError",
    "LLMConnectionError",
    "LLMError",
    "LLMHTTPError",
    "LLMRequest",
    "LLMResponseError",
    "LLMTimeout",
    "LLMUsage",
    "Message",
    "ProviderRegistry",
    "RetryHook",
    "RetryPolicy",
    "Role",
    "ScriptReplyLike",
    "ToolCall",
    "ToolSpec",
    "parse_model",
]
