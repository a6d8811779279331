"""cadenza.llm and cadenza.testing re-export their public names, completely and once each."""

from __future__ import annotations

from types import ModuleType

import pytest

import cadenza.llm
import cadenza.testing


@pytest.mark.parametrize("package", [cadenza.llm, cadenza.testing])
def test_all_is_complete_and_sorted(package: ModuleType) -> None:
    """Every public name is in __all__ exactly once, in sorted order."""
    public = {
        name
        for name, value in vars(package).items()
        if not name.startswith("_") and not isinstance(value, ModuleType)
    }
    assert set(package.__all__) == public
    assert len(package.__all__) == len(public)
    assert list(package.__all__) == sorted(package.__all__, key=lambda n: (not n.isupper(), n))


@pytest.mark.parametrize("package", [cadenza.llm, cadenza.testing])
def test_classes_come_from_private_modules(package: ModuleType) -> None:
    """Each exported class is defined in a private module of its package."""
    for name in package.__all__:
        value = getattr(package, name)
        if isinstance(value, type):
            assert value.__module__.startswith(f"{package.__name__}._"), name
