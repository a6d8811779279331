"""Choosing a run store from what the user gave: a URL, a path, a store, or nothing."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from cadenza.errors import StoreError

from ._base import RunStore
from ._memory import MemoryRunStore
from ._urls import is_postgres_url, redacted_url
from .postgres import PostgresRunStore
from .sqlite import SqliteRunStore

__all__ = ["describe_store", "make_store"]

StoreSpec = RunStore | str | os.PathLike[str] | None


def make_store(spec: StoreSpec) -> RunStore:
    """The run store ``spec`` names, not yet opened (`Runtime` opens it).

    ``postgresql://...`` or ``postgres://...``: a `PostgresRunStore`; any other
    string or path: a `SqliteRunStore` in that file; a `RunStore`: itself; None:
    a `MemoryRunStore`.

    Raises:
        StoreError: A PostgreSQL URL, and the ``postgres`` extra is not installed.
    """
    if spec is None:
        return MemoryRunStore()
    if is_postgres_url(spec):
        if importlib.util.find_spec("asyncpg") is None:
            raise StoreError(
                f"the run store {redacted_url(spec)!r} is PostgreSQL, which needs the "
                "postgres extra: pip install 'cadenza[postgres]'"
            )
        return PostgresRunStore(spec)
    if isinstance(spec, str | os.PathLike):
        return SqliteRunStore(Path(spec))
    return spec


def describe_store(spec: str | os.PathLike[str]) -> str:
    """The store as a person may see it: a path as it is, a URL without its password."""
    return redacted_url(spec) if is_postgres_url(spec) else str(spec)
