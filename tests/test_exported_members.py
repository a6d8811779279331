"""The public API is what docs/api.md says, and no more: httpx's test_exported_members, per package.

docs/architecture.md's table ("Public API and internal seams") sorts every package
into public or internal. A public package's ``__all__`` is exactly the names it
offers, each importable, each with its own docstring where it is a class or a
function, each named in docs/api.md. An internal seam keeps a complete
``__all__`` for its sibling packages, and promises nothing to anyone else.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

import cadenza

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
API = ROOT / "docs" / "api.md"
DEPRECATED = {"cadenza.runtime"}  # an alias that warns on import
ALIASES = {"cadenza.loops": {"Loop"}}  # old names that warn, and are in no __all__


def _classified() -> dict[str, str]:
    """docs/architecture.md's table: package -> "public" or "internal"."""
    text = ARCHITECTURE.read_text()
    start = text.index("### Public API and internal seams")
    rows = re.findall(r"^\| `(cadenza(?:\.\w+)?)` \| (public|internal) \|", text[start:], re.M)
    return dict(rows)


CLASSIFIED = _classified()
PUBLIC = sorted(name for name, kind in CLASSIFIED.items() if kind == "public")
INTERNAL = sorted(name for name, kind in CLASSIFIED.items() if kind == "internal")


def _packages() -> set[str]:
    """``cadenza`` and every module directly under it that has no underscore."""
    found = {"cadenza"}
    for info in pkgutil.iter_modules(cadenza.__path__):
        if not info.name.startswith("_"):
            found.add(f"cadenza.{info.name}")
    return found


def _module(name: str) -> ModuleType:
    if name in DEPRECATED:
        sys.modules.pop(name, None)
        with pytest.warns(DeprecationWarning, match="next release"):
            module = importlib.import_module(name)
        return module
    return importlib.import_module(name)


def _public_members(module: ModuleType) -> set[str]:
    """What ``from module import *`` would find without ``__all__``: no submodule, no alias."""
    return {
        key
        for key, value in vars(module).items()
        if not key.startswith("_") and not inspect.ismodule(value) and key != "annotations"
    }


def test_every_package_is_public_or_an_internal_seam() -> None:
    """A new package is sorted into the table before anything imports it."""
    assert set(CLASSIFIED) == _packages()
    assert len(PUBLIC) == 10


@pytest.mark.parametrize("name", PUBLIC)
def test_all_is_exactly_the_public_names(name: str) -> None:
    """Nothing public is left out of ``__all__``, nothing is in it twice."""
    module = _module(name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported))
    if name == "cadenza":  # its runtime half loads on first use, so count what __dir__ offers
        offered = {key for key in dir(module) if not key.startswith("_")} - {
            key for key, value in vars(module).items() if inspect.ismodule(value)
        }
        assert set(exported) - {"__version__"} == offered
    else:
        assert set(exported) == _public_members(module)


@pytest.mark.parametrize("name", PUBLIC)
def test_every_exported_name_imports_and_says_what_it_is(name: str) -> None:
    """``from package import name`` works for each; classes and functions carry a docstring."""
    module = _module(name)
    undocumented = []
    for key in module.__all__:
        value = getattr(module, key)  # AttributeError is the failure
        if inspect.isclass(value):
            documented = bool(vars(value).get("__doc__"))
        elif inspect.isfunction(value) or inspect.isbuiltin(value):
            documented = bool(value.__doc__)
        else:
            continue  # constants and type aliases: documented where they are defined
        if not documented:
            undocumented.append(key)
    assert undocumented == []


@pytest.mark.parametrize("name", PUBLIC)
def test_every_exported_name_is_in_the_api_docs(name: str) -> None:
    """docs/api.md ("The Python API") names each, in backquotes: a user can look it up."""
    text = API.read_text()
    section = text[text.index("## The Python API") :]
    assert f"`{name}`" in section
    named = set(re.findall(r"`(?:[\w.]+\.)?(\w+)[^`]*`", text))
    missing = [key for key in _module(name).__all__ if key not in named]
    assert missing == []


@pytest.mark.parametrize("name", INTERNAL)
def test_an_internal_seam_declares_what_its_siblings_may_use(name: str) -> None:
    """A seam's ``__all__`` is complete too: what is not in it, no sibling should import."""
    module = _module(name)
    if name == "cadenza.runtime":
        kernel, store = (importlib.import_module(f"cadenza.{n}") for n in ("kernel", "store"))
        assert set(module.__all__) == set(kernel.__all__) | set(store.__all__)
        assert module.Supervisor is importlib.import_module("cadenza.kernel").Supervisor
        return
    exported = list(getattr(module, "__all__", ()))
    assert len(exported) == len(set(exported))
    assert set(exported) == _public_members(module) - ALIASES.get(name, set())


def test_an_old_name_warns_and_is_in_no_all() -> None:
    """The aliases kept for one release are not part of the surface the tests above hold."""
    for name, old in ALIASES.items():
        module = importlib.import_module(name)
        assert not old & set(module.__all__)
        for key in old:
            with pytest.warns(DeprecationWarning, match="next release"):
                getattr(module, key)


def test_the_check_sees_a_name_missing_from_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """A public name left out of ``__all__`` is found: the check above can fail."""
    import cadenza.telemetry

    monkeypatch.setattr(cadenza.telemetry, "forgotten", lambda: None, raising=False)
    assert _public_members(cadenza.telemetry) - set(cadenza.telemetry.__all__) == {"forgotten"}
