"""Kubernetes resource quantities ("8", "500m", "80Gi", "1e3") as exact Decimals.

Grammar from the Kubernetes API reference (``resource.Quantity``): a signed decimal
number followed by a binary suffix (Ki..Ei), a decimal suffix (n, u, m, "", k..E) or a
decimal exponent (e3, E-2).
"""

from __future__ import annotations

import re
from decimal import ROUND_FLOOR, Decimal

_QUANTITY = re.compile(
    r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


class InvalidQuantity(ValueError):
    pass


def parse_quantity(value: str | int) -> Decimal:
    """The quantity's value in base units. Raises InvalidQuantity for anything else."""
    if isinstance(value, bool):
        raise InvalidQuantity(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    match = _QUANTITY.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise InvalidQuantity(f"{value!r} is not a quantity (expected e.g. 8, 500m, 80Gi)")
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    if suffix:
        return number.scaleb(int(suffix[1:]))
    return number


def is_quantity(value: object) -> bool:
    try:
        parse_quantity(value)  # type: ignore[arg-type]
    except InvalidQuantity:
        return False
    return True


def quantity_to_int(value: str | int) -> int:
    """Whole base units, rounded down (``3500m`` -> 3)."""
    return int(parse_quantity(value).to_integral_value(rounding=ROUND_FLOOR))


def resource_amounts(resources: dict[str, str] | None) -> dict[str, int]:
    """A resource list (``{"cpu": "500m", "nvidia.com/gpu": "8"}``) as whole amounts;
    entries that are not quantities are skipped rather than failing a whole inventory."""
    amounts: dict[str, int] = {}
    for name, value in (resources or {}).items():
        try:
            amounts[name] = quantity_to_int(value)
        except InvalidQuantity:
            continue
    return amounts
