"""What an expression reads from the context: constant paths from each name.

``steps.test.result.exitCode == 0`` reads ``steps["test"]["result"]["exitCode"]``
and nothing else of the run's state. Knowing that at compile time lets
evaluation hand the engine only those values (its cost then no longer follows
the size of the state), look a bare path up in Python, and explain a missing
key by walking the same path.
"""

from __future__ import annotations

from ._cel_lexer import Token, is_root, plain_string

__all__ = ["Path", "Plan", "access_paths", "is_one_path", "plan_of"]

Path = tuple[str, tuple[str, ...]]
"""A context name and the constant keys selected below it: ``("steps", ("test", "result"))``."""

Plan = dict[str, "Plan | None"]
"""Which keys to keep below each name; None keeps the whole value."""

_FIELD = ("ident", "quoted")


def access_paths(tokens: list[Token], names: frozenset[str]) -> list[Path]:
    """Every use of a context name, with the constant keys selected right after it.

    A path stops at the first selection that is not a constant key (an index
    by variable, a method call, an operator); the value there is then used
    whole. ``has(steps.x)`` reads ``steps.x``; ``steps.all(...)`` reads ``steps``.
    """
    paths = []
    for i, token in enumerate(tokens):
        if token.text not in names or not is_root(tokens, i):
            continue
        keys: list[str] = []
        j = i + 1
        while j + 1 < len(tokens):
            nxt = tokens[j + 1]
            if tokens[j].text == "." and nxt.kind in _FIELD:
                if j + 2 < len(tokens) and tokens[j + 2].text == "(":
                    break  # a method call uses the receiver whole
                keys.append(nxt.text.strip("`"))
                j += 2
            elif tokens[j].text == "[" and j + 2 < len(tokens) and tokens[j + 2].text == "]":
                key = plain_string(nxt)
                if key is None:
                    break
                keys.append(key)
                j += 3
            else:
                break
        paths.append((token.text, tuple(keys)))
    return paths


def is_one_path(tokens: list[Token], names: frozenset[str]) -> bool:
    """Whether the tokens are exactly one context name and constant keys, nothing else."""
    if not tokens or tokens[0].kind != "ident" or tokens[0].text not in names:
        return False
    i = 1
    while i < len(tokens):
        if i + 1 < len(tokens) and tokens[i].text == "." and tokens[i + 1].kind in _FIELD:
            i += 2
        elif (
            i + 2 < len(tokens)
            and tokens[i].text == "["
            and plain_string(tokens[i + 1]) is not None
            and tokens[i + 2].text == "]"
        ):
            i += 3
        else:
            return False
    return True


def plan_of(paths: list[Path]) -> Plan:
    """Merge access paths into one plan: the union of what they can reach."""
    plan: Plan = {}
    for name, keys in paths:
        _insert(plan, (name, *keys))
    return plan


def _insert(node: Plan, keys: tuple[str, ...]) -> None:
    head, rest = keys[0], keys[1:]
    if head in node and node[head] is None:
        return  # already kept whole
    if not rest:
        node[head] = None
        return
    child = node.get(head)
    if child is None:
        child = node[head] = {}
    _insert(child, rest)
