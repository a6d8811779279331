"""Claude on Vertex AI (provider ``vertex-anthropic``): the Messages API by ``rawPredict``.

The body is the Anthropic wire's (``_anthropic``) less its ``model``, which the
URL names, plus ``anthropic_version: vertex-2023-10-16``; the reply and its
stream are the Messages API's. Where it goes and how it is authorised is
Vertex AI's (``_vertex``)::

    {host}/v1/projects/{project}/locations/{location}/publishers/anthropic/models/{model}:rawPredict
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import msgspec

from ._anthropic import anthropic_body, decode_anthropic
from ._http import HTTPCaller
from ._specs import Provider
from ._stream import AnthropicStream
from ._types import LLMRequest
from ._vertex import VertexClient
from ._wire import WireFormat

__all__ = ["VERTEX_ANTHROPIC_VERSION", "WIRE", "client", "encode_vertex_anthropic"]

VERTEX_ANTHROPIC_VERSION: Final = "vertex-2023-10-16"

_encoder = msgspec.json.Encoder()


def encode_vertex_anthropic(request: LLMRequest, *, stream: bool = False) -> bytes:
    """The Messages API body as Vertex AI takes it: no ``model``, its own version."""
    body = anthropic_body(request, stream=stream)
    del body["model"]
    body["anthropic_version"] = VERTEX_ANTHROPIC_VERSION
    return _encoder.encode(body)


WIRE: Final = WireFormat(
    name="vertex_anthropic",
    path="/models/{model}:rawPredict",
    encode=encode_vertex_anthropic,
    decode=decode_anthropic,
    stream=AnthropicStream,
    stream_path="/models/{model}:streamRawPredict",
)
"""Claude on Vertex AI: ``rawPredict`` and ``streamRawPredict`` under ``publishers/anthropic``."""


def client(
    entry: Provider,
    base_url: str,
    environ: Mapping[str, str],
    caller: HTTPCaller,
    secrets: frozenset[str],
) -> VertexClient:
    """The ``vertex-anthropic`` client (the registry's hook)."""
    return VertexClient(entry, WIRE, "anthropic", base_url, environ, caller, secrets)
