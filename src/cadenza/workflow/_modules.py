"""Whether Python code a document names can be found, without running any of it."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

__all__ = ["module_exists"]


def module_exists(name: str, base_dir: Path) -> bool:
    """Whether a top-level module ``name`` can be imported, beside the workflow or on the path.

    Nothing is imported: no user code runs.
    """
    if name in sys.modules:
        return True
    if importlib.machinery.PathFinder.find_spec(name, [str(base_dir)]) is not None:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
