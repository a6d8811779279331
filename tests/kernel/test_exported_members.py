"""The kernel package re-exports its public names, completely and once each."""

from __future__ import annotations

import importlib
import sys

import pytest

import cadenza.kernel
import cadenza.store


def test_all_is_complete() -> None:
    """Every public name is in __all__ exactly once (ruff's RUF022 keeps it sorted)."""
    public = {name for name in vars(cadenza.kernel) if not name.startswith("_")}
    assert set(cadenza.kernel.__all__) == public
    assert len(cadenza.kernel.__all__) == len(public)


def test_classes_come_from_private_modules() -> None:
    """Each exported class is defined in a private module of the package."""
    for name in cadenza.kernel.__all__:
        value = getattr(cadenza.kernel, name)
        if isinstance(value, type):
            assert value.__module__.startswith("cadenza.kernel._"), name


def test_the_old_name_is_an_alias_that_warns() -> None:
    """``cadenza.runtime`` (before the rename to ``cadenza.kernel``) still works, and says so."""
    sys.modules.pop("cadenza.runtime", None)
    with pytest.warns(DeprecationWarning, match=r"cadenza\.kernel"):
        old = importlib.import_module("cadenza.runtime")
    assert old.Supervisor is cadenza.kernel.Supervisor
    assert old.SqliteRunStore is cadenza.store.SqliteRunStore  # the kernel's, when it was this
    assert set(old.__all__) == set(cadenza.kernel.__all__) | set(cadenza.store.__all__)
