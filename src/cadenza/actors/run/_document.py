"""A run's document: the workflow and inputs it started with, as the store keeps them.

A resumed run must replay what actually ran, not whatever the workflow file
says by now, so the loaded workflow (``@file`` text already read in, every
included workflow with it) and the run's inputs are stored with the run as
msgspec JSON, and read back from there. A run without a stored document (one
recorded before documents existed) is resumed from its workflow file.

The document also keeps the run's tool permission policy (`StoredPolicy`), so
that every resume applies it. A document whose policy restricts anything is
version 2, which a Cadenza from before policies were stored refuses to read
rather than resume the run without them; one without is version 1, as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from cadenza.errors import CorruptRecord
from cadenza.workflow import LoadedWorkflow, Workflow

from ._permissions import StoredPolicy

__all__ = ["RunDocument", "decode_document", "encode_document"]


class _Stored(msgspec.Struct, frozen=True):
    """A `LoadedWorkflow` as data; includes are stored the same way, recursively."""

    workflow: Workflow
    path: str | None
    base_dir: str
    includes: dict[str, _Stored] = {}


class _Document(msgspec.Struct, frozen=True):
    version: int
    loaded: _Stored
    inputs: dict[str, Any]
    policy: StoredPolicy | None = None  # None: recorded before policies were stored


class RunDocument(NamedTuple):
    """What a run started with, as read back from the store."""

    document: LoadedWorkflow
    inputs: dict[str, Any]
    policy: StoredPolicy | None
    """The runtime's permission policy; None for a run recorded before it was stored."""


_VERSIONS = (1, 2)  # 2: the policy restricts something; older readers must not resume it
_decode = msgspec.json.Decoder(_Document).decode


def _store(loaded: LoadedWorkflow) -> _Stored:
    return _Stored(
        workflow=loaded.workflow,
        path=None if loaded.path is None else str(loaded.path),
        base_dir=str(loaded.base_dir),
        includes={name: _store(child) for name, child in loaded.includes.items()},
    )


def _load(stored: _Stored) -> LoadedWorkflow:
    return LoadedWorkflow(
        workflow=stored.workflow,
        path=None if stored.path is None else Path(stored.path),
        base_dir=Path(stored.base_dir),
        includes={name: _load(child) for name, child in stored.includes.items()},
    )


def encode_document(
    loaded: LoadedWorkflow, inputs: dict[str, Any], policy: StoredPolicy | None = None
) -> bytes:
    """The stored form of a run's workflow, inputs and permission policy."""
    policy = policy or StoredPolicy()
    version = 1 if policy == StoredPolicy() else 2
    return msgspec.json.encode(_Document(version, _store(loaded), inputs, policy))


def decode_document(body: bytes, run_id: str) -> RunDocument:
    """The workflow, inputs and permission policy a run started with.

    The document was valid when the run started; decoding it into the typed
    Structs (which refuse unknown keys and wrong types) and the store's checksum
    are what guard it since.

    Raises:
        CorruptRecord: The document does not decode.
    """
    where = f"run {run_id!r}, document"
    try:
        document = _decode(body)
    except msgspec.DecodeError as error:
        raise CorruptRecord(f"{where}: it cannot be read: {error}") from None
    if document.version not in _VERSIONS:
        raise CorruptRecord(f"{where}: version {document.version} is not one this Cadenza reads")
    return RunDocument(_load(document.loaded), document.inputs, document.policy)
