"""Exact money arithmetic: half-even rounding of exact fractions, and splitting an amount
into parts that add up to it to the last cent. Pure Python, no float."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction

CENTS = 2


def round_half_even(value: Fraction, places: int = CENTS) -> Decimal:
    """``value`` rounded half-even to ``places`` decimals, exactly (never through float)."""
    scaled = value * 10**places
    quotient, remainder = divmod(scaled.numerator, scaled.denominator)
    twice = 2 * remainder
    if twice > scaled.denominator or (twice == scaled.denominator and quotient % 2 == 1):
        quotient += 1
    return Decimal(quotient).scaleb(-places)


def split_exactly(
    total: Decimal, weights: Sequence[Fraction], places: int = CENTS
) -> list[Decimal]:
    """Split ``total`` (with ``places`` decimals) over ``weights``; the parts sum to it.

    Largest remainder: every part is its exact share rounded towards zero to the last
    place, then the units left over go to the largest remainders (ties: earlier first).
    """
    weight_sum = sum(weights, Fraction(0))
    if not weights or weight_sum <= 0:
        return [Decimal(0).scaleb(-places) for _ in weights]
    cents = int(total.scaleb(places))
    sign = -1 if cents < 0 else 1
    exact = [Fraction(abs(cents)) * w / weight_sum for w in weights]
    floors = [int(e) for e in exact]
    left = abs(cents) - sum(floors)
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - floors[i]), i))
    for i in order[:left]:
        floors[i] += 1
    return [Decimal(sign * f).scaleb(-places) for f in floors]
