"""Address grammar, canonical text, and the cheap builders."""

from __future__ import annotations

import pickle

import pytest

from cadenza.errors import AddressError
from cadenza.kernel import Address

GOOD = [
    "a",
    "Run",
    "dev-cycle.0.implement",
    "deploy-each[1].deploy",
    "outer.1.fan[3].deploy",
    "stages.0",
    "loop[2]",
    "router.2.analyze",
    "test-fix.0.test",
    "graph.10.ReviewState",
    "matrix[0][12]",
    "a_b-c.0.d",
]

BAD = [
    ("", 1),
    (".a", 1),
    ("a..b", 3),
    ("a.", 3),
    ("0.a", 1),
    ("-a", 1),
    (" a", 1),
    ("a b", 2),
    ("a.01", 3),
    ("a.b!", 4),
    ("a[", 3),
    ("a[1", 4),
    ("a[x]", 3),
    ("a[01]", 3),
    ("a[1]x", 5),
    ("a.0[1]", 4),
    ("a.1x", 4),
]


@pytest.mark.parametrize("text", GOOD)
def test_parse_and_str_round_trip(text: str) -> None:
    """Parsing canonical text and formatting it gives the same text back."""
    assert str(Address.parse(text)) == text


@pytest.mark.parametrize(("text", "column"), BAD)
def test_parse_rejects_bad_text_with_column(text: str, column: int) -> None:
    """A bad address raises AddressError carrying the text and the 1-based column."""
    with pytest.raises(AddressError) as caught:
        Address.parse(text)
    assert caught.value.text == text
    assert caught.value.column == column
    assert f"column {column}" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("dev-cycle.0.implement", "implement"),
        ("stages.0", "stages"),
        ("loop[2]", "loop"),
        ("outer.1.fan[3]", "fan"),
        ("outer.1.fan[3].deploy", "deploy"),
        ("a", "a"),
    ],
)
def test_name_is_last_name_segment(text: str, name: str) -> None:
    """``name`` is the last name segment, skipping iterations and indexes."""
    assert Address.parse(text).name == name


@pytest.mark.parametrize(
    ("text", "parent"),
    [
        ("a.b", "a"),
        ("a.0", "a"),
        ("a[0]", "a"),
        ("a[0][1]", "a[0]"),
        ("outer.1.fan[3].deploy", "outer.1.fan[3]"),
    ],
)
def test_parent_drops_last_segment_or_index(text: str, parent: str) -> None:
    """``parent`` is the address without its last segment or index."""
    assert str(Address.parse(text).parent) == parent


def test_root_has_no_parent() -> None:
    """A one-name address is a root."""
    root = Address.root("build")
    assert root.parent is None
    assert root.is_root
    assert not root.child("x").is_root


def test_builders_match_parsed_addresses() -> None:
    """child, iteration and item build the same address that parsing gives."""
    built = Address.root("outer").iteration(1).child("fan").item(3).child("deploy")
    parsed = Address.parse("outer.1.fan[3].deploy")
    assert built == parsed
    assert hash(built) == hash(parsed)
    assert str(built) == "outer.1.fan[3].deploy"
    assert built.parent is not None
    assert str(built.parent.parent) == "outer.1.fan"
    assert {parsed: "x"}[built] == "x"


def test_equality_is_by_text_and_not_with_str() -> None:
    """Addresses compare by canonical text, never equal to a plain string."""
    assert Address.parse("a.0") == Address.root("a").iteration(0)
    assert Address.parse("a.0") != Address.parse("a[0]")
    assert Address.parse("a") != "a"
    assert hash(Address.parse("a.b")) == hash("a.b")


@pytest.mark.parametrize("name", ["", "1x", "a.b", "a[0]", "x y"])
def test_child_rejects_bad_name(name: str) -> None:
    """child() validates its name segment and locates the problem."""
    with pytest.raises(AddressError) as caught:
        Address.root("abc").child(name)
    assert caught.value.column == len("abc.") + 1


def test_root_rejects_bad_name() -> None:
    """root() validates its name."""
    with pytest.raises(AddressError):
        Address.root("0")


def test_negative_numbers_are_rejected() -> None:
    """Iterations and item indexes are non-negative."""
    with pytest.raises(AddressError):
        Address.root("a").iteration(-1)
    with pytest.raises(AddressError):
        Address.root("a").item(-1)


def test_item_cannot_follow_iteration() -> None:
    """``loop.0[1]`` is not an address, so item() refuses to build it."""
    with pytest.raises(AddressError):
        Address.root("loop").iteration(0).item(1)


def test_repr_and_pickle() -> None:
    """repr shows the text; pickling round-trips through the text."""
    address = Address.parse("deploy-each[1].deploy")
    assert repr(address) == "Address('deploy-each[1].deploy')"
    copy = pickle.loads(pickle.dumps(address))
    assert copy == address
    assert copy.name == "deploy"


def test_direct_construction_is_refused() -> None:
    """Addresses come from parse() or root(), never from the constructor."""
    with pytest.raises(TypeError):
        Address()
