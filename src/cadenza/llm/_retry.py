"""When to retry a model call and how long to wait first.

Backoff is exponential with full jitter (a uniformly random wait between zero
and the exponential cap), which spreads the retries of many agents hitting the
same rate limit instead of having them return in lockstep. A ``Retry-After``
from the server wins over the computed wait.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import random
import time
from collections.abc import Callable, Mapping

import msgspec

__all__ = ["RetryPolicy", "is_retryable_status", "retry_after"]


class RetryPolicy(msgspec.Struct, frozen=True):
    """How a provider retries transient failures (429, 5xx, connection errors, timeouts).

    Attributes:
        max_attempts: Attempts per call, the first included; 1 never retries.
        base_delay: The backoff cap for the first retry, in seconds; it
            doubles with every further retry.
        max_delay: The most any single wait may be, ``Retry-After`` included.
        deadline: The outer bound on ONE attempt, in seconds: connecting,
            sending and reading the whole response. It is per attempt, not per
            call: a call may take up to ``max_attempts * deadline`` plus the
            waits. It catches a server that trickles bytes, which httpx's
            per-operation timeouts never would.

    Raises:
        ValueError: A field is out of range (no attempts, negative delays, a
            deadline that is not positive).
    """

    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0
    deadline: float = 120.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("base_delay and max_delay must not be negative")
        if not self.deadline > 0:
            raise ValueError(f"deadline must be positive, got {self.deadline}")

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """The wait after failed attempt number ``attempt`` (1-based), with full jitter."""
        # min() before the power would overflow for huge attempt counts.
        exponent = min(attempt - 1, 64)
        cap = min(self.max_delay, self.base_delay * 2.0**exponent)
        return rng.uniform(0.0, cap)

    def wait(
        self, attempt: int, rng: random.Random, headers: Mapping[str, str] | None = None
    ) -> float:
        """The wait before the next attempt: the server's ``Retry-After`` if any, else backoff.

        Args:
            attempt: The 1-based number of the attempt that failed.
            rng: The source of jitter.
            headers: The failed response's headers, if there was a response.
        """
        hinted = retry_after(headers) if headers is not None else None
        if hinted is not None:
            return min(hinted, self.max_delay)
        return self.backoff(attempt, rng)


def is_retryable_status(status: int) -> bool:
    """429 (rate limited) and every 5xx are worth another attempt; other errors are not."""
    return status == 429 or status >= 500


def retry_after(
    headers: Mapping[str, str], *, wall_clock: Callable[[], float] = time.time
) -> float | None:
    """The wait a response asks for, in seconds, or None when it does not say.

    Reads ``retry-after-ms`` (OpenAI) first, then ``Retry-After`` as seconds
    or an HTTP-date. A date in the past means no wait; garbage means no hint.

    Args:
        headers: Response headers (a case-insensitive mapping such as httpx's).
        wall_clock: The current Unix time, for HTTP-dates.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        seconds = _number(millis)
        if seconds is not None:
            return seconds / 1000.0
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000" dates parse naive; HTTP-dates are always UTC
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - wall_clock())


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value
