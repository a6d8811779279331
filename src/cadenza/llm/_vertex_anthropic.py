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
from ._specs import VERTEX_CLAUDE
from ._stream import AnthropicStream
from ._types import LLMRequest
from ._vertex import vertex_connection
from ._wire import Connection, WireFormat

__all__ = [
    "VERTEX_ANTHROPIC_VERSION",
    "WIRE",
    "connect_vertex_anthropic",
    "encode_vertex_anthropic",
]

VERTEX_ANTHROPIC_VERSION: Final = "vertex-2023-10-16"

_encoder = msgspec.json.Encoder()


def encode_vertex_anthropic(request: LLMRequest, *, stream: bool = False) -> bytes:
    """The Messages API body as Vertex AI takes it: no ``model``, its own version."""
    body = anthropic_body(request, stream=stream)
    del body["model"]
    body["anthropic_version"] = VERTEX_ANTHROPIC_VERSION
    return _encoder.encode(body)


def connect_vertex_anthropic(environ: Mapping[str, str]) -> Connection:
    """The ``vertex-anthropic`` connection: Claude under ``publishers/anthropic``.

    Claude on Vertex is often set up for Anthropic's SDK: its project and region
    variables (``ANTHROPIC_VERTEX_PROJECT_ID``, ``CLOUD_ML_REGION``) count too.
    """
    return vertex_connection(environ, "anthropic", VERTEX_CLAUDE)


WIRE: Final = WireFormat(
    name="vertex_anthropic",
    path="/models/{model}:rawPredict",
    encode=encode_vertex_anthropic,
    decode=decode_anthropic,
    stream=AnthropicStream,
    stream_path="/models/{model}:streamRawPredict",
    connect=connect_vertex_anthropic,
)
"""Claude on Vertex AI: ``rawPredict`` and ``streamRawPredict`` under ``publishers/anthropic``."""
