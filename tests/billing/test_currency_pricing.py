"""The pure pricing core converts each line from its card's currency to the currency its
tenant is billed in, exactly, with the rate of the charge's month."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing.charging import pricing
from billing.charging.pricing import IdleMode, Kind
from tests.billing.test_pricing import CARD, FEB, H100, MAR, price, usage

CNY = pricing.Attribution(path="/1/", currency="CNY")
SPANS = {1: [pricing.TenantSpan(FEB, MAR, CNY)]}
RATES = {("2026-02", "EUR", "CNY"): Decimal("7.77777777"), ("2026-01", "EUR", "CNY"): Decimal("7")}


def test_a_line_is_converted_exactly_then_rounded_once() -> None:
    # 1/3 h x 2.10 EUR = 0.70 EUR exactly; 3 such rows in one line: 2.10 EUR x 7.77777777
    priced = price(
        usage(1, H100, 1, at=FEB),
        usage(1, H100, 1, at=FEB + timedelta(days=1)),
        usage(2, H100, 1),
        spans=SPANS,
        exchange_rates=RATES,
    )
    by_tenant = {line.tenant_id: line for line in priced.lines}
    cny = by_tenant[1]
    # 4.20 EUR x 7.77777777 = 32.666666634 -> 32.67 CNY
    assert (cny.amount, cny.currency) == (Decimal("32.67"), "CNY")
    assert (cny.source_amount, cny.source_currency) == (Decimal("4.20"), "EUR")
    assert (cny.exchange_rate, cny.exchange_month) == (Decimal("7.77777777"), "2026-02")
    # a tenant without a billing currency keeps the card's, unconverted
    eur = by_tenant[2]
    assert (eur.amount, eur.currency, eur.exchange_rate) == (Decimal("2.10"), "EUR", None)


def test_a_missing_rate_is_an_error_unless_figures_are_provisional() -> None:
    with pytest.raises(pricing.MissingExchangeRates) as error:
        price(usage(1, H100, 1), spans=SPANS, exchange_rates={})
    assert error.value.missing == [("2026-02", "EUR", "CNY")]
    assert "EUR->CNY in 2026-02" in str(error.value)
    provisional = price(usage(1, H100, 1), spans=SPANS, exchange_rates={}, strict_rates=False)
    assert [(ln.amount, ln.currency) for ln in provisional.lines] == [(Decimal("2.10"), "EUR")]


def test_late_usage_takes_its_usage_months_rate() -> None:
    january = datetime(2026, 1, 20, tzinfo=UTC)
    priced = price(
        usage(1, H100, 10, at=january, usage_period="2026-01"),
        spans=SPANS,
        exchange_rates=RATES,
    )
    (line,) = priced.lines
    assert (line.kind, line.amount, line.exchange_month) == (
        Kind.LATE_USAGE,
        Decimal("147.00"),
        "2026-01",
    )


def test_idle_stays_in_the_platform_currency_and_shares_follow_their_tenant() -> None:
    rates = RATES | {("2026-02", "EUR", "USD"): Decimal("1.1")}
    line_mode = price(
        spans=SPANS,
        exchange_rates=rates,
        idle_mode=IdleMode.LINE,
        idle_currency="USD",
        cards=[CARD],
    )
    assert {(ln.kind, ln.currency) for ln in line_mode.lines} == {(Kind.IDLE, "USD")}
    idle_usd = line_mode.lines[0]
    assert idle_usd.source_currency == "EUR" and idle_usd.exchange_rate == Decimal("1.1")
    spread = price(
        spans=SPANS | {2: [pricing.TenantSpan(FEB, MAR, pricing.Attribution(path="/2/"))]},
        exchange_rates=rates,
        idle_mode=IdleMode.SPREAD,
        idle_currency="USD",
        guarantees={(1, H100.id): 1, (2, H100.id): 1},
    )
    shares = {ln.tenant_id: ln for ln in spread.lines}
    # 8 H100 x 672 h x 2.10 EUR = 11289.60 EUR idle, half each: 5644.80 EUR
    assert (shares[2].amount, shares[2].currency) == (Decimal("5644.80"), "EUR")
    assert (shares[1].currency, shares[1].source_amount) == ("CNY", Decimal("5644.80"))
    # 5644.80 x 7.77777777 = 43904.0 (to the cent)
    assert shares[1].amount == Decimal("43904.00")


def test_an_adjustment_in_another_currency_is_converted() -> None:
    priced = price(
        spans=SPANS,
        exchange_rates=RATES,
        adjustments=[
            pricing.ManualAdjustment(id=1, tenant_id=1, amount=Decimal("-10.00"), currency="EUR")
        ],
    )
    (line,) = priced.lines
    assert (line.amount, line.currency, line.source_amount) == (
        Decimal("-77.78"),
        "CNY",
        Decimal("-10.00"),
    )
