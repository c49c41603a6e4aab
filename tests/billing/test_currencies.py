"""Currencies: a tenant billed in CNY while the cards price in USD gets CNY statements,
converted exactly with the month's exchange rate; a missing rate refuses the close; a
re-close keeps the rate it froze; totals never add two currencies; the exchange rate
table is kept by platform billing through the API and a page."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from billing.models import (
    BillingPeriod,
    ExchangeRate,
    PricingSnapshot,
    Statement,
    StatementLine,
    TenantBillingSettings,
)
from billing.statements.periods import period_close, period_reopen
from tests.billing.conftest import FEB, MAR, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import Cast, client_for
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db

RATES = "/api/v1/billing/exchange-rates/"


def vision_in_cny(cast: Cast) -> None:
    TenantBillingSettings.objects.create(tenant=cast.team_a, currency="CNY")


def rate(month: str, value: str, source: str = "USD", target: str = "CNY") -> ExchangeRate:
    return ExchangeRate.objects.create(
        month=month, from_currency=source, to_currency=target, rate=Decimal(value)
    )


def february(cast: Cast, gpu: GpuCluster) -> BillingPeriod:
    """vision: 2 H100 x 10 h (40.00 USD), 4 x 1g.5gb x 7 h (8.00 USD), 1 x 3g.20gb x 1 h
    (6/7 USD); speech: 5 h borrowed at the spot multiplier (7.50 USD)."""
    day = FEB + timedelta(days=3)
    record_usage(cast.team_a, gpu.h100, day, hours=10, devices=2, pod="train")
    record_usage(cast.team_a, gpu.mig_1g, day, hours=7, devices=4, pod="infer")
    record_usage(cast.team_a, gpu.mig_3g, day, hours=1, devices=1, pod="small")
    record_usage(cast.team_b, gpu.h100, day, hours=5, borrowed=1, priority="spot", pod="spot")
    return BillingPeriod.objects.get(name="2026-02")


def lines_of(slug: str, period: str = "2026-02", revision: int = 1) -> dict[str, tuple]:
    statement = Statement.objects.get(tenant_slug=slug, period__name=period, revision=revision)
    return {
        line.flavour_name: (
            line.amount,
            line.currency,
            line.source_amount,
            line.source_currency,
            line.exchange_rate,
            line.exchange_month,
        )
        for line in statement.lines.all()
    }


def test_a_cny_tenant_with_usd_cards_closes_to_cny_exact_to_the_cent(
    cast: Cast, gpu: GpuCluster
) -> None:
    vision_in_cny(cast)
    rate("2026-02", "7.1234")
    rate("2026-01", "6.5")  # another month's rate is not used
    period_close(actor=cast.platform_admin, period=february(cast, gpu))
    fx = (Decimal("7.12340000"), "2026-02")
    # 40 x 7.1234 = 284.936 -> 284.94; 8 x 7.1234 = 56.9872 -> 56.99; the 3g line is
    # 6/7 USD x 7.1234 = 6.10577 -> 6.11 (rounding 0.86 USD first would give 6.13).
    assert lines_of("vision") == {
        "h100-80gb": (Decimal("284.94"), "CNY", Decimal("40.00"), "USD", *fx),
        "a100-sxm4-40gb-mig-1g.5gb": (Decimal("56.99"), "CNY", Decimal("8.00"), "USD", *fx),
        "a100-sxm4-40gb-mig-3g.20gb": (Decimal("6.11"), "CNY", Decimal("0.86"), "USD", *fx),
    }
    vision = Statement.objects.get(tenant_slug="vision")
    assert (vision.currency, vision.total) == ("CNY", Decimal("348.04"))
    # speech is billed in the platform's USD, unconverted; idle stays the platform's (USD)
    assert lines_of("speech")["h100-80gb"] == (Decimal("7.50"), "USD", None, "", None, "")
    assert Statement.objects.get(tenant_slug="speech").currency == "USD"
    idle = Statement.objects.get(tenant__isnull=True)
    assert idle.currency == "USD" and set(idle.lines.values_list("currency", flat=True)) == {"USD"}
    page = logged_in(cast.finance).get(f"/billing/statements/{vision.pk}/")
    assert page.status_code == 200
    assert "1 USD = 7.1234 CNY (2026-02)" in page.content.decode()
    api = client_for(cast.finance).get(f"/api/v1/billing/statements/{vision.pk}/").json()
    assert {
        (ln["currency"], ln["source_currency"], ln["exchange_rate"]) for ln in api["lines"]
    } == {("CNY", "USD", "7.12340000")}


def test_late_usage_is_converted_with_its_own_months_rate(cast: Cast, gpu: GpuCluster) -> None:
    vision_in_cny(cast)
    rate("2026-02", "7.0")
    rate("2026-03", "7.5")
    period_close(actor=cast.platform_admin, period=february(cast, gpu))
    # two hours of 20 February arrive after the close, one hour of March is March's own
    record_usage(cast.team_a, gpu.h100, FEB + timedelta(days=19), hours=2, pod="late")
    record_usage(cast.team_a, gpu.h100, MAR + timedelta(days=2), hours=1, pod="march")
    period_close(actor=cast.platform_admin, period=BillingPeriod.objects.get(name="2026-03"))
    lines = {
        line.kind: (line.amount, line.source_amount, line.exchange_rate, line.exchange_month)
        for line in StatementLine.objects.filter(
            statement__period__name="2026-03", statement__tenant_slug="vision"
        )
    }
    assert lines == {
        "late_usage": (Decimal("28.00"), Decimal("4.00"), Decimal("7.00000000"), "2026-02"),
        "usage": (Decimal("15.00"), Decimal("2.00"), Decimal("7.50000000"), "2026-03"),
    }


def test_a_missing_rate_refuses_the_close_and_writes_nothing(cast: Cast, gpu: GpuCluster) -> None:
    vision_in_cny(cast)
    february(cast, gpu)
    rate("2026-01", "7.0")  # January's rate does not price February
    response = client_for(cast.platform_admin).post("/api/v1/billing/periods/2026-02/close/")
    assert response.status_code == 409, response.content
    detail = response.json()["detail"]
    assert "USD → CNY (2026-02)" in detail and "/api/v1/billing/exchange-rates/" in detail
    period = BillingPeriod.objects.get(name="2026-02")
    assert period.state == "open" and period.close_token == ""
    assert not Statement.objects.exists() and not StatementLine.objects.exists()
    assert not PricingSnapshot.objects.exists()
    # once the rate is recorded the same close goes through, with that rate
    rate("2026-02", "7.2")
    period_close(actor=cast.platform_admin, period=period)
    # 40 x 7.2 + 8 x 7.2 + 6/7 x 7.2 = 288.00 + 57.60 + 6.17
    assert Statement.objects.get(tenant_slug="vision").total == Decimal("351.77")


def test_a_reclose_keeps_the_rate_the_first_close_froze(cast: Cast, gpu: GpuCluster) -> None:
    vision_in_cny(cast)
    feb_rate = rate("2026-02", "7.1234")
    period = period_close(actor=cast.platform_admin, period=february(cast, gpu))
    feb_rate.rate = Decimal("9.0")
    feb_rate.save()
    period_reopen(actor=cast.platform_admin, period=period, reason="late meter fix")
    period_close(actor=cast.platform_admin, period=BillingPeriod.objects.get(pk=period.pk))
    assert lines_of("vision", revision=2) == lines_of("vision", revision=1)
    assert Statement.objects.get(tenant_slug="vision", revision=2).total == Decimal("348.04")
    # asked to re-price, the close takes today's rate
    period_reopen(actor=cast.platform_admin, period=period, reason="rate fixed", reprice=True)
    period_close(actor=cast.platform_admin, period=BillingPeriod.objects.get(pk=period.pk))
    assert lines_of("vision", revision=3)["h100-80gb"][0] == Decimal("360.00")


def test_two_currencies_are_never_added_into_one_total(cast: Cast, gpu: GpuCluster) -> None:
    vision_in_cny(cast)
    rate("2026-02", "7.1234")
    period_close(actor=cast.platform_admin, period=february(cast, gpu))
    client = client_for(cast.platform_admin)
    report = client.get("/api/v1/billing/reports/spend/?period=2026-02&group_by=tenant").json()
    assert report["totals"]["CNY"] == "348.04"
    usd = Decimal(report["totals"]["USD"])
    assert report["currency"] == "USD" and Decimal(report["total"]) == usd
    assert usd == sum(
        Statement.objects.filter(currency="USD").values_list("total", flat=True), Decimal(0)
    )
    rows = {(r["key"], r["currency"]) for r in report["rows"]}
    assert ("vision", "CNY") in rows and ("speech", "USD") in rows
    by_centre = client.get(
        "/api/v1/billing/reports/spend/?period=2026-02&group_by=cost_center"
    ).json()
    assert all(r["currency"] in {"USD", "CNY"} for r in by_centre["rows"])
    pages = logged_in(cast.platform_admin)
    periods = pages.get("/billing/periods/").content.decode()
    # the periods page sums the tenants' statements (idle apart), per currency
    assert "348.04 CNY · 7.50 USD" in periods
    home = pages.get("/billing/?period=2026-02").content.decode()
    assert "348.04 CNY" in home


def test_platform_billing_records_rates_through_the_api(cast: Cast) -> None:
    client = client_for(cast.platform_admin)
    made = client.post(
        RATES,
        {"month": "2026-02", "from_currency": "USD", "to_currency": "CNY", "rate": "7.1234"},
        format="json",
    )
    assert made.status_code == 201, made.content
    assert made.json()["created_by"] == cast.platform_admin.username
    changed = client.patch(f"{RATES}{made.json()['id']}/", {"rate": "7.2"}, format="json")
    assert changed.status_code == 200 and changed.json()["rate"] == "7.20000000"
    assert client_for(cast.finance).get(RATES).json()["count"] == 1
    # finance of one organisation reads the rates but does not set everyone's
    refused = client_for(cast.finance).post(
        RATES,
        {"month": "2026-03", "from_currency": "USD", "to_currency": "CNY", "rate": "7"},
        format="json",
    )
    assert refused.status_code == 403


@pytest.mark.parametrize(
    ("body", "field", "words", "status"),
    [  # 400: the schema refuses it; 422: it matches the schema, the rule refuses it
        ({"to_currency": "USD"}, "to_currency", "Both sides are USD", 422),
        ({"rate": "0"}, "rate", "above 0", 422),
        ({"rate": "-1.5"}, "rate", "above 0", 422),
        ({"month": "2026-13"}, "month", "YYYY-MM", 400),
        ({"month": "Feb"}, "month", "YYYY-MM", 400),
        ({"from_currency": "usd"}, "from_currency", "three-letter", 400),
        ({"rate": "abc"}, "rate", "", 400),
    ],
)
def test_bad_rates_are_refused_with_field_errors(
    cast: Cast, body: dict[str, str], field: str, words: str, status: int
) -> None:
    good = {"month": "2026-02", "from_currency": "USD", "to_currency": "CNY", "rate": "7.1"}
    response = client_for(cast.platform_admin).post(RATES, good | body, format="json")
    assert response.status_code == status, response.content
    payload = response.json()
    assert field in payload and words in str(payload[field]), payload
    assert not ExchangeRate.objects.exists()


def test_a_second_rate_for_the_same_month_and_pair_is_refused(cast: Cast) -> None:
    rate("2026-02", "7.1")
    body = {"month": "2026-02", "from_currency": "USD", "to_currency": "CNY", "rate": "7.3"}
    response = client_for(cast.platform_admin).post(RATES, body, format="json")
    assert response.status_code == 422 and "already has a rate" in str(response.json()["month"])
    assert ExchangeRate.objects.get().rate == Decimal("7.1")


def test_outsiders_find_no_exchange_rates(cast: Cast) -> None:
    made = rate("2026-02", "7.1")
    for user in (cast.outsider, cast.member, cast.lead):
        client = client_for(user)
        assert client.get(RATES).json()["count"] == 0
        assert client.get(f"{RATES}{made.pk}/").status_code == 404
        body = {"month": "2026-03", "from_currency": "USD", "to_currency": "CNY", "rate": "7"}
        assert client.post(RATES, body, format="json").status_code == 404
        assert client.patch(f"{RATES}{made.pk}/", {"rate": "1"}, format="json").status_code == 404
        assert client.delete(f"{RATES}{made.pk}/").status_code == 404
        assert logged_in(user).get("/billing/exchange-rates/").status_code == 404
    assert ExchangeRate.objects.get().rate == Decimal("7.1")


def test_the_exchange_rates_page_records_a_rate_and_explains_bad_input(cast: Cast) -> None:
    page = logged_in(cast.platform_admin)
    good = {"month": "2026-02", "from_currency": "USD", "to_currency": "CNY", "rate": "7.1234"}
    bad = page.post("/billing/exchange-rates/", good | {"to_currency": "USD", "rate": "0"})
    assert bad.status_code == 400
    text = bad.content.decode()
    assert "Both sides are USD" in text and "above 0" in text
    bad_month = page.post("/billing/exchange-rates/", good | {"month": "2026-2"})
    assert bad_month.status_code == 400 and "YYYY-MM" in bad_month.content.decode()
    assert not ExchangeRate.objects.exists()
    assert page.post("/billing/exchange-rates/", good).status_code == 302
    listed = page.get("/billing/exchange-rates/").content.decode()
    assert "1 USD = 7.1234 CNY" in listed
    # saving the same month and pair again replaces its rate
    assert page.post("/billing/exchange-rates/", good | {"rate": "7.3"}).status_code == 302
    assert ExchangeRate.objects.get().rate == Decimal("7.3")
    # finance reads the page but cannot record a rate
    finance = logged_in(cast.finance)
    assert finance.get("/billing/exchange-rates/").status_code == 200
    assert finance.post("/billing/exchange-rates/", good).status_code == 404


def test_the_exchange_rates_page_and_a_converted_statement_speak_chinese(
    cast: Cast, gpu: GpuCluster
) -> None:
    from tests.workloads.test_portal_languages import data_values, untranslated, visible_text

    vision_in_cny(cast)
    rate("2026-02", "7.1234")
    period_close(actor=cast.platform_admin, period=february(cast, gpu))
    vision = Statement.objects.get(tenant_slug="vision")
    client = logged_in(cast.platform_admin)
    data = data_values() | {gpu.card.name, "any GPU"}
    for url in ["/billing/exchange-rates/", f"/billing/statements/{vision.pk}/"]:
        response = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans")
        assert response.status_code == 200, url
        text = response.content.decode()
        assert "汇率" in text
        left = [t for t in visible_text(text) if untranslated(t, data)]
        assert left == [], (url, left)


def test_a_tenant_sets_its_billing_currency_through_the_api(cast: Cast) -> None:
    client = client_for(cast.finance)
    made = client.post(
        "/api/v1/billing/tenant-settings/",
        {"tenant": "vision", "mode": "chargeback", "currency": "CNY"},
        format="json",
    )
    assert made.status_code == 201 and made.json()["currency"] == "CNY"
    bad = client.post(
        "/api/v1/billing/tenant-settings/",
        {"tenant": "vision", "mode": "chargeback", "currency": "cny"},
        format="json",
    )
    assert bad.status_code == 400 and "currency" in bad.json()


def test_a_cny_budget_counts_usd_spend_at_the_months_rate(cast: Cast, gpu: GpuCluster) -> None:
    from billing.budgeting.budgets import budget_create, budgets_evaluate
    from billing.models import BudgetStatus

    now = MAR + timedelta(days=10)
    vision_in_cny(cast)
    rate("2026-03", "7.1")
    budget = budget_create(
        actor=cast.finance,
        tenant=cast.team_a,
        amount=Decimal("1000.00"),
        currency="CNY",
        now=now,
    )
    # 2 H100 x 18 h x 2.00 USD = 72.00 USD = 511.20 CNY
    record_usage(cast.team_a, gpu.h100, now - timedelta(hours=18), hours=18, devices=2, pod="t")
    budgets_evaluate(now=now)
    status = BudgetStatus.objects.get(budget=budget)
    assert status.spent == Decimal("511.20")
    # a currency neither the cards nor the tenant use is still refused
    refused = client_for(cast.finance).post(
        "/api/v1/billing/budgets/",
        {"tenant": "speech", "amount": "500.00", "currency": "CNY", "enforcement": "soft"},
        format="json",
    )
    assert refused.status_code == 422 and "currency" in refused.json()


def test_the_close_confirmation_states_each_currency_apart(cast: Cast, gpu: GpuCluster) -> None:
    vision_in_cny(cast)
    rate("2026-02", "7.1234")
    february(cast, gpu)
    page = logged_in(cast.platform_admin).get("/billing/periods/").content.decode()
    # provisional: the same conversion the close will write
    assert "USD · 348.04 CNY" in page


def test_a_hard_cny_budget_weighs_a_workload_at_the_months_rate(
    cast: Cast, gpu: GpuCluster
) -> None:
    from billing.budgeting.budgets import budget_create
    from billing.budgeting.gate import budget_gate_for_cluster
    from billing.models import BudgetStatus
    from scheduler_bridge.admission import model as m
    from tests.factories import WorkloadFactory

    now = MAR + timedelta(days=10)
    vision_in_cny(cast)
    rate("2026-03", "7")
    budget = budget_create(
        actor=cast.finance,
        tenant=cast.team_a,
        amount=Decimal("500.00"),
        currency="CNY",
        enforcement="hard",
        now=now,
    )
    BudgetStatus.objects.create(
        budget=budget,
        period_name="2026-03",
        window_start=MAR,
        window_end=MAR + timedelta(days=31),
        spent=Decimal("0.00"),
        evaluated_at=now,
    )
    job = WorkloadFactory(cluster=gpu.cluster, tenant=cast.team_a)
    # 4 H100 within vision's guarantee at 2.00 USD for 10 h = 80.00 USD = 560.00 CNY
    pending = m.PendingWorkload(
        id=str(job.pk),
        tenant_id="vision",
        pod_sets=(m.PodSet(count=2, gpus_per_pod=2, flavours=("h100-80gb",), name="t"),),
        max_run_time_s=10 * 3600,
    )
    allowed, reason = budget_gate_for_cluster(gpu.cluster, now=now).may_start("vision", pending)
    assert not allowed and reason is not None
    assert "560.00 CNY, 500.00 CNY left of 500.00 CNY" in reason


def test_the_csv_currency_is_each_lines_billing_currency(cast: Cast, gpu: GpuCluster) -> None:
    vision_in_cny(cast)
    rate("2026-02", "7.1234")
    period_close(actor=cast.platform_admin, period=february(cast, gpu))
    response = client_for(cast.platform_admin).get("/api/v1/billing/exports/?period=2026-02&as=csv")
    rows = response.content.decode().splitlines()
    header = rows[0].split(",")
    assert header[-3:] == ["amount", "currency", "mode"]  # the columns are unchanged
    table = [dict(zip(header, row.split(","), strict=True)) for row in rows[1:]]
    vision = [r for r in table if r["tenant"] == "vision"]
    assert vision and all(r["currency"] == "CNY" for r in vision)
    assert any(r["amount"] == "284.94" for r in vision)
    assert all(r["currency"] == "USD" for r in table if r["tenant"] != "vision")


def test_adjustments_are_entered_in_the_tenants_billing_currency(
    cast: Cast, gpu: GpuCluster
) -> None:
    vision_in_cny(cast)
    record_usage(cast.team_b, gpu.h100, MAR, hours=1, pod="march")
    client = client_for(cast.finance)
    body = {"tenant": "vision", "period": "2026-03", "amount": "-10.00", "reason": "x"}
    wrong = client.post("/api/v1/billing/adjustments/", body | {"currency": "USD"}, format="json")
    assert wrong.status_code == 422 and "billed in CNY" in wrong.json()["detail"]
    made = client.post("/api/v1/billing/adjustments/", body | {"currency": "CNY"}, format="json")
    assert made.status_code == 201, made.content
