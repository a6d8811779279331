"""Namespaced actor addresses: ``dev-cycle.0.implement``, ``outer.1.fan[3].deploy``.

An address is a chain of segments separated by dots. A segment is a name
(``[A-Za-z][A-Za-z0-9_-]*``: step ids and graph state names) optionally followed
by item indexes ``[N]``, or a bare iteration number ``N``. The first segment is
always a name. Numbers are written without leading zeros, so every address has
exactly one spelling and ``str(Address.parse(text)) == text``.
"""

from __future__ import annotations

import re
from typing import Final

from cadenza.errors import AddressError

__all__ = ["Address"]

_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_NUMBER: Final = re.compile(r"0|[1-9][0-9]*")
_WHOLE: Final = re.compile(
    r"[A-Za-z][A-Za-z0-9_-]*(?:\[(?:0|[1-9][0-9]*)\])*"
    r"(?:\.(?:(?:0|[1-9][0-9]*)|[A-Za-z][A-Za-z0-9_-]*(?:\[(?:0|[1-9][0-9]*)\])*))*"
)
_TOKEN: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]*|[0-9]+|\[[0-9]+\]|\.")

# What the last step of an address added; item() refuses to follow an iteration.
_NAME_KIND: Final = 0
_ITERATION_KIND: Final = 1
_ITEM_KIND: Final = 2


class Address:
    """An immutable, hashable actor address.

    Built by ``Address.parse`` or ``Address.root`` and extended with ``child``,
    ``iteration`` and ``item``. Each builder links to its parent and formats
    its own text once, so building and hashing never re-parse; equality and
    hash are those of the canonical text.
    """

    __slots__ = ("_hash", "_kind", "_name", "_parent", "_text")

    _text: str
    _hash: int
    _name: str
    _parent: Address | None
    _kind: int

    def __init__(self) -> None:
        raise TypeError("use Address.parse(text) or Address.root(name)")

    @classmethod
    def _make(cls, text: str, parent: Address | None, name: str, kind: int) -> Address:
        self = object.__new__(cls)
        self._text = text
        self._hash = hash(text)
        self._name = name
        self._parent = parent
        self._kind = kind
        return self

    @classmethod
    def root(cls, name: str) -> Address:
        """A one-segment address, e.g. ``Address.root("build")``.

        Raises:
            AddressError: ``name`` is not a valid name segment.
        """
        _check_name(name, name, 1)
        return cls._make(name, None, name, _NAME_KIND)

    @classmethod
    def parse(cls, text: str) -> Address:
        """Parse canonical address text such as ``deploy-each[1].deploy``.

        Raises:
            AddressError: The text is not an address; ``column`` (1-based)
                points at the first character that is wrong.
        """
        if _WHOLE.fullmatch(text) is None:
            raise _locate_error(text)
        address: Address | None = None
        for token in _TOKEN.findall(text):
            if token == ".":
                continue
            if address is None:
                address = cls._make(token, None, token, _NAME_KIND)
            elif token[0] == "[":
                address = address._extend_item(token)
            elif token[0].isdigit():
                address = cls._make(
                    f"{address._text}.{token}", address, address._name, _ITERATION_KIND
                )
            else:
                address = cls._make(f"{address._text}.{token}", address, token, _NAME_KIND)
        assert address is not None  # the full match guarantees a leading name
        return address

    def child(self, name: str) -> Address:
        """This address extended by a name segment: ``a`` → ``a.name``.

        Raises:
            AddressError: ``name`` is not a valid name segment.
        """
        if _NAME.fullmatch(name) is None:
            _check_name(name, f"{self._text}.{name}", len(self._text) + 2)
        return Address._make(f"{self._text}.{name}", self, name, _NAME_KIND)

    def iteration(self, n: int) -> Address:
        """This address extended by an iteration number: ``loop`` → ``loop.0``.

        Raises:
            AddressError: ``n`` is negative.
        """
        if n < 0:
            raise AddressError(
                f"iteration {n} of {self._text!r} is negative", text=f"{self._text}.{n}"
            )
        return Address._make(f"{self._text}.{n}", self, self._name, _ITERATION_KIND)

    def item(self, n: int) -> Address:
        """This address extended by an item index: ``fan`` → ``fan[0]``.

        Raises:
            AddressError: ``n`` is negative, or this address ends in an
                iteration number (``loop.0[1]`` is not an address).
        """
        if n < 0 or self._kind == _ITERATION_KIND:
            why = "is negative" if n < 0 else "cannot follow an iteration number"
            raise AddressError(f"item index [{n}] {why}", text=f"{self._text}[{n}]")
        return Address._make(f"{self._text}[{n}]", self, self._name, _ITEM_KIND)

    def _extend_item(self, token: str) -> Address:
        return Address._make(self._text + token, self, self._name, _ITEM_KIND)

    @property
    def name(self) -> str:
        """The last name segment.

        ``implement`` for ``dev-cycle.0.implement``, ``stages`` for ``stages.0``,
        ``loop`` for ``loop[2]``.
        """
        return self._name

    @property
    def parent(self) -> Address | None:
        """The address without its last segment or index, or None for a root."""
        return self._parent

    @property
    def is_root(self) -> bool:
        """Whether this is a single name segment with no index."""
        return self._parent is None

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"Address({self._text!r})"

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Address):
            return self._text == other._text
        return NotImplemented

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Address.parse, (self._text,))


def _check_name(name: str, text: str, column: int) -> None:
    if _NAME.fullmatch(name) is None:
        raise AddressError(
            f"invalid name segment {name!r} in address {text!r} at column {column}: "
            "a name is a letter followed by letters, digits, '_' or '-'",
            text=text,
            column=column,
        )


def _locate_error(text: str) -> AddressError:
    """Walk the text by the grammar to find the first wrong character.

    Only runs after the whole-text regex rejected ``text``, so it always finds one.
    """
    if not text:
        return _error(text, 0, "empty address")
    pos, end, first = 0, len(text), True
    while pos < end:
        name = _NAME.match(text, pos)
        past = _past_indexes(text, name.end()) if name else _past_number(text, pos, first)
        if isinstance(past, AddressError):
            return past
        pos = past
        if pos < end and text[pos] != ".":
            return _error(text, pos, f"unexpected {text[pos]!r}")
        pos += 1
        first = False
    return _error(text, end, "address ends with '.'")


def _past_indexes(text: str, pos: int) -> int | AddressError:
    """Where a name's ``[N]`` indexes from ``pos`` end, or what is wrong in one."""
    end = len(text)
    while pos < end and text[pos] == "[":
        index = _NUMBER.match(text, pos + 1)
        if index is None or _digit_at(text, index.end()):
            return _error(text, pos + 1, "expected a number without leading zeros")
        if index.end() == end or text[index.end()] != "]":
            return _error(text, index.end(), "expected ']'")
        pos = index.end() + 1
    return pos


def _past_number(text: str, pos: int, first: bool) -> int | AddressError:
    """Where the iteration number at ``pos`` ends, or what is wrong there (not a name).

    The ``first`` segment must be a name.
    """
    number = None if first else _NUMBER.match(text, pos)
    if number is None or _digit_at(text, number.end()):
        expected = "a name (a letter first)" if first else "a name or a number"
        return _error(text, pos, f"expected {expected}, without leading zeros")
    pos = number.end()
    if pos < len(text) and text[pos] == "[":
        return _error(text, pos, "an iteration number takes no [N] index")
    return pos


def _digit_at(text: str, pos: int) -> bool:
    return pos < len(text) and text[pos].isdigit()


def _error(text: str, pos: int, problem: str) -> AddressError:
    return AddressError(
        f"invalid address {text!r} at column {pos + 1}: {problem}", text=text, column=pos + 1
    )
