"""The public modules say what they export: ``__all__`` is complete, and all of it is documented."""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType

import pytest

PUBLIC = [
    "cadenza",
    "cadenza.build",
    "cadenza.testing",
    "cadenza.loops",
    "cadenza.workflow",
    "cadenza.kernel",
    "cadenza.store",
    "cadenza.protocols",
    "cadenza.llm",
]


def exported(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    assert names is not None, f"{module.__name__} has no __all__"
    return list(names)


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_is_in_all(name: str) -> None:
    """A name a user can import without an underscore is one the module means to export."""
    module = importlib.import_module(name)
    public = {
        key
        for key, value in vars(module).items()
        if not key.startswith("_") and not inspect.ismodule(value) and key != "annotations"
    }
    assert sorted(public - set(exported(module))) == []


@pytest.mark.parametrize("name", PUBLIC)
def test_every_name_in_all_exists_and_is_documented(name: str) -> None:
    """Classes and functions carry their own docstring (not one inherited from a base)."""
    module = importlib.import_module(name)
    missing = [key for key in exported(module) if not hasattr(module, key)]
    assert missing == []
    undocumented = []
    for key in exported(module):
        value = getattr(module, key)
        if inspect.isclass(value):
            documented = bool(vars(value).get("__doc__"))
        elif inspect.isfunction(value) or inspect.isbuiltin(value):
            documented = bool(value.__doc__)
        else:
            continue  # constants and type aliases: documented where they are defined
        if not documented:
            undocumented.append(key)
    assert undocumented == []
