"""Azure OpenAI: the Chat Completions wire with Azure's ``api-key`` header.

Both of Azure's APIs speak OpenAI's bodies, streams and tool calls unchanged;
only where a request goes differs, and that is the provider table's business
(``azure``: ``{endpoint}/openai/v1/chat/completions``; ``azure-deployment``:
``{endpoint}/openai/deployments/{model}/chat/completions?api-version=...``).
"""

from __future__ import annotations

import dataclasses

from ._openai import WIRE as _OPENAI

__all__ = ["WIRE"]


def _api_key(api_key: str) -> dict[str, str]:
    return {"api-key": api_key}


WIRE = dataclasses.replace(_OPENAI, name="azure", auth_headers=_api_key)
"""Chat Completions with the key in ``api-key`` (Azure takes no bearer API key)."""
