"""Finance pages show money and GPU-hours grouped by thousands with two decimals
("12,345.60 USD") in English and in Simplified Chinese, never the raw stored number."""

from __future__ import annotations

from decimal import Decimal

import pytest

from billing.models import BillingPeriod, RateCard, Statement
from billing.statements.periods import period_close
from tests.billing.conftest import FEB, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import Cast
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def expensive(cast: Cast, gpu: GpuCluster) -> Statement:
    """February closed with vision's GPU time priced at 1,234.56 an hour: a statement in
    the thousands."""
    RateCard.objects.filter(pk=gpu.card.pk).update(
        reserved_price=Decimal("1234.56"), on_demand_price=Decimal("1234.56")
    )
    record_usage(cast.team_a, gpu.h100, FEB, hours=5, devices=2, job="resnet")
    period_close(actor=None, period=BillingPeriod.objects.get(name="2026-02"))
    statement = Statement.objects.get(tenant=cast.team_a)
    assert statement.total >= 1000  # large enough to need a thousands separator
    return statement


def grouped(amount: Decimal) -> str:
    whole, cents = f"{amount.quantize(Decimal('0.01'))}".split(".")
    return f"{int(whole):,}.{cents}"


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_statement_and_billing_pages_group_amounts_in_both_languages(
    cast: Cast, expensive: Statement, language: str
) -> None:
    client = logged_in(cast.finance)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = language
    shown = f"{grouped(expensive.total)} USD"
    raw = f"{expensive.total} USD"
    for url in (
        f"/billing/statements/{expensive.pk}/",
        "/billing/?period=2026-02",
        "/billing/periods/",
    ):
        page = client.get(url).content.decode()
        assert shown in page, url
        assert raw not in page, url
    statement_page = client.get(f"/billing/statements/{expensive.pk}/").content.decode()
    assert "<td>10.00</td>" in statement_page  # the line's GPU-hours, two decimals
