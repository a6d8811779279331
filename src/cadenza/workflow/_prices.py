"""A file of model prices (``prices: prices.yaml``, ``cadenza run --prices FILE``).

The file is a YAML or JSON mapping of the same shape as an inline ``prices:``:
``model spec -> {input, output, cachedInput}``, USD per million tokens. What the
prices mean and how a model finds its entry is ``cadenza.llm``'s (docs/prices.md);
this only reads the file and checks its shape.
"""

from __future__ import annotations

import math
from pathlib import Path

import msgspec

from cadenza.errors import CadenzaError

from ._files import FileRefused, read_capped
from ._spec import ModelPrice
from ._yaml import parse_yaml

__all__ = ["MAX_PRICES_BYTES", "PricesInvalid", "prices_from", "read_prices"]

MAX_PRICES_BYTES = 1 << 20
"""The largest prices file read (a price table is a few kilobytes)."""


class PricesInvalid(CadenzaError):
    """A prices file that cannot be read, or does not hold prices."""


def read_prices(path: Path, shown: str | None = None) -> dict[str, ModelPrice]:
    """The prices in the YAML or JSON file ``path`` (``shown``: its name in messages).

    Raises:
        PricesInvalid: The file cannot be read, does not parse, or is not a mapping of
            model specs to ``{input, output, cachedInput}`` numbers >= 0.
    """
    name = shown or str(path)
    try:
        text = read_capped(path, MAX_PRICES_BYTES).decode("utf-8-sig")
    except FileRefused as refused:
        raise PricesInvalid(f"prices file {name!r}: {refused}") from None
    except OSError as exc:
        raise PricesInvalid(f"prices file {name!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PricesInvalid(f"prices file {name!r}: the file is not UTF-8 text") from None
    parsed = parse_yaml(text.replace("\t", " ") if name.endswith(".json") else text, name)
    if parsed.problems:
        raise PricesInvalid(str(parsed.problems[0]))
    return prices_from(parsed.value, f"prices file {name!r}")


def prices_from(value: object, where: str) -> dict[str, ModelPrice]:
    """``value`` checked as a prices mapping; ``where`` names it in the error.

    Raises:
        PricesInvalid: It is not a mapping of model specs to prices >= 0.
    """
    try:
        prices = msgspec.convert(value, dict[str, ModelPrice])
    except msgspec.ValidationError as exc:
        raise PricesInvalid(
            f"{where}: {exc}; write model: {{input: USD, output: USD, cachedInput: USD}} "
            "per million tokens"
        ) from None
    for model, price in prices.items():
        for field, amount in (
            ("input", price.input),
            ("output", price.output),
            ("cachedInput", price.cached_input),
        ):
            if amount is not None and not (amount >= 0 and math.isfinite(amount)):
                raise PricesInvalid(f"{where}: {model}.{field} must be a number >= 0, got {amount}")
    return prices
