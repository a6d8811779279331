"""Where the command line keeps its runs unless told otherwise (``--store``)."""

from pathlib import Path

__all__ = ["DEFAULT_STORE"]

DEFAULT_STORE = Path(".cadenza") / "runs.db"
"""The run store of every command that takes ``--store``, relative to the working directory."""
