"""The demo seeder gives finance and leads something to look at, and runs twice safely."""

from __future__ import annotations

import pytest

from billing.models import BudgetStatus, RateCard, Statement, UsageRecord
from scheduler_bridge.gateways import simulated
from tenants.demo import seed_demo
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db


def test_demo_has_rate_cards_a_closed_month_budgets_and_history() -> None:
    simulated.reset()
    seed_demo()
    rows = UsageRecord.objects.count()
    assert RateCard.objects.count() == 4 and rows > 5000
    assert Statement.objects.filter(tenant_slug="vision", total__gt=0).exists()
    assert BudgetStatus.objects.filter(budget__tenant__slug="vision").exists()
    seed_demo()
    assert UsageRecord.objects.count() == rows and RateCard.objects.count() == 4
    from django.contrib.auth import get_user_model

    finance = get_user_model().objects.get(username="finance")
    assert logged_in(finance).get("/billing/").status_code == 200
    lead = get_user_model().objects.get(username="vision-lead")
    page = logged_in(lead).get("/tenants/vision/").content.decode()
    assert 'id="budget-panel"' in page and 'id="idle-findings"' in page
