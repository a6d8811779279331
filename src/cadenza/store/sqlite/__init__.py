"""The SQLite run store: one file, one writer thread, group commit (`SqliteRunStore`)."""

from ._schema import SCHEMA_VERSION as SCHEMA_VERSION
from ._store import SqliteRunStore as SqliteRunStore

__all__ = ["SCHEMA_VERSION", "SqliteRunStore"]
