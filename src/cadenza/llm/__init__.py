"""Model providers: one ``LLMClient`` interface over every provider's API, and scripts.

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

The registry (and httpx with it) loads on first use: ``parse_model`` and the
provider table cost ``cadenza validate`` no HTTP client.
"""

import importlib as _importlib
import typing as _typing

from ._errors import LLMConfigError as LLMConfigError
from ._errors import LLMConnectionError as LLMConnectionError
from ._errors import LLMError as LLMError
from ._errors import LLMHTTPError as LLMHTTPError
from ._errors import LLMResponseError as LLMResponseError
from ._errors import LLMTimeout as LLMTimeout
from ._prices import DEFAULT_PRICES as DEFAULT_PRICES
from ._prices import PRICES_CHECKED as PRICES_CHECKED
from ._prices import Price as Price
from ._prices import PriceTable as PriceTable
from ._prices import usd as usd
from ._retry import RetryPolicy as RetryPolicy
from ._scripted import ScriptedClient as ScriptedClient
from ._scripted import ScriptReplyLike as ScriptReplyLike
from ._specs import DEFAULT_PROVIDER_VARIABLE as DEFAULT_PROVIDER_VARIABLE
from ._specs import PROVIDERS as PROVIDERS
from ._specs import key_variable as key_variable
from ._specs import missing_variable as missing_variable
from ._specs import parse_model as parse_model
from ._types import THINKING_LEVELS as THINKING_LEVELS
from ._types import CallHooks as CallHooks
from ._types import Completion as Completion
from ._types import DeltaHook as DeltaHook
from ._types import LLMClient as LLMClient
from ._types import LLMRequest as LLMRequest
from ._types import LLMUsage as LLMUsage
from ._types import Message as Message
from ._types import ModelToolCall as ModelToolCall
from ._types import Reasoning as Reasoning
from ._types import RetryHook as RetryHook
from ._types import Role as Role
from ._types import Thinking as Thinking
from ._types import ToolSpec as ToolSpec

if _typing.TYPE_CHECKING:
    from ._registry import ProviderRegistry as ProviderRegistry


def __getattr__(name: str) -> _typing.Any:
    if name != "ProviderRegistry":
        raise AttributeError(f"module 'cadenza.llm' has no attribute {name!r}")
    value = _importlib.import_module("._registry", __name__).ProviderRegistry
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_PRICES",
    "DEFAULT_PROVIDER_VARIABLE",
    "PRICES_CHECKED",
    "PROVIDERS",
    "THINKING_LEVELS",
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
    "ModelToolCall",
    "Price",
    "PriceTable",
    "ProviderRegistry",
    "Reasoning",
    "RetryHook",
    "RetryPolicy",
    "Role",
    "ScriptReplyLike",
    "ScriptedClient",
    "Thinking",
    "ToolSpec",
    "key_variable",
    "missing_variable",
    "parse_model",
    "usd",
]
