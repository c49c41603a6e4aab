"""The demo seeder gives finance and leads something to look at, and runs twice safely."""

from __future__ import annotations

import pytest

from billing.demo import forgotten_runs
from billing.models import BudgetStatus, RateCard, Statement, UsageRecord
from scheduler_bridge.demo.replay import HeldRun
from scheduler_bridge.demo.trace import HOUR_S, busy_ratio
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


def held(name: str, team: str, start_h: float, end_h: float) -> HeldRun:
    return HeldRun(name, team, "a100", 1, 0, start_h * HOUR_S, end_h * HOUR_S, 0)


def test_each_team_shows_one_forgotten_job_in_the_week_whatever_the_day() -> None:
    assert busy_ratio("job-14") < 0.05 <= busy_ratio("job-0")  # names the tests rely on
    runs = [
        held("job-0", "vision", 0, 3),  # busy, 3 h in the week
        held("job-1", "vision", 10, 15),  # busy, the longest: shown forgotten
        held("job-14", "nlp", 20, 23),  # nearly idle already for 3 h: nlp needs none
        held("job-2", "nlp", 0, 50),
        held("job-3", "speech", 5, 6.5),  # too short to hold a whole clock hour for sure
        held("job-4", "audio", -100, 1),  # mostly before the week: 1 h inside it
    ]
    assert forgotten_runs(runs, 0.0, 168 * HOUR_S) == {"job-1"}
    assert forgotten_runs(runs, 0.0, 2.5 * HOUR_S) == {"job-0", "job-2"}
