"""Where the command line keeps its runs unless told otherwise (``--store``).

``--store`` takes a SQLite file's path or a PostgreSQL URL (``postgresql://...``);
`store_spec` tells them apart, `existing_store` refuses a path with no store.
"""

from pathlib import Path

from cadenza.errors import InputError
from cadenza.store import describe_store, is_postgres_url

__all__ = [
    "DEFAULT_STORE",
    "PRICES_HELP",
    "STORE_HELP",
    "THINKING_HELP",
    "StoreSpec",
    "existing_store",
    "store_spec",
]

DEFAULT_STORE = Path(".cadenza") / "runs.db"
"""The run store of every command that takes ``--store``, relative to the working directory."""

PRICES_HELP = (
    "a YAML or JSON file of model prices (model: {input, output, cachedInput} in USD per "
    "million tokens), over the shipped ones and the workflow's (docs/prices.md)"
)

THINKING_HELP = (
    "how much models reason before they answer, for agents that set no thinking: "
    "off, low, medium or high (docs/providers.md)"
)

STORE_HELP = (
    "the run store: a SQLite file (default: .cadenza/runs.db) or a postgresql:// URL "
    "(password best in PGPASSWORD or ~/.pgpass)"
)

StoreSpec = Path | str
"""What ``--store`` holds: a SQLite file's path, or a PostgreSQL URL."""


def store_spec(text: str) -> StoreSpec:
    """``--store``'s type: a URL stays a string, anything else is a path."""
    return text if is_postgres_url(text) else Path(text)


def existing_store(spec: StoreSpec) -> StoreSpec:
    """``spec``, unless it is a path where no store is (a server's database is created).

    Raises:
        InputError: No SQLite file there.
    """
    if isinstance(spec, Path) and not spec.exists():
        raise InputError(f"no run store at {describe_store(spec)!r} (give --store PATH or URL)")
    return spec
