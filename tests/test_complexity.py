"""No function in src/cadenza is above complexity 15 by radon, but those the docs justify.

ruff's C901 (at 20) does not count ``and``/``or``; radon does, so a chain of
conditions is seen for what it costs a reader. The exceptions are the list under
"Complex functions, and why" in docs/architecture.md, read here, so that the
list a reader sees is the list that is enforced.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "cadenza"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
LIMIT = 15
SECTION = "## Complex functions, and why"

# `path.py:Qualified.name` (N), wherever it stands in the section's bullets.
_ENTRY = re.compile(r"`([\w/]+\.py):([\w.]+)`\s*\((\d+)\)")


def exceptions(text: str) -> dict[str, int]:
    """The justified functions of the architecture doc and the most each may reach."""
    _, found, rest = text.partition(SECTION + "\n")
    assert found, f"docs/architecture.md has no {SECTION!r} section"
    section = rest.split("\n## ", 1)[0]
    return {f"{path}:{name}": int(most) for path, name, most in _ENTRY.findall(section)}


def _blocks(blocks: Iterable[Function | Class], prefix: str = "") -> Iterator[tuple[str, int]]:
    """(qualified name, complexity) of every function, method and closure in ``blocks``."""
    for block in blocks:
        if isinstance(block, Class):
            yield from _blocks(block.methods, f"{prefix}{block.name}.")
            yield from _blocks(block.inner_classes, f"{prefix}{block.name}.")
        else:
            yield f"{prefix}{block.name}", block.complexity
            yield from _blocks(block.closures, f"{prefix}{block.name}.")


def complexities(package: Path) -> dict[str, int]:
    """``path:qualname`` -> radon's cyclomatic complexity, for every function below ``package``."""
    found = {}
    for module in sorted(package.rglob("*.py")):
        where = module.relative_to(package).as_posix()
        # cc_visit lists a class's methods twice: in the class and on their own.
        top = [b for b in cc_visit(module.read_text()) if isinstance(b, Class) or not b.is_method]
        for name, complexity in _blocks(top):
            found[f"{where}:{name}"] = complexity
    return found


def check(measured: dict[str, int], allowed: dict[str, int]) -> list[str]:
    """Each way ``measured`` breaks the limit and its list of exceptions, as a line."""
    problems = []
    for name, complexity in sorted(measured.items()):
        if complexity > allowed.get(name, LIMIT):
            most = allowed.get(name)
            why = f"its entry allows {most}" if most else f"the limit is {LIMIT}"
            problems.append(f"{name} has complexity {complexity}; {why}")
    for name in sorted(allowed):
        if name not in measured:
            problems.append(f"{name} is listed, but there is no such function")
        elif measured[name] <= LIMIT:
            problems.append(f"{name} is at {measured[name]} now: remove it from the list")
    return problems


def test_every_function_is_within_the_limit_or_justified() -> None:
    problems = check(complexities(PACKAGE), exceptions(ARCHITECTURE.read_text()))
    assert not problems, (
        f"radon complexity above {LIMIT} needs a split, or an entry with its reason under "
        f"{SECTION!r} in docs/architecture.md:\n" + "\n".join(problems)
    )


def test_a_new_complex_function_fails(tmp_path: Path) -> None:
    branches = "".join(f"    if x == {n}:\n        return {n}\n" for n in range(LIMIT))
    (tmp_path / "_new.py").write_text(f"def tangled(x):\n{branches}    return -1\n")
    assert complexities(tmp_path) == {"_new.py:tangled": LIMIT + 1}
    assert check(complexities(tmp_path), {}) == [
        f"_new.py:tangled has complexity {LIMIT + 1}; the limit is {LIMIT}"
    ]


def test_methods_and_closures_are_counted(tmp_path: Path) -> None:
    branches = "".join(
        f"            if x == {n}:\n                return {n}\n" for n in range(LIMIT)
    )
    (tmp_path / "_new.py").write_text(
        f"class Outer:\n    def method(self, x):\n        def inner(x):\n{branches}"
        "            return -1\n        return inner(x)\n"
    )
    assert complexities(tmp_path) == {
        "_new.py:Outer.method": 1,
        "_new.py:Outer.method.inner": LIMIT + 1,
    }


def test_an_entry_bounds_its_function_and_a_stale_one_fails() -> None:
    measured = {"a.py:f": 18, "b.py:g": 12}
    assert check(measured, {"a.py:f": 18, "b.py:g": 16}) == [
        "b.py:g is at 12 now: remove it from the list"
    ]
    assert check(measured, {"a.py:f": 17}) == ["a.py:f has complexity 18; its entry allows 17"]
    assert check(measured, {"a.py:f": 18, "c.py:h": 20}) == [
        "c.py:h is listed, but there is no such function"
    ]


def test_the_docs_list_is_read() -> None:
    text = (
        f"intro\n{SECTION}\n\n- `kernel/_x.py:serve` (16): why.\n"
        "- `a/_b.py:C.d`\n  (17), `e.py:f` (18): why.\n\n## Next\n- `z.py:g` (30)\n"
    )
    assert exceptions(text) == {"kernel/_x.py:serve": 16, "a/_b.py:C.d": 17, "e.py:f": 18}
