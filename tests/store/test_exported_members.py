"""The store package re-exports its public names, completely and once each; the kernel none."""

from __future__ import annotations

import subprocess
import sys

import cadenza.kernel
import cadenza.store

BACKENDS = {"sqlite", "postgres"}
"""Subpackages, one per durable store: reachable as attributes, not re-exported names."""


def test_all_is_complete() -> None:
    """Every public name is in __all__ exactly once (ruff's RUF022 keeps it sorted)."""
    public = {name for name in vars(cadenza.store) if not name.startswith("_")} - BACKENDS
    assert set(cadenza.store.__all__) == public
    assert len(cadenza.store.__all__) == len(public)


def test_classes_come_from_private_modules() -> None:
    """Each exported class is defined in a private module of the package or of a backend."""
    for name in cadenza.store.__all__:
        value = getattr(cadenza.store, name)
        if isinstance(value, type):
            module = value.__module__
            assert module.startswith("cadenza.store."), name
            assert "._" in module, name


def test_the_kernel_neither_exports_nor_loads_the_store() -> None:
    """The actor kernel is the actor system alone: importing it loads nothing of the store."""
    assert not set(cadenza.kernel.__all__) & set(cadenza.store.__all__)
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, cadenza.kernel; print(*sorted(m for m in sys.modules if 'store' in m))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == ""
