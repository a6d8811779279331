"""The ``thinking`` level as each wire takes it: a token budget, or an effort.

OpenAI's Chat Completions take the level's name (``reasoning_effort``);
Anthropic, Gemini and Claude on Bedrock take a budget of reasoning tokens.
One table of budgets serves them all, so ``high`` means the same effort
whichever provider answers (docs/providers.md, "Reasoning").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ._types import LLMRequest, Thinking

__all__ = ["ANSWER_TOKENS", "BUDGETS", "thinking_budget", "thinking_level", "with_budget"]

BUDGETS: Final[Mapping[Thinking, int]] = {"low": 1024, "medium": 4096, "high": 16384}
"""Reasoning tokens per level. 1,024 is the least Anthropic takes; 16,384 stays
within what every model takes (Gemini 2.5 Flash's 24,576 the smallest ceiling)."""


ANSWER_TOKENS: Final = 4096
"""The answer's tokens when a request sets no ``max_tokens`` but must (Claude's)."""


def with_budget(max_tokens: int | None, budget: int) -> int:
    """Claude's ``max_tokens`` for an answer of ``max_tokens`` after ``budget`` tokens of
    thinking: it covers both, and must exceed the budget."""
    return (max_tokens or ANSWER_TOKENS) + budget


def thinking_level(request: LLMRequest) -> Thinking | None:
    """The level ``request`` asks for; None when it names none (the provider's default)."""
    return request.thinking if isinstance(request.thinking, str) else None


def thinking_budget(request: LLMRequest) -> int | None:
    """The reasoning tokens ``request``'s level allows; None for ``off`` and for no level."""
    level = thinking_level(request)
    return None if level is None or level == "off" else BUDGETS[level]
