"""The hard-budget gate estimates work at the price it would really pay: the card of the
flavour it runs on, reserved within the tenant's guarantee and on demand beyond it, the
priority multiplier of its class, MIG instances at their fraction, its declared run time."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.budgeting.budgets import budget_create
from billing.budgeting.gate import budget_gate_for_cluster
from billing.models import Budget, BudgetStatus
from scheduler_bridge.admission import model as m
from scheduler_bridge.workloads.models import PriorityClass, Workload
from tests.billing.conftest import MAR, GpuCluster
from tests.conftest import Cast
from tests.factories import PriorityClassFactory, WorkloadFactory

pytestmark = pytest.mark.django_db
NOW = MAR + timedelta(days=10)
H100 = "h100-80gb"
MIG_1G = "a100-sxm4-40gb-mig-1g.5gb"


def hard_budget(cast: Cast, amount: str, spent: str) -> Budget:
    budget = budget_create(
        actor=cast.finance,
        tenant=cast.team_a,
        amount=Decimal(amount),
        currency="USD",
        enforcement="hard",
        now=NOW,
    )
    BudgetStatus.objects.create(
        budget=budget,
        period_name="2026-03",
        window_start=MAR,
        window_end=MAR + timedelta(days=31),
        spent=Decimal(spent),
        evaluated_at=NOW,
    )
    return budget


def running_h100(cast: Cast, gpu: GpuCluster, gpus: int) -> Workload:
    return WorkloadFactory(
        cluster=gpu.cluster,
        tenant=cast.team_a,
        state=Workload.State.RUNNING,
        admitted_at=NOW - timedelta(days=1),
        flavour=gpu.h100,
        gpus=gpus,
    )


def queued(cast: Cast, gpu: GpuCluster, priority_class: PriorityClass | None) -> Workload:
    return WorkloadFactory(cluster=gpu.cluster, tenant=cast.team_a, priority_class=priority_class)


def spot_job(workload: Workload, hours: int = 10) -> m.PendingWorkload:
    """4 H100 and 7 MIG 1g instances (one A100's worth) for ``hours`` hours."""
    return m.PendingWorkload(
        id=str(workload.pk),
        tenant_id="vision",
        pod_sets=(
            m.PodSet(count=2, gpus_per_pod=2, flavours=(H100,), name="trainer"),
            m.PodSet(count=7, gpus_per_pod=1, flavours=(MIG_1G,), name="eval"),
        ),
        max_run_time_s=hours * 3600,
    )


def test_a_spot_job_is_estimated_at_the_price_it_would_pay(cast: Cast, gpu: GpuCluster) -> None:
    # The class says 0.6; a card without its own multiplier for it leaves it at that.
    low = PriorityClassFactory(name="low", price_multiplier=Decimal("0.6"))
    hard_budget(cast, "200.00", "0.00")
    running_h100(cast, gpu, 2)  # vision holds 2 of its 4 guaranteed H100
    job = queued(cast, gpu, low)
    gate = budget_gate_for_cluster(gpu.cluster, now=NOW)
    # H100: 2 within the guarantee at 2.00, 2 borrowed at 3.00 -> 10.00 an hour.
    # MIG 1g: no guarantee, so all 7 borrowed at 3.00 x 1/7 each -> 3.00 an hour.
    # (10.00 + 3.00) x 0.6 x 10 h = 78.00 (at reserved price x 1: 2 x 4 x 10 + 2 x 10 = 100).
    assert gate.estimate("vision", spot_job(job)) == Fraction(78)


def test_the_cards_multiplier_wins_over_the_class(cast: Cast, gpu: GpuCluster) -> None:
    spot = PriorityClassFactory(name="spot", price_multiplier=Decimal("0.9"))  # card: 0.5
    hard_budget(cast, "200.00", "0.00")
    running_h100(cast, gpu, 2)
    job = queued(cast, gpu, spot)
    gate = budget_gate_for_cluster(gpu.cluster, now=NOW)
    assert gate.estimate("vision", spot_job(job)) == Fraction(65)


def test_a_spot_job_that_fits_what_is_left_is_not_refused_at_full_price(
    cast: Cast, gpu: GpuCluster
) -> None:
    low = PriorityClassFactory(name="low", price_multiplier=Decimal("0.6"))
    hard_budget(cast, "200.00", "100.00")  # 100.00 left
    running_h100(cast, gpu, 2)
    job, plain = queued(cast, gpu, low), queued(cast, gpu, None)
    gate = budget_gate_for_cluster(gpu.cluster, now=NOW)
    assert gate.may_start("vision", spot_job(job)) == (True, None)
    # 22.00 is left. The same job again without a class, now that the first holds the
    # rest of the guarantee, borrows all its H100: (12.00 + 3.00) x 10 h, refused in numbers.
    allowed, reason = gate.may_start("vision", spot_job(plain))
    assert not allowed and reason == (
        "vision budget for 2026-03: this workload would cost about 150.00 USD, "
        "22.00 USD left of 200.00 USD allowed (hard)"
    )


def test_an_exhausted_budget_says_what_was_spent_of_what(cast: Cast, gpu: GpuCluster) -> None:
    hard_budget(cast, "50.00", "52.50")
    job = spot_job(queued(cast, gpu, None), hours=1)
    gate = budget_gate_for_cluster(gpu.cluster, now=NOW)
    assert gate.may_start("vision", job) == (
        False,
        "vision budget for 2026-03 exhausted (hard): spent 52.50 of 50.00 USD",
    )


def test_the_gate_loads_in_the_same_number_of_queries_however_many_budgets(
    cast: Cast, gpu: GpuCluster
) -> None:
    hard_budget(cast, "200.00", "0.00")
    running_h100(cast, gpu, 2)
    with CaptureQueriesContext(connection) as one:
        budget_gate_for_cluster(gpu.cluster, now=NOW)
    for tenant in (cast.team_b, cast.dept, cast.org, cast.other_org):
        budget_create(
            actor=cast.platform_admin,
            tenant=tenant,
            amount=Decimal("100.00"),
            currency="USD",
            enforcement="hard",
            now=NOW,
        )
        WorkloadFactory(
            cluster=gpu.cluster,
            tenant=tenant,
            state=Workload.State.ADMITTED,
            admitted_at=NOW - timedelta(minutes=5),
            flavour=gpu.h100,
            gpus=1,
        )
    with CaptureQueriesContext(connection) as five:
        budget_gate_for_cluster(gpu.cluster, now=NOW)
    assert len(five.captured_queries) == len(one.captured_queries)
