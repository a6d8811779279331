"""cadenza.llm and cadenza.testing re-export their public names, completely and once each."""

from __future__ import annotations

import importlib
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
    """Each exported class is defined in a private module (of its package, or a
    re-export of another package's public class, such as cadenza.testing.FakeClock)."""
    for name in package.__all__:
        value = getattr(package, name)
        if isinstance(value, type):
            module = value.__module__
            assert module.startswith("cadenza."), name
            assert "._" in module, name
            owner = module.split("._", 1)[0]
            if owner != package.__name__:
                assert getattr(importlib.import_module(owner), name) is value, name
