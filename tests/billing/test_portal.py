"""Billing pages: the finance overview, statements, exports and close by role; the budget,
burn and idle-GPU panel on tenant pages for leads (not for plain members)."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from billing.budgeting.budgets import budgets_evaluate
from billing.models import BillingPeriod, Budget, BudgetAlert, Statement
from billing.statements.periods import period_close
from billing.usage.metering import floor_hour
from tests.billing.conftest import FEB, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import ROLE_NAMES, Cast
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def closed(cast: Cast, gpu: GpuCluster) -> BillingPeriod:
    record_usage(cast.team_a, gpu.h100, FEB, hours=2, devices=2)
    record_usage(cast.other_org, gpu.h100, FEB, hours=1, pod="g", namespace="globex-train")
    return period_close(actor=None, period=BillingPeriod.objects.get(name="2026-02"))


HOME = dict.fromkeys(ROLE_NAMES, 200) | {"member": 404}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_finance_overview_is_scoped(closed: BillingPeriod, cast: Cast, role: str) -> None:
    response = logged_in(cast.user(role)).get("/billing/?period=2026-02")
    assert response.status_code == HOME[role]
    if response.status_code != 200:
        return
    page = response.content.decode()
    assert 'id="spend-by-cost-centre"' in page and "tidegate/vendor/plotly.min.js" in page
    assert ("<code>vision</code>" in page) == (role != "outsider")
    assert ("<code>globex</code>" in page) == (role in ("platform_admin", "outsider"))
    assert ('id="close-form"' in page) is False  # February is closed already


STATEMENT = {
    "platform_admin": 200,
    "dept_admin": 200,
    "finance": 200,
    "lead": 200,
    "member": 404,
    "outsider": 404,
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_statement_page_and_export_download(closed: BillingPeriod, cast: Cast, role: str) -> None:
    statement = Statement.objects.get(tenant_slug="vision")
    client = logged_in(cast.user(role))
    response = client.get(f"/billing/statements/{statement.pk}/")
    assert response.status_code == STATEMENT[role]
    if response.status_code == 200:
        page = response.content.decode()
        assert "8.00 USD" in page and 'id="workloads"' in page
        assert "<td>in quota</td>" in page and "<td>usage</td>" not in page  # kinds in words
    export = client.get("/billing/periods/2026-02/export/csv/")
    assert export.status_code == HOME[role]
    if export.status_code == 200:
        tenants = {row["tenant"] for row in csv.DictReader(io.StringIO(export.content.decode()))}
        assert ("vision" in tenants) == (role != "outsider")


def test_the_open_period_page_is_provisional(cast: Cast, gpu: GpuCluster) -> None:
    record_usage(cast.team_a, gpu.h100, floor_hour(timezone.now()) - timedelta(hours=1))
    page = logged_in(cast.finance).get("/billing/").content.decode()
    assert 'id="provisional"' in page


def test_closing_from_the_portal_needs_the_platform_role(cast: Cast, gpu: GpuCluster) -> None:
    record_usage(cast.team_a, gpu.h100, FEB)
    response = logged_in(cast.finance).post("/billing/periods/2026-02/close/")
    assert response.status_code == 302
    assert BillingPeriod.objects.get(name="2026-02").state == "open"
    assert logged_in(cast.member).post("/billing/periods/2026-02/close/").status_code == 404
    admin = logged_in(cast.platform_admin)
    page = admin.get("/billing/?period=2026-02").content.decode()
    form = page[page.rindex("<form", 0, page.index('id="close-form"')) :]
    action = re.search(r'action="([^"]+)"', form)
    assert action is not None and action.group(1) == "/billing/periods/2026-02/close/"
    assert 'data-confirm="Closing 2026-02 freezes' in form  # asks first (portal.js)
    closed = admin.post(action.group(1), follow=True)
    assert closed.redirect_chain[-1][0] == "/billing/?period=2026-02"  # the portal, not the API
    assert "Period 2026-02 closed: its statements are frozen." in closed.content.decode()
    assert BillingPeriod.objects.get(name="2026-02").state == "closed"


PANEL = {"platform_admin": True, "dept_admin": True, "finance": True, "lead": True, "member": False}


@pytest.mark.parametrize("role", [r for r in ROLE_NAMES if r != "outsider"])
def test_tenant_page_shows_budget_burn_and_idle_gpus_to_leads(
    cast: Cast, gpu: GpuCluster, role: str
) -> None:
    now = timezone.now()
    hour = floor_hour(now) - timedelta(hours=1)
    record_usage(cast.team_a, gpu.h100, hour, devices=2, busy_ratio="0.01", pod="sleepy-0")
    Budget.objects.create(
        tenant=cast.team_a, amount=Decimal("5.00"), currency="USD", enforcement="hard"
    )
    budgets_evaluate(now=now)
    page = logged_in(cast.user(role)).get("/tenants/vision/").content.decode()
    assert ('id="budget-panel"' in page) == PANEL[role]
    if PANEL[role]:
        assert 'id="budget-burn"' in page and "sleepy-0" in page
        assert "hard: stops admission when spent" in page
        if hour.month == now.month:
            assert BudgetAlert.objects.filter(threshold=50).exists()
            assert "has used 50 % of its budget" in page


def test_the_billing_navigation_entry_appears_once_routed(
    cast: Cast, monkeypatch: pytest.MonkeyPatch
) -> None:
    from billing.apps import register_nav_entry
    from tenants import context_processors

    monkeypatch.setattr(context_processors, "NAV_ENTRIES", list(context_processors.NAV_ENTRIES))
    register_nav_entry()
    assert 'href="/billing/"' in logged_in(cast.lead).get("/").content.decode()
    assert 'href="/billing/"' not in logged_in(cast.member).get("/").content.decode()


def test_the_panel_stays_away_where_billing_is_not_routed(
    cast: Cast, gpu: GpuCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.urls import NoReverseMatch

    from billing.portal import budgets as portal

    def unrouted(name: str, *args: Any, **kwargs: Any) -> str:
        raise NoReverseMatch(name)

    monkeypatch.setattr(portal, "reverse", unrouted)
    page = logged_in(cast.lead).get("/tenants/vision/")
    assert page.status_code == 200 and 'id="budget-panel"' not in page.content.decode()


def test_the_burn_shown_is_the_rate_the_forecast_uses_and_says_how_it_is_computed(
    cast: Cast, gpu: GpuCluster
) -> None:
    from datetime import UTC, datetime

    from django.utils.formats import date_format

    from billing.models import BudgetStatus
    from scheduler_bridge.workloads.models import Workload

    now = datetime(2026, 3, 10, tzinfo=UTC)
    record_usage(cast.team_a, gpu.h100, now - timedelta(hours=6), hours=6)  # 6 x 2.00
    budget = Budget.objects.create(tenant=cast.team_a, amount=Decimal("200.00"), currency="USD")
    budgets_evaluate(now=now)
    page = logged_in(cast.lead).get("/tenants/vision/").content.decode()
    # 12.00 metered in the 72 h window: 0.17 per hour, 188.00 left lasts past March.
    assert "Burn 0.17 USD/h (average of the last 72 h of metered spend)." in page
    assert "At this rate the budget lasts until the period ends." in page

    Workload.objects.create(
        cluster=gpu.cluster,
        tenant=cast.team_a,
        name="big",
        pod_sets=[],
        submitted_at=now,
        admitted_at=now,
        state=Workload.State.RUNNING,
        flavour=gpu.h100,
        gpus=8,
    )
    budgets_evaluate(now=now)
    status = BudgetStatus.objects.get(budget=budget)
    assert status.forecast_exhausted_at == now + timedelta(hours=11, minutes=45)  # 188 / 16
    page = logged_in(cast.lead).get("/tenants/vision/").content.decode()
    burn = page[page.index('id="burn"') :]
    burn = burn[: burn.index("</p>")]
    assert (
        "Burn 16.00 USD/h (what the work running now costs per hour; the average of the "
        "last 72 h of metered spend is lower (0.17/h))." in burn
    )
    shown = date_format(status.forecast_exhausted_at, "SHORT_DATETIME_FORMAT")
    assert f'runs out on <strong id="forecast">{shown}</strong>' in burn
    # The rate shown and the forecast agree: what is left / the rate = the time to run out.
    left = budget.amount - status.spent
    assert left / Decimal("16.00") == Decimal("11.75")
    assert '"name":"At this burn rate"' in page  # the chart draws the same projection


@pytest.mark.parametrize(
    "recent, running, shown, basis",
    [("1.00", "16.00", "16.00", "running"), ("5.00", "2.00", "5.00", "recent")],
)
def test_the_burn_rate_is_the_larger_of_recent_spend_and_running_work(
    recent: str, running: str, shown: str, basis: str
) -> None:
    from billing.budgeting.budgets import burn_rate

    rate = burn_rate(
        recent_per_hour=Decimal(recent), running_per_hour=Decimal(running), window_hours=72
    )
    assert (rate.per_hour, rate.basis) == (Decimal(shown), basis)
