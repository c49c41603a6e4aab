"""The role matrix of every billing endpoint: finance reads its subtree, leads their team,
plain members see no money (404), outsiders get 404 for everything of others."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from billing.models import (
    Adjustment,
    BillingPeriod,
    Budget,
    BudgetAlert,
    Statement,
    TenantBillingSettings,
    UsageRecord,
)
from billing.statements.periods import adjustment_create, period_close
from tenants.models import Role
from tests.billing.conftest import FEB, MAR, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import ROLE_NAMES, Cast, client_for
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def books(cast: Cast, gpu: GpuCluster) -> dict[str, Any]:
    """February closed with usage of vision, speech and globex; budgets, an alert, an
    adjustment and settings on vision; March open with a little usage."""
    day = FEB + timedelta(days=2)
    record_usage(cast.team_a, gpu.h100, day, hours=3, devices=2, busy_ratio="0.01", pod="v")
    record_usage(cast.team_b, gpu.h100, day, hours=2, pod="s", busy_ratio="0.5")
    record_usage(cast.other_org, gpu.h100, day, hours=4, pod="g", namespace="globex-train")
    period_close(actor=None, period=BillingPeriod.objects.get(name="2026-02"))
    record_usage(cast.team_a, gpu.h100, MAR, hours=1, pod="v-mar")
    budget = Budget.objects.create(tenant=cast.team_a, amount=Decimal("100.00"), currency="USD")
    globex_budget = Budget.objects.create(
        tenant=cast.other_org, amount=Decimal("9.00"), currency="USD"
    )
    BudgetAlert.objects.create(
        budget=budget,
        period_name="2026-03",
        threshold=50,
        spent=Decimal(50),
        amount=Decimal(100),
        currency="USD",
    )
    adjustment = adjustment_create(
        actor=cast.platform_admin,
        tenant=cast.team_a,
        period=BillingPeriod.objects.get(name="2026-03"),
        amount=Decimal("-1.00"),
        currency="USD",
        reason="goodwill",
    )
    TenantBillingSettings.objects.create(tenant=cast.team_a, mode="showback")
    return {
        "vision_statement": Statement.objects.get(tenant_slug="vision"),
        "globex_statement": Statement.objects.get(tenant_slug="globex"),
        "vision_usage": UsageRecord.objects.filter(tenant=cast.team_a).first(),
        "budget": budget,
        "globex_budget": globex_budget,
        "adjustment": adjustment,
        "card": gpu.card,
    }


VISION_READ = {
    "platform_admin": 200,
    "dept_admin": 200,
    "finance": 200,
    "lead": 200,
    "member": 404,
    "outsider": 404,
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_reading_vision_money_is_for_its_admins_finance_and_lead(
    books: dict[str, Any], cast: Cast, role: str
) -> None:
    client = client_for(cast.user(role))
    urls = [
        f"/api/v1/billing/statements/{books['vision_statement'].pk}/",
        f"/api/v1/billing/statements/{books['vision_statement'].pk}/workloads/",
        f"/api/v1/billing/usage/{books['vision_usage'].pk}/",
        f"/api/v1/billing/budgets/{books['budget'].pk}/",
        f"/api/v1/billing/adjustments/{books['adjustment'].pk}/",
        "/api/v1/billing/tenant-settings/vision/",
    ]
    for url in urls:
        assert client.get(url).status_code == VISION_READ[role], (url, role)


GLOBEX_READ = dict.fromkeys(ROLE_NAMES, 404) | {"platform_admin": 200, "outsider": 200}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_another_organisations_money_is_404(books: dict[str, Any], cast: Cast, role: str) -> None:
    client = client_for(cast.user(role))
    assert (
        client.get(f"/api/v1/billing/statements/{books['globex_statement'].pk}/").status_code
        == GLOBEX_READ[role]
    )
    assert (
        client.get(f"/api/v1/billing/budgets/{books['globex_budget'].pk}/").status_code
        == GLOBEX_READ[role]
    )


def _slugs(rows: list[dict[str, Any]], key: str = "tenant") -> set[str]:
    return {row[key] for row in rows}


EXPECTED_TENANTS = {
    "platform_admin": {"vision", "speech", "globex"},
    "dept_admin": {"vision", "speech"},
    "finance": {"vision", "speech"},
    "lead": {"vision"},
    "member": set(),
    "outsider": {"globex"},
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_lists_hold_only_the_callers_subtrees(books: dict[str, Any], cast: Cast, role: str) -> None:
    client = client_for(cast.user(role))
    usage = client.get("/api/v1/billing/usage/?period=2026-02").json()["results"]
    assert _slugs(usage) == EXPECTED_TENANTS[role]
    statements = client.get("/api/v1/billing/statements/?period=2026-02").json()["results"]
    charged = {
        s["tenant"] for s in statements if Decimal(s["total"]) != 0 and s["tenant"] != "__idle__"
    }
    assert charged == EXPECTED_TENANTS[role]
    assert ("__idle__" in {s["tenant"] for s in statements}) == (role == "platform_admin")
    budgets = client.get("/api/v1/billing/budgets/").json()["results"]
    assert _slugs(budgets) == EXPECTED_TENANTS[role] - {"speech"}
    alerts = client.get("/api/v1/billing/budget-alerts/").json()["results"]
    assert bool(alerts) == ("vision" in EXPECTED_TENANTS[role])
    adjustments = client.get("/api/v1/billing/adjustments/").json()["results"]
    assert bool(adjustments) == ("vision" in EXPECTED_TENANTS[role])
    cards = client.get("/api/v1/billing/rate-cards/").json()["results"]
    assert bool(cards) == (role != "member")  # prices are shared by all who read money
    periods = client.get("/api/v1/billing/periods/").json()["results"]
    assert bool(periods) == (role != "member")


REPORT = dict.fromkeys(ROLE_NAMES, 200) | {"member": 404}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_reports_and_exports_are_scoped(books: dict[str, Any], cast: Cast, role: str) -> None:
    client = client_for(cast.user(role))
    spend = client.get("/api/v1/billing/reports/spend/?period=2026-02&group_by=tenant")
    assert spend.status_code == REPORT[role]
    exported = client.get("/api/v1/billing/exports/?period=2026-02&as=csv")
    assert exported.status_code == REPORT[role]
    efficiency = client.get("/api/v1/billing/reports/efficiency/?since=2026-02-01T00:00:00Z")
    idle = client.get("/api/v1/billing/reports/idle/?since=2026-02-01T00:00:00Z")
    workloads = client.get("/api/v1/billing/reports/workloads/?period=2026-02")
    for response in (efficiency, idle, workloads):
        assert response.status_code == REPORT[role]
    if REPORT[role] != 200:
        return
    expected = EXPECTED_TENANTS[role] | ({"__idle__"} if role == "platform_admin" else set())
    assert {row["key"] for row in spend.json()["rows"]} == expected
    csv_tenants = {line.split(",")[3] for line in exported.content.decode().splitlines()[1:]}
    assert csv_tenants == expected
    assert _slugs(efficiency.json()["rows"]) == EXPECTED_TENANTS[role]
    assert _slugs(idle.json()["rows"]) == EXPECTED_TENANTS[role] & {"vision"}  # vision idles
    assert _slugs(workloads.json()["rows"]) == EXPECTED_TENANTS[role]


SUBTREE = dict.fromkeys(ROLE_NAMES, 200) | {"member": 404, "outsider": 404}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_naming_a_subtree_one_cannot_read_is_404(
    books: dict[str, Any], cast: Cast, role: str
) -> None:
    client = client_for(cast.user(role))
    for url in [
        "/api/v1/billing/reports/spend/?period=2026-02&tenant=vision",
        "/api/v1/billing/exports/?period=2026-02&tenant=vision&as=csv",
        "/api/v1/billing/reports/idle/?tenant=vision",
        "/api/v1/billing/reports/efficiency/?tenant=vision",
        "/api/v1/billing/reports/workloads/?period=2026-02&tenant=vision",
    ]:
        assert client.get(url).status_code == SUBTREE[role], url


BUDGET_WRITE = {
    "platform_admin": 201,
    "dept_admin": 201,
    "finance": 201,
    "lead": 403,
    "member": 404,
    "outsider": 404,  # vision is not a tenant they can see: named, it is not found
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_budgets_are_set_by_admins_and_finance(
    books: dict[str, Any], cast: Cast, role: str
) -> None:
    client = client_for(cast.user(role))
    response = client.post(
        "/api/v1/billing/budgets/",
        {"tenant": "vision", "cadence": "quarter", "amount": "900.00", "currency": "USD"},
        format="json",
    )
    assert response.status_code == BUDGET_WRITE[role], response.content
    assert Budget.objects.filter(cadence="quarter").exists() == (BUDGET_WRITE[role] == 201)
    change = client.patch(
        f"/api/v1/billing/budgets/{books['budget'].pk}/", {"amount": "120.00"}, format="json"
    )
    expected = {201: 200, 403: 403, 404: 404}[BUDGET_WRITE[role]]
    assert change.status_code == expected
    gone = client.delete(f"/api/v1/billing/budgets/{books['budget'].pk}/")
    assert gone.status_code == {200: 204, 403: 403, 404: 404}[expected]


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_adjustments_and_billing_settings_need_admin_or_finance(
    books: dict[str, Any], cast: Cast, role: str
) -> None:
    client = client_for(cast.user(role))
    response = client.post(
        "/api/v1/billing/adjustments/",
        {
            "tenant": "vision",
            "period": "2026-03",
            "amount": "2.50",
            "currency": "USD",
            "reason": "x",
        },
        format="json",
    )
    assert response.status_code == BUDGET_WRITE[role], response.content
    settings_change = client.post(
        "/api/v1/billing/tenant-settings/",
        {"tenant": "vision", "mode": "chargeback", "charge_reserved": True},
        format="json",
    )
    assert settings_change.status_code == BUDGET_WRITE[role]
    withdrawn = client.delete(f"/api/v1/billing/adjustments/{books['adjustment'].pk}/")
    assert withdrawn.status_code == {201: 204, 403: 403, 404: 404}[BUDGET_WRITE[role]]
    assert Adjustment.objects.filter(pk=books["adjustment"].pk).exists() == (
        withdrawn.status_code != 204
    )


PLATFORM_WRITE = {
    "platform_admin": 200,
    "dept_admin": 403,
    "finance": 403,
    "lead": 403,
    "member": 404,
    "outsider": 403,
}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_rate_cards_policy_and_period_close_are_platform_wide(
    books: dict[str, Any], cast: Cast, role: str
) -> None:
    client = client_for(cast.user(role))
    created = client.post(
        "/api/v1/billing/rate-cards/",
        {
            "name": "L4",
            "product": "L4",
            "currency": "USD",
            "reserved_price": "0.5",
            "on_demand_price": "0.8",
            "valid_from": "2026-01-01",
        },
        format="json",
    )
    assert created.status_code == {200: 201, 404: 403}.get(
        PLATFORM_WRITE[role], PLATFORM_WRITE[role]
    )
    card = client.patch(
        f"/api/v1/billing/rate-cards/{books['card'].pk}/", {"name": "x"}, format="json"
    )
    assert card.status_code == PLATFORM_WRITE[role]
    policy = client.post("/api/v1/billing/policy/", {"idle_mode": "spread"}, format="json")
    assert policy.status_code == PLATFORM_WRITE[role]
    closed = client.post("/api/v1/billing/periods/2026-03/close/")
    assert closed.status_code == PLATFORM_WRITE[role]
    reopen = client.post(
        "/api/v1/billing/periods/2026-02/reopen/", {"reason": "check"}, format="json"
    )
    assert reopen.status_code in (
        {200, 409} if role == "platform_admin" else {PLATFORM_WRITE[role]}
    )
    collections = client.get("/api/v1/billing/collections/")
    assert collections.status_code == (200 if role == "platform_admin" else 404)


def test_finance_of_the_only_organisation_closes_periods(books: dict[str, Any], cast: Cast) -> None:
    MembershipFactory(user=cast.finance, tenant=cast.other_org, role=Role.FINANCE)
    response = client_for(cast.finance).post("/api/v1/billing/periods/2026-03/close/")
    assert response.status_code == 200 and response.json()["state"] == "closed"


SHARED = dict.fromkeys(ROLE_NAMES, 200) | {"member": 404}


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_shared_billing_objects_are_for_everyone_who_reads_money(
    books: dict[str, Any], cast: Cast, role: str
) -> None:
    client = client_for(cast.user(role))
    for url in [
        f"/api/v1/billing/rate-cards/{books['card'].pk}/",
        "/api/v1/billing/periods/2026-02/",
        "/api/v1/billing/policy/",
    ]:
        assert client.get(url).status_code == SHARED[role], url
    alert = BudgetAlert.objects.get()
    assert client.get(f"/api/v1/billing/budget-alerts/{alert.pk}/").status_code == VISION_READ[role]
    settings_rows = client.get("/api/v1/billing/tenant-settings/").json()["results"]
    assert bool(settings_rows) == (VISION_READ[role] == 200)


ENDPOINTS = [
    "/api/v1/billing/rate-cards/",
    "/api/v1/billing/policy/",
    "/api/v1/billing/tenant-settings/",
    "/api/v1/billing/usage/",
    "/api/v1/billing/periods/",
    "/api/v1/billing/statements/",
    "/api/v1/billing/adjustments/",
    "/api/v1/billing/budgets/",
    "/api/v1/billing/budget-alerts/",
    "/api/v1/billing/reports/spend/?period=2026-02",
    "/api/v1/billing/reports/efficiency/",
    "/api/v1/billing/reports/idle/",
    "/api/v1/billing/reports/workloads/?period=2026-02",
    "/api/v1/billing/exports/?period=2026-02",
    "/api/v1/billing/collections/",
]


@pytest.mark.parametrize("url", ENDPOINTS)
def test_every_endpoint_needs_a_login(books: dict[str, Any], url: str) -> None:
    from rest_framework.test import APIClient

    assert APIClient().get(url).status_code in (401, 403)
