"""The PostgreSQL run store: a server several processes share (`PostgresRunStore`).

asyncpg (the ``postgres`` extra) is imported when a store opens, not here.
"""

from ._schema import SCHEMA_VERSION as SCHEMA_VERSION
from ._store import PostgresRunStore as PostgresRunStore

__all__ = ["SCHEMA_VERSION", "PostgresRunStore"]
