"""``ScriptedTransport``: canned HTTP answers for ``ProviderRegistry(transport=...)``.

For unit tests that need no sockets: give the registry this transport and
inspect what the provider sent. End-to-end tests use ``ScriptedLLMServer``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

__all__ = ["CannedAnswer", "ScriptedTransport"]

CannedAnswer = httpx.Response | dict[str, Any] | Callable[[httpx.Request], httpx.Response]
"""A canned answer: a response, a JSON body sent with status 200, or a function of the request."""


class ScriptedTransport(httpx.MockTransport):
    """An httpx transport that answers from a list, in order, and records every request.

    The last answer repeats once the others are used.

    Example:
        >>> transport = ScriptedTransport(httpx.Response(429), {"choices": [...]})
        >>> providers = ProviderRegistry(environ=env, transport=transport)  # doctest: +SKIP

    Args:
        answers: At least one answer.

    Raises:
        ValueError: No answers were given.
    """

    def __init__(self, *answers: CannedAnswer) -> None:
        if not answers:
            raise ValueError("ScriptedTransport needs at least one answer")
        super().__init__(self._answer)
        self._answers = answers
        self.requests: list[httpx.Request] = []
        """Every request received, oldest first."""

    def json(self, index: int = -1) -> Any:
        """The parsed JSON body of request ``index`` (the last by default)."""
        return json.loads(self.requests[index].content)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self._answers[min(len(self.requests), len(self._answers)) - 1]
        if isinstance(answer, httpx.Response):
            return answer
        if isinstance(answer, dict):
            return httpx.Response(200, json=answer)
        return answer(request)
