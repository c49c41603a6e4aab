"""Money and GPU-hours are shown with two decimals, grouped by thousands, in English and
Simplified Chinese; anything that is not a number is shown as it is."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.template import Context, Template
from django.utils import translation

TEMPLATE = Template(
    "{% load tidegate %}{{ amount|money:currency }} | {{ amount|money }} | {{ hours|gpu_hours }}"
)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_money_and_gpu_hours_are_grouped_with_two_decimals(language: str) -> None:
    with translation.override(language):
        text = TEMPLATE.render(
            Context({"amount": Decimal("12345.6"), "currency": "EUR", "hours": 1234567.891})
        )
    assert text == "12,345.60 EUR | 12,345.60 | 1,234,567.89"


def test_cents_are_rounded_half_up_and_negative_amounts_keep_their_sign() -> None:
    with translation.override("zh-hans"):
        text = TEMPLATE.render(
            Context({"amount": Decimal("-1234.005"), "currency": "CNY", "hours": Decimal("0")})
        )
    assert text == "-1,234.01 CNY | -1,234.01 | 0.00"


def test_a_value_that_is_not_a_number_is_shown_as_it_is() -> None:
    text = TEMPLATE.render(Context({"amount": "n/a", "currency": "EUR", "hours": None}))
    assert text == "n/a | n/a | "
