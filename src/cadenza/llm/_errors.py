"""The errors the provider layer raises, under ``CadenzaError``.

    CadenzaError
    └── LLMError                  a model call failed
        ├── LLMConfigError        unknown provider, missing key, bad base URL or script
        ├── LLMHTTPError          the server answered with an error status
        ├── LLMConnectionError    the server could not be reached or dropped the connection
        ├── LLMTimeout            an attempt ran past its deadline
        └── LLMResponseError      the response was malformed or too large

Every message passes through ``redact`` before it gets here, so no API key
ever shows in ``str()`` or ``repr()`` of these errors.
"""

from __future__ import annotations

from cadenza.errors import CadenzaError

__all__ = [
    "LLMConfigError",
    "LLMConnectionError",
    "LLMError",
    "LLMHTTPError",
    "LLMResponseError",
    "LLMTimeout",
]


class LLMError(CadenzaError):
    """A model call failed; the subclass says how.

    Attributes:
        attempts: How many HTTP attempts were made before giving up (0 when
            the call never reached the network).
    """

    def __init__(self, message: str, *, attempts: int = 0) -> None:
        super().__init__(message)
        self.attempts = attempts


class LLMConfigError(LLMError):
    """The model or provider is not usable as configured.

    Raised for an unknown provider (the message lists the known ones), a
    missing API key (the message names the variable, e.g. ``OPENAI_API_KEY is
    not set (needed by model openai:gpt-4o)``), a base URL that is not an
    http(s) URL, or a ``scripted`` agent without a usable script. Fix the
    environment or the workflow; retrying does not help.
    """


class LLMHTTPError(LLMError):
    """The server answered with an error status.

    A 4xx other than 429 is raised at once (the request is wrong, or the key
    is); 429 and 5xx are raised once the retries are used up. The message has
    the status and a short, redacted preview of the body.

    Attributes:
        status: The HTTP status of the last attempt.
    """

    def __init__(self, message: str, *, status: int, attempts: int) -> None:
        super().__init__(message, attempts=attempts)
        self.status = status


class LLMConnectionError(LLMError):
    """The server could not be reached, or closed the connection without a full answer.

    Raised once the retries are used up. Check the base URL and that the
    server is running.
    """


class LLMTimeout(LLMError):
    """An attempt took longer than the retry policy's per-attempt deadline.

    Raised once the retries are used up; the message says how long an attempt
    may take. A server that trickles its answer byte by byte ends here too.
    Raise ``RetryPolicy.deadline`` for slow models.
    """


class LLMResponseError(LLMError):
    """The response could not be used: not JSON, no choices, wrong tool-call shapes, too large.

    The message says what was wrong and where (``$.choices[0].message...``).
    Not retried: the same server would most likely answer the same way.
    """
