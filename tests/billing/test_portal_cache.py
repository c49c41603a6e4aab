"""Ledger reads the portal keeps in the cache (spend per day, the open month's usage,
usage per tenant) change the pages as soon as the data under them changes: a new
ledger row, another rate card price. A cached page is the page a cold cache gives."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from billing.models import Budget, RateCard
from billing.usage.metering import floor_hour
from tests.billing.conftest import GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import Cast
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_cache() -> None:
    cache.clear()


def spent_so_far(client: Client) -> list[float]:
    """The burn chart's cumulative spend on the team's page."""
    page = client.get("/tenants/vision/").content.decode()
    found = re.search(r'"name":\s*"Spent so far",\s*"x":\s*\[[^\]]*\],\s*"y":\s*(\[[^\]]*\])', page)
    assert found is not None, "the page draws no burn chart"
    return [float(v) for v in json.loads(found.group(1))]


def finance_home(client: Client) -> tuple[Decimal, list[dict[str, Any]]]:
    response = client.get("/billing/")
    assert response.status_code == 200
    return response.context["report"].total, response.context["efficiency"]


def cold(read: Any, client: Client) -> Any:
    cache.clear()
    return read(client)


def test_the_burn_chart_follows_new_usage_and_new_prices(cast: Cast, gpu: GpuCluster) -> None:
    hour = floor_hour(timezone.now()) - timedelta(hours=2)
    record_usage(cast.team_a, gpu.h100, hour, devices=2)
    Budget.objects.create(tenant=cast.team_a, amount=Decimal("500.00"), currency="USD")
    client = logged_in(cast.lead)
    first = spent_so_far(client)
    assert spent_so_far(client) == first  # read from the cache
    record_usage(cast.team_a, gpu.h100, hour + timedelta(hours=1), devices=2, pod="pod-2")
    more = spent_so_far(client)
    assert more[-1] > first[-1]
    assert more == cold(spent_so_far, client)
    RateCard.objects.filter(pk=gpu.card.pk).update(
        reserved_price=Decimal("4.0000"), on_demand_price=Decimal("6.0000")
    )
    dearer = spent_so_far(client)
    assert dearer[-1] > more[-1]
    assert dearer == cold(spent_so_far, client)


def test_the_open_month_follows_new_usage_and_new_prices(cast: Cast, gpu: GpuCluster) -> None:
    hour = floor_hour(timezone.now()) - timedelta(hours=2)
    record_usage(cast.team_a, gpu.h100, hour, busy_ratio="0.5")
    client = logged_in(cast.finance)
    total, efficiency = finance_home(client)
    assert finance_home(client) == (total, efficiency)  # read from the cache
    record_usage(cast.team_b, gpu.h100, hour + timedelta(hours=1), devices=3, pod="b-1")
    grown_total, grown_efficiency = finance_home(client)
    assert grown_total > total
    assert {row["tenant"] for row in grown_efficiency} == {"vision", "speech"}
    assert (grown_total, grown_efficiency) == cold(finance_home, client)
    RateCard.objects.filter(pk=gpu.card.pk).update(
        reserved_price=Decimal("4.0000"), on_demand_price=Decimal("6.0000")
    )
    dearer, _ = finance_home(client)
    assert dearer > grown_total
    assert dearer == cold(finance_home, client)[0]


def test_cached_usage_is_shown_only_to_those_who_may_read_it(cast: Cast, gpu: GpuCluster) -> None:
    hour = floor_hour(timezone.now()) - timedelta(hours=2)
    record_usage(cast.team_a, gpu.h100, hour, busy_ratio="0.5")
    record_usage(cast.other_org, gpu.h100, hour, pod="g", namespace="globex-train")
    everyone = {row["tenant"] for row in finance_home(logged_in(cast.platform_admin))[1]}
    assert {"vision", cast.other_org.slug} <= everyone
    # the cache now holds every tenant's usage; finance of one organisation sees its own
    mine = {row["tenant"] for row in finance_home(logged_in(cast.finance))[1]}
    assert "vision" in mine and cast.other_org.slug not in mine


def test_the_statement_page_reads_a_constant_number_of_queries_whatever_the_usage(
    cast: Cast, gpu: GpuCluster
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from billing.models import BillingPeriod, Statement
    from billing.statements.periods import period_close
    from tests.billing.conftest import FEB

    record_usage(cast.team_b, gpu.h100, FEB, hours=2, pod="small")
    for pod in range(8):
        record_usage(cast.team_a, gpu.h100, FEB, hours=24, pod=f"big-{pod}", job=f"job-{pod}")
        record_usage(cast.team_a, gpu.mig_1g, FEB, hours=24, pod=f"mig-{pod}", job=f"mig-{pod}")
    period_close(actor=None, period=BillingPeriod.objects.get(name="2026-02"))
    client = logged_in(cast.finance)

    def queries(tenant: Any) -> int:
        statement = Statement.objects.get(tenant=tenant)
        client.get(f"/billing/statements/{statement.pk}/")
        with CaptureQueriesContext(connection) as captured:
            assert client.get(f"/billing/statements/{statement.pk}/").status_code == 200
        return len(captured.captured_queries)

    assert queries(cast.team_b) == queries(cast.team_a)


def test_spend_per_day_prices_again_only_the_day_that_grew(cast: Cast, gpu: GpuCluster) -> None:
    from billing.budgeting.spend import daily_spend
    from tests.billing.conftest import FEB

    groups = {"vision": {cast.team_a.pk}, "research": {cast.team_a.pk, cast.team_b.pk}}
    end = FEB + timedelta(days=4)
    record_usage(cast.team_a, gpu.h100, FEB, hours=60, devices=2)
    record_usage(cast.team_b, gpu.mig_1g, FEB + timedelta(hours=5), hours=40, pod="mig")
    first = daily_spend(groups, FEB, end)
    record_usage(cast.team_b, gpu.h100, FEB + timedelta(days=2, hours=3), hours=2, pod="late")
    grown = daily_spend(groups, FEB, end)
    assert grown.amounts["vision"] == first.amounts["vision"]
    assert grown.amounts["research"][2] > first.amounts["research"][2]
    assert grown.amounts["research"][:2] == first.amounts["research"][:2]
    cache.clear()
    assert daily_spend(groups, FEB, end) == grown
