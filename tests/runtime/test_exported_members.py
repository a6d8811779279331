"""The runtime package re-exports its public names, completely and once each."""

from __future__ import annotations

import cadenza.runtime


def test_all_is_complete() -> None:
    """Every public name is in __all__ exactly once (ruff's RUF022 keeps it sorted)."""
    public = {name for name in vars(cadenza.runtime) if not name.startswith("_")}
    assert set(cadenza.runtime.__all__) == public
    assert len(cadenza.runtime.__all__) == len(public)


def test_classes_come_from_private_modules() -> None:
    """Each exported class is defined in a private module of the package."""
    for name in cadenza.runtime.__all__:
        value = getattr(cadenza.runtime, name)
        if isinstance(value, type):
            assert value.__module__.startswith("cadenza.runtime._"), name
