"""What a model call costs: a price table in USD per million tokens.

The shipped table (`DEFAULT_PRICES`) holds the list prices of the common OpenAI,
Anthropic and Google models as their providers published them on
`PRICES_CHECKED`. Prices change, and a team may pay other prices: a workflow's
``prices:``, ``cadenza run --prices FILE`` and ``Runtime(prices=...)`` override
entries or add models (docs/prices.md). A `PriceTable` is the defaults under
those overrides, and answers "what does this call cost" or "this model has no
price" (None): a cost budget refuses a model it cannot price rather than guess.

A key names a model as a spec does (``openai:gpt-4o``; ``provider/model`` too).
A model matches its own key, or the longest key it extends past a ``-``, ``@``
or ``:`` (``claude-sonnet-4-20250514`` is ``claude-sonnet-4``'s dated snapshot;
``gpt-4.1`` is not ``gpt-4``'s), or a key ending in ``*`` that it starts with.
A bare key (``gpt-4o``, ``scripted``) names the model under any provider. The
providers that serve another's models price them as that one does: ``bedrock``'s
``us.anthropic.claude-sonnet-4-...-v1:0`` is Anthropic's ``claude-sonnet-4``,
``vertex``'s Gemini is Google's, ``azure``'s ``gpt-4o`` is OpenAI's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from ._types import LLMUsage

__all__ = ["DEFAULT_PRICES", "PRICES_CHECKED", "Price", "PriceTable", "usd"]

PRICES_CHECKED: Final = "2025-11"
"""When the shipped prices were last compared with the providers' price pages."""

_PER_TOKEN: Final = 1e-6


@dataclass(frozen=True, slots=True)
class Price:
    """A model's price in USD per million tokens.

    Attributes:
        input: Prompt tokens.
        output: Completion tokens (reasoning tokens are billed as these).
        cached_input: Prompt tokens the provider read from its cache; None: as ``input``.
    """

    input: float
    output: float
    cached_input: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input"):
            value = getattr(self, name)
            if value is not None and not value >= 0:  # NaN fails too
                raise ValueError(f"a price's {name} must be a number >= 0, not {value!r}")

    def cost(self, usage: LLMUsage) -> float:
        """USD one call with ``usage`` costs at this price."""
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        cached_price = self.input if self.cached_input is None else self.cached_input
        cost = (
            (usage.prompt_tokens - cached) * self.input
            + cached * cached_price
            + usage.completion_tokens * self.output
        ) * _PER_TOKEN
        return usd(cost)


def usd(amount: float) -> float:
    """A cost, or a sum of costs, as it is reported: rounded to 1e-10 USD, so 0.000945
    shows as that and not as 0.0009449999999999998."""
    return round(amount, 10)


def _p(input: float, output: float, cached: float | None = None) -> Price:
    return Price(input, output, cached)


DEFAULT_PRICES: Final[Mapping[str, Price]] = {
    # OpenAI (https://openai.com/api/pricing), standard tier.
    "openai:gpt-5": _p(1.25, 10.0, 0.125),
    "openai:gpt-5.1": _p(1.25, 10.0, 0.125),
    "openai:gpt-5-mini": _p(0.25, 2.0, 0.025),
    "openai:gpt-5-nano": _p(0.05, 0.40, 0.005),
    "openai:gpt-4.1": _p(2.0, 8.0, 0.50),
    "openai:gpt-4.1-mini": _p(0.40, 1.60, 0.10),
    "openai:gpt-4.1-nano": _p(0.10, 0.40, 0.025),
    "openai:gpt-4o": _p(2.50, 10.0, 1.25),
    "openai:gpt-4o-mini": _p(0.15, 0.60, 0.075),
    "openai:gpt-4-turbo": _p(10.0, 30.0),
    "openai:gpt-4": _p(30.0, 60.0),
    "openai:gpt-3.5-turbo": _p(0.50, 1.50),
    "openai:o1": _p(15.0, 60.0, 7.50),
    "openai:o1-mini": _p(1.10, 4.40, 0.55),
    "openai:o3": _p(2.0, 8.0, 0.50),
    "openai:o3-mini": _p(1.10, 4.40, 0.55),
    "openai:o4-mini": _p(1.10, 4.40, 0.275),
    # Anthropic (https://www.anthropic.com/pricing): cachedInput is a cache read.
    "anthropic:claude-opus-4-5": _p(5.0, 25.0, 0.50),
    "anthropic:claude-opus-4": _p(15.0, 75.0, 1.50),
    "anthropic:claude-sonnet-4": _p(3.0, 15.0, 0.30),
    "anthropic:claude-haiku-4-5": _p(1.0, 5.0, 0.10),
    "anthropic:claude-3-7-sonnet": _p(3.0, 15.0, 0.30),
    "anthropic:claude-3-5-sonnet": _p(3.0, 15.0, 0.30),
    "anthropic:claude-3-5-haiku": _p(0.80, 4.0, 0.08),
    "anthropic:claude-3-opus": _p(15.0, 75.0, 1.50),
    "anthropic:claude-3-haiku": _p(0.25, 1.25, 0.03),
    # Google (https://ai.google.dev/pricing): prompts up to 200k tokens.
    "google:gemini-3-pro": _p(2.0, 12.0, 0.20),
    "google:gemini-2.5-pro": _p(1.25, 10.0, 0.3125),
    "google:gemini-2.5-flash": _p(0.30, 2.50, 0.075),
    "google:gemini-2.5-flash-lite": _p(0.10, 0.40, 0.025),
    "google:gemini-2.0-flash": _p(0.10, 0.40, 0.025),
    "google:gemini-2.0-flash-lite": _p(0.075, 0.30),
    "google:gemini-1.5-pro": _p(1.25, 5.0, 0.3125),
    "google:gemini-1.5-flash": _p(0.075, 0.30, 0.01875),
}
"""The shipped prices (USD per million tokens, checked `PRICES_CHECKED`)."""

# Providers that serve another provider's models, priced as that one prices them.
_FAMILY: Final = {
    "azure": "openai",
    "azure-deployment": "openai",
    "vertex": "google",
    "gemini": "google",
    "vertex-anthropic": "anthropic",
}
# Bedrock names a model vendor.model-version (``anthropic.claude-3-5-sonnet-20240620-v1:0``),
# an inference profile puts a region first (``us.``, ``eu.``, ``apac.``, ``global.``).
_BEDROCK: Final = re.compile(r"^(?:(?:us|eu|apac|global|us-gov|ca|jp|au)\.)?(\w+)\.(.+)$")
_BEDROCK_VENDORS: Final = {"anthropic": "anthropic"}
# A gateway's ``vendor/model`` (openrouter, a compat server): the vendor's own price.
_GATEWAY_VENDORS: Final = {"openai": "openai", "anthropic": "anthropic", "google": "google"}
_BOUNDARY: Final = frozenset("-@:")


def _split(spec: str) -> tuple[str | None, str]:
    """``(provider, model)`` of a key or spec; no provider for a bare name."""
    text = spec.strip()
    cuts = [i for i in (text.find(":"), text.find("/")) if i >= 0]
    if not cuts:
        return None, text
    cut = min(cuts)
    return text[:cut].lower(), text[cut + 1 :]


class PriceTable:
    """The shipped prices under a caller's overrides (later overrides win)."""

    def __init__(
        self, *overrides: Mapping[str, Price], defaults: Mapping[str, Price] = DEFAULT_PRICES
    ) -> None:
        self._tables: list[dict[tuple[str | None, str], Price]] = []
        for table in (*reversed(overrides), defaults):  # searched in this order
            split: dict[tuple[str | None, str], Price] = {}
            for key, price in table.items():
                provider, model = _split(key)
                if provider is None and model.lower() == "scripted":
                    provider, model = "scripted", "*"  # every scripted model
                split[(provider, model.lower())] = price
            self._tables.append(split)
        self._known: dict[tuple[str, str], Price | None] = {}  # what lookups found

    def price(self, provider: str, model: str) -> Price | None:
        """The price of ``model`` served by ``provider``; None: no entry covers it."""
        key = (provider.lower(), model.lower())
        if key in self._known:
            return self._known[key]
        candidates = list(_candidates(*key))
        # A model's own entry, in any table, wins over a family's; then the longest
        # family entry, an override's over a default's of the same length.
        found = next(
            (
                table[(owner, name)]
                for candidate in candidates
                for owner, name in ((candidate[0], candidate[1]), (None, candidate[1]))
                for table in self._tables
                if (owner, name) in table
            ),
            None,
        )
        for provider_name, name in candidates if found is None else ():
            found = _longest(self._tables, provider_name, name)
            if found is not None:
                break
        self._known[key] = found
        return found

    def price_of(self, spec: str) -> Price | None:
        """The price of a ``provider:model`` spec (``scripted`` alone: the scripted model)."""
        provider, model = _split(spec)
        if provider is None:
            return self.price("scripted", "scripted") if model.lower() == "scripted" else None
        return self.price(provider, model)

    def cost(self, provider: str, model: str, usage: LLMUsage) -> float | None:
        """USD of one call of ``model`` with ``usage``; None when the model has no price."""
        price = self.price(provider, model)
        return None if price is None else price.cost(usage)


def _candidates(provider: str, model: str) -> Iterator[tuple[str, str]]:
    """The names a model is priced under: its own, then its vendor's."""
    yield provider, model
    family = _FAMILY.get(provider)
    if family is not None:
        yield family, model
    if provider == "bedrock":
        match = _BEDROCK.match(model)
        if match is not None and match.group(1) in _BEDROCK_VENDORS:
            yield _BEDROCK_VENDORS[match.group(1)], match.group(2)
    vendor, _, rest = model.partition("/")
    if rest and vendor in _GATEWAY_VENDORS:
        yield _GATEWAY_VENDORS[vendor], rest


def _longest(
    tables: list[dict[tuple[str | None, str], Price]], provider: str, model: str
) -> Price | None:
    """The entry with the longest name that ``model`` extends (see the module docstring)."""
    best: tuple[int, Price] | None = None
    for table in tables:
        for (owner, name), price in table.items():
            if owner is not None and owner != provider:
                continue
            if name.endswith("*"):  # an explicit prefix
                stem = name[:-1]
                if not model.startswith(stem):
                    continue
            elif model.startswith(name) and model[len(name) : len(name) + 1] in _BOUNDARY:
                stem = name  # a snapshot or variant of the model the key names
            else:
                continue
            if best is None or len(stem) > best[0]:  # ties: the earlier table's
                best = (len(stem), price)
    return best[1] if best is not None else None
