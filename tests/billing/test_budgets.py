"""Budgets: validation, spend and forecast, alerts that fire once (even with two workers),
and the admission gate that a hard budget closes."""

from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core import mail
from django.db import connection

from billing.budgeting.budgets import budget_create, budgets_evaluate
from billing.budgeting.gate import budget_gate_for_cluster
from billing.models import Budget, BudgetAlert, BudgetStatus
from scheduler_bridge.admission import model as m
from scheduler_bridge.admission.engine import run_cycle
from scheduler_bridge.workloads.budget_gate import budget_gate_for
from tenants.models import UserPreference
from tests.billing.conftest import MAR, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import Cast, client_for

pytestmark = pytest.mark.django_db
NOW = MAR + timedelta(days=10)


def vision_budget(cast: Cast, amount: str = "100.00", **kw: Any) -> Budget:
    return budget_create(
        actor=cast.finance,
        tenant=cast.team_a,
        amount=Decimal(amount),
        currency="USD",
        enforcement=kw.pop("enforcement", "hard"),
        now=NOW,
        **kw,
    )


def spend(
    cast: Cast, gpu: GpuCluster, hours: int, *, pod: str = "train", start: Any = None
) -> None:
    """2 H100 for ``hours`` hours: 4.00 USD per hour."""
    record_usage(
        cast.team_a,
        gpu.h100,
        start or NOW - timedelta(hours=hours),
        hours=hours,
        devices=2,
        pod=pod,
    )


def test_budget_currency_must_match_the_rate_cards(cast: Cast, gpu: GpuCluster) -> None:
    response = client_for(cast.finance).post(
        "/api/v1/billing/budgets/",
        {"tenant": "vision", "amount": "500.00", "currency": "EUR", "enforcement": "hard"},
        format="json",
    )
    assert response.status_code == 422
    assert "USD" in response.json()["detail"] and "currency" in response.json()
    assert not Budget.objects.exists()


@pytest.mark.parametrize(
    "body, field, status",
    [  # 400: the schema refuses it; 422: it matches the schema, the rule refuses it
        ({"amount": "-5.00"}, "amount", 422),
        ({"amount": "0.00"}, "amount", 422),
        ({"thresholds": [0, 80]}, "thresholds", 422),
        ({"cadence": "week"}, "cadence", 400),
    ],
)
def test_bad_budgets_are_refused_with_the_reason(
    cast: Cast, gpu: GpuCluster, body: dict[str, Any], field: str, status: int
) -> None:
    data = {"tenant": "vision", "amount": "500.00", "currency": "USD"} | body
    response = client_for(cast.finance).post("/api/v1/billing/budgets/", data, format="json")
    assert response.status_code == status and field in response.json(), response.json()
    assert not Budget.objects.exists()


def test_one_budget_per_tenant_and_cadence(cast: Cast, gpu: GpuCluster) -> None:
    vision_budget(cast)
    response = client_for(cast.finance).post(
        "/api/v1/billing/budgets/",
        {"tenant": "vision", "amount": "5.00", "currency": "USD", "cadence": "month"},
        format="json",
    )
    assert (
        response.status_code == 422 and "already has a monthly budget" in response.json()["detail"]
    )


def test_spend_burn_and_forecast_of_a_subtree(cast: Cast, gpu: GpuCluster) -> None:
    budget = vision_budget(cast)
    dept = budget_create(
        actor=cast.finance, tenant=cast.dept, amount=Decimal("1000.00"), currency="USD", now=NOW
    )
    spend(cast, gpu, 18)  # 72.00 in the last 18 h
    record_usage(cast.team_b, gpu.h100, NOW - timedelta(hours=5), hours=5, pod="s")  # 10.00
    record_usage(cast.team_a, gpu.h100, MAR - timedelta(hours=3), hours=2, pod="feb")  # February
    budgets_evaluate(now=NOW)
    status = BudgetStatus.objects.get(budget=budget)
    assert (status.period_name, status.spent) == ("2026-03", Decimal("72.00"))
    # 72.00 over the 72 h window = 1.00 per hour: 28.00 left lasts 28 h.
    assert status.burn_per_hour == Decimal("1.0000")
    assert status.forecast_exhausted_at == NOW + timedelta(hours=28)
    assert BudgetStatus.objects.get(budget=dept).spent == Decimal("82.00")  # whole subtree


def test_running_work_speeds_up_the_forecast(cast: Cast, gpu: GpuCluster) -> None:
    from scheduler_bridge.workloads.models import Workload

    budget = vision_budget(cast)
    spend(cast, gpu, 1)  # 4.00
    Workload.objects.create(
        cluster=gpu.cluster,
        tenant=cast.team_a,
        name="big",
        pod_sets=[],
        submitted_at=NOW,
        admitted_at=NOW,
        state=Workload.State.RUNNING,
        flavour=gpu.h100,
        gpus=8,
    )
    budgets_evaluate(now=NOW)
    status = BudgetStatus.objects.get(budget=budget)
    assert status.running_per_hour == Decimal("16.0000")  # 8 x 2.00
    assert status.forecast_exhausted_at == NOW + timedelta(hours=6)  # 96.00 / 16.00


def test_thresholds_fire_once_each_and_are_mailed_to_leads_finance_and_admins(
    cast: Cast, gpu: GpuCluster, django_capture_on_commit_callbacks: Any
) -> None:
    vision_budget(cast)
    spend(cast, gpu, 20)  # 80.00 = 80 %
    with django_capture_on_commit_callbacks(execute=True):
        assert budgets_evaluate(now=NOW).alerts_fired == 2
    with django_capture_on_commit_callbacks(execute=True):
        assert budgets_evaluate(now=NOW).alerts_fired == 0
    assert sorted(BudgetAlert.objects.values_list("threshold", flat=True)) == [50, 80]
    assert len(mail.outbox) == 2
    assert set(mail.outbox[0].to) == {
        "vision-lead@example.com",
        "money@example.com",
        "dept-admin@example.com",
    }
    assert "80 %" in mail.outbox[1].subject or "80 %" in mail.outbox[0].subject
    spend(cast, gpu, 6, pod="more")  # 104.00
    with django_capture_on_commit_callbacks(execute=True):
        assert budgets_evaluate(now=NOW).alerts_fired == 1
    assert len(mail.outbox) == 3


@pytest.mark.django_db(transaction=True)
def test_two_workers_evaluating_at_once_fire_each_alert_once(cast: Cast, gpu: GpuCluster) -> None:
    vision_budget(cast)
    spend(cast, gpu, 26)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def evaluate() -> None:
        try:
            barrier.wait()
            budgets_evaluate(now=NOW)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=evaluate) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(BudgetAlert.objects.values_list("threshold", flat=True)) == [50, 80, 100]


def pending(
    tenant_id: str, gpus: int = 2, run_time_s: float | None = None, wid: str = "w1"
) -> m.PendingWorkload:
    return m.PendingWorkload(
        id=wid,
        tenant_id=tenant_id,
        pod_sets=(m.PodSet(count=1, gpus_per_pod=gpus, flavours=("h100-80gb",)),),
        max_run_time_s=run_time_s,
    )


def test_an_exhausted_hard_budget_holds_work_back(cast: Cast, gpu: GpuCluster) -> None:
    vision_budget(cast)
    spend(cast, gpu, 25)  # 100.00
    budgets_evaluate(now=NOW)
    gate = budget_gate_for_cluster(gpu.cluster, now=NOW)
    assert gate.may_start(cast.team_a.slug, pending(cast.team_a.slug)) == (
        False,
        "vision budget for 2026-03 exhausted (hard): spent 100.00 of 100.00 USD",
    )
    assert gate.may_start(cast.team_b.slug, pending(cast.team_b.slug)) == (True, None)


def test_a_hard_budget_refuses_work_that_would_pass_what_is_left(
    cast: Cast, gpu: GpuCluster
) -> None:
    vision_budget(cast)
    spend(cast, gpu, 20)  # 80.00 spent, 20.00 left
    budgets_evaluate(now=NOW)
    gate = budget_gate_for_cluster(gpu.cluster, now=NOW)
    allowed, reason = gate.may_start(
        cast.team_a.slug, pending(cast.team_a.slug, run_time_s=6 * 3600)
    )
    assert not allowed and reason == (
        "vision budget for 2026-03: this workload would cost about 24.00 USD, "
        "20.00 USD left of 100.00 USD allowed (hard)"
    )
    # One hour of 2 GPUs costs 4.00 within vision's guarantee of 4 and 6.00 borrowed
    # beyond it: 4 + 4 + 6 + 6 spend what is left within one cycle, the fifth waits.
    answers = [
        gate.may_start(cast.team_a.slug, pending(cast.team_a.slug, wid=f"w{i}"))[0]
        for i in range(6)
    ]
    assert answers == [True] * 4 + [False] * 2


def test_work_admitted_by_earlier_cycles_counts_before_the_next_evaluation(
    cast: Cast, gpu: GpuCluster
) -> None:
    from scheduler_bridge.workloads.models import Workload

    vision_budget(cast)
    spend(cast, gpu, 20)  # 80.00 spent, 20.00 left
    budgets_evaluate(now=NOW)
    # an earlier cycle admitted three one-hour, 2-GPU jobs (4.00 each) after the evaluation
    for i in range(3):
        Workload.objects.create(
            cluster=gpu.cluster,
            tenant=cast.team_a,
            name=f"w{i}",
            state="admitted",
            pod_sets=[],
            submitted_at=NOW,
            admitted_at=NOW + timedelta(minutes=1),
            flavour=gpu.h100,
            gpus=2,
        )
    gate = budget_gate_for_cluster(gpu.cluster, now=NOW + timedelta(minutes=2))
    answers = [
        gate.may_start(cast.team_a.slug, pending(cast.team_a.slug, wid=f"n{i}"))[0]
        for i in range(3)
    ]
    # 8.00 left after the 12.00 already promised; vision holds 6 H100 of its guarantee
    # of 4 now, so 2 more are borrowed at the on-demand 3.00: 6.00 an hour, once.
    assert answers == [True, False, False]


def test_a_soft_budget_only_warns_and_a_parents_hard_budget_binds_its_teams(
    cast: Cast, gpu: GpuCluster
) -> None:
    vision_budget(cast, "10.00", enforcement="soft")
    budget_create(
        actor=cast.finance,
        tenant=cast.dept,
        amount=Decimal("50.00"),
        currency="USD",
        enforcement="hard",
        now=NOW,
    )
    spend(cast, gpu, 13)  # 52.00
    budgets_evaluate(now=NOW)
    gate = budget_gate_for_cluster(gpu.cluster, now=NOW)
    assert gate.may_start(cast.team_b.slug, pending(cast.team_b.slug)) == (
        False,
        "research budget for 2026-03 exhausted (hard): spent 52.00 of 50.00 USD",
    )
    assert gate.may_start(cast.other_org.slug, pending(cast.other_org.slug)) == (True, None)


def test_the_admission_engine_shows_the_budget_reason(cast: Cast, gpu: GpuCluster) -> None:
    from django.utils import timezone

    from billing.months import month_name, month_start
    from billing.usage.metering import floor_hour

    now = timezone.now()
    budget_create(
        actor=cast.finance,
        tenant=cast.team_a,
        amount=Decimal("4.00"),
        currency="USD",
        enforcement="hard",
    )
    start = max(month_start(now), floor_hour(now) - timedelta(hours=1))
    spend(cast, gpu, 1, start=start)  # 4.00 this month
    budgets_evaluate(now=now)
    gate = budget_gate_for(gpu.cluster)  # the factory billing's AppConfig registered
    team = cast.team_a.slug
    snapshot = m.ClusterSnapshot(
        now=now.timestamp(),
        tenants=(m.Tenant(id=team),),
        flavours=(m.Flavour(name="h100-80gb"),),
        quotas=(m.Quota(tenant_id=team, flavour="h100-80gb", guaranteed=8),),
        nodes=(m.Node(name="h100-1", capacity={"h100-80gb": 8}),),
        pending=(pending(cast.team_a.slug),),
    )
    result = run_cycle(snapshot, budget_gate=gate)
    assert not result.admissions
    (decision,) = result.pending
    assert decision.code == m.ReasonCode.BUDGET
    assert f"budget for {month_name(now)} exhausted (hard)" in decision.message


def test_an_alert_reaches_each_reader_in_the_language_they_chose(
    cast: Cast, gpu: GpuCluster, django_capture_on_commit_callbacks: Any
) -> None:
    UserPreference.objects.create(user=cast.lead, language="zh-hans")
    vision_budget(cast)
    spend(cast, gpu, 13)  # 52.00 = 52 %
    with django_capture_on_commit_callbacks(execute=True):
        assert budgets_evaluate(now=NOW).alerts_fired == 1
    by_reader = {tuple(message.to): message for message in mail.outbox}
    assert set(by_reader) == {
        ("dept-admin@example.com", "money@example.com"),
        ("vision-lead@example.com",),
    }
    chinese = by_reader[("vision-lead@example.com",)]
    assert "budget" not in chinese.subject and "预算" in chinese.subject
    assert "has used 50 %" in by_reader[("dept-admin@example.com", "money@example.com")].subject


def test_finance_creates_a_budget_in_the_portal_and_others_cannot(cast: Any) -> None:
    """Finance could read budgets in the portal but not create one."""
    from tests.tenants.test_portal import logged_in

    finance = logged_in(cast.finance)
    overview = finance.get("/billing/budgets/").content.decode()
    assert 'id="budget-new"' in overview
    form = finance.get("/billing/budgets/new/")
    assert form.status_code == 200 and 'value="vision"' in form.content.decode()
    created = finance.post(
        "/billing/budgets/new/",
        {
            "tenant": "vision",
            "cadence": "month",
            "amount": "5000.00",
            "currency": "USD",
            "enforcement": "hard",
            "on_exhausted": "hold",
        },
    )
    assert created.status_code == 302 and created["Location"] == "/billing/budgets/"
    budget = Budget.objects.get(tenant=cast.team_a)
    assert (budget.amount, budget.enforcement, budget.currency) == (
        Decimal("5000.00"),
        "hard",
        "USD",
    )
    # the same cadence again: a field error, nothing written
    again = finance.post(
        "/billing/budgets/new/",
        {
            "tenant": "vision",
            "cadence": "month",
            "amount": "1.00",
            "currency": "USD",
            "enforcement": "soft",
            "on_exhausted": "hold",
        },
    )
    assert again.status_code == 400 and "already has a monthly budget" in again.content.decode()
    assert Budget.objects.filter(tenant=cast.team_a).count() == 1
    # a lead reads budgets but sets none; an outsider cannot name vision at all
    assert logged_in(cast.lead).get("/billing/budgets/new/").status_code == 404
    outsider = logged_in(cast.outsider)
    refused = outsider.post(
        "/billing/budgets/new/",
        {"tenant": "vision", "cadence": "quarter", "amount": "1.00", "currency": "USD"},
    )
    assert refused.status_code in (400, 404)
    assert Budget.objects.filter(tenant=cast.team_a).count() == 1
