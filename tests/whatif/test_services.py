"""What-if and savings runs on a cluster's own history, through the services."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone, translation

from billing.models import WhatIfRun
from billing.whatif import services
from billing.whatif.records import Proposal, QuotaEntry
from tenants.errors import ValidationFailed
from tests.conftest import Cast
from tests.whatif.history import RESERVED_PRICE, build_history, h100_rate_card

TODAY = Proposal()
MORE_FOR_VISION = Proposal(
    quotas=(
        QuotaEntry("vision", "h100-80gb", 6),
        QuotaEntry("speech", "h100-80gb", 2),
    )
)


def run_now(cast: Cast, kind: str, proposal: Proposal = TODAY, days: int = 30) -> WhatIfRun:
    history = build_history(cast)
    run = services.whatif_run_create(
        actor=cast.platform_admin, cluster=history.cluster, kind=kind, days=days, proposal=proposal
    )
    executed = services.whatif_run_execute(run_id=run.pk)
    assert executed is not None
    return executed


def test_a_bigger_guarantee_for_a_waiting_tenant_lowers_its_waits(cast: Cast) -> None:
    run = run_now(cast, "whatif", MORE_FOR_VISION)

    assert run.status == "done", run.error
    assert run.progress == 100
    result = run.whatif_result()
    assert result is not None
    assert result.history.jobs == 28 and result.history.tenants == 2
    today = result.today.tenant_waits["vision"]
    proposed = result.proposed.tenant_waits["vision"]
    assert today.mean_s > 0
    assert proposed.mean_s < today.mean_s
    assert proposed.p95_s < today.p95_s
    assert ("vision", "h100-80gb", 2) in {
        (q.tenant, q.flavour, q.guaranteed) for q in result.today_quotas
    }
    assert ("vision", "h100-80gb", 6) in {
        (q.tenant, q.flavour, q.guaranteed) for q in result.proposed_quotas
    }
    # every figure of both runs is kept
    assert result.today.policy == result.proposed.policy == "fair-share"
    assert result.today.jobs == result.proposed.jobs == 28


def test_guarantees_the_proposal_leaves_out_stay_as_today(cast: Cast) -> None:
    run = run_now(cast, "whatif", Proposal(quotas=(QuotaEntry("speech", "h100-80gb", 4),)))

    result = run.whatif_result()
    assert result is not None
    proposed = {(q.tenant, q.flavour): q.guaranteed for q in result.proposed_quotas}
    assert proposed == {("vision", "h100-80gb"): 2, ("speech", "h100-80gb"): 4}


def test_savings_finds_a_capacity_at_least_todays_and_prices_it_from_the_rate_card(
    cast: Cast,
) -> None:
    h100_rate_card()
    run = run_now(cast, "savings")

    assert run.status == "done", run.error
    savings = run.savings_result()
    assert savings is not None
    assert savings.capacity_gpus == 8
    assert savings.step_gpus == 2 and savings.max_capacity_gpus == 32
    assert savings.reached
    assert savings.needed_gpus is not None and savings.needed_gpus >= 8
    assert savings.extra_gpus == savings.needed_gpus - 8
    assert savings.extra_gpus > 0
    (product,) = savings.products
    assert product.flavour == "h100-80gb" and product.extra_gpus == savings.extra_gpus
    assert Decimal(product.monthly or "") == savings.extra_gpus * RESERVED_PRICE * 730
    assert savings.monthly_by_currency == {"USD": product.monthly}
    # the search met the target at the capacity it names, and missed one GPU below
    points = {p.capacity_gpus: p for p in savings.points}
    assert points[savings.needed_gpus].meets
    assert not points[savings.needed_gpus - 1].meets
    assert points[savings.needed_gpus].wait_p95_s <= savings.target.wait_p95_s


def test_a_flavour_no_rate_card_prices_is_left_unpriced(cast: Cast) -> None:
    run = run_now(cast, "savings")

    savings = run.savings_result()
    assert savings is not None and savings.reached
    assert savings.monthly_by_currency == {}
    assert all(p.monthly is None for p in savings.products)


@pytest.mark.parametrize(
    ("proposal", "days", "field", "words"),
    [
        (
            Proposal(quotas=(QuotaEntry("nobody", "h100-80gb", 1),)),
            30,
            "quotas",
            "nobody ran no work",
        ),
        (
            Proposal(quotas=(QuotaEntry("vision", "a100", 1),)),
            30,
            "quotas",
            "a100 is not a flavour",
        ),
        (
            Proposal(quotas=(QuotaEntry("vision", "h100-80gb", 7),)),
            30,
            "quotas",
            "add up to 13 GPUs, more than its capacity of 8",
        ),
        (Proposal(quotas=(QuotaEntry("vision", "h100-80gb", -1),)), 30, "quotas", "0 or more"),
        (Proposal(weights={"vision": -2}), 30, "weights", "above 0"),
        (Proposal(reclaim_min_run_s=-5), 30, "reclaim_min_run_s", "0 or more seconds"),
        (Proposal(policy="lottery"), 30, "policy", "Unknown policy lottery"),
        (Proposal(), 3, "days", "no finished workloads"),
        (Proposal(), 0, "days", "from 1 to 365"),
    ],
)
def test_a_request_that_cannot_run_is_refused_with_field_errors_and_nothing_is_kept(
    cast: Cast, proposal: Proposal, days: int, field: str, words: str
) -> None:
    history = build_history(cast)
    with translation.override("en"):
        with pytest.raises(ValidationFailed) as refused:
            services.whatif_run_create(
                actor=cast.platform_admin,
                cluster=history.cluster,
                kind="whatif",
                days=days,
                proposal=proposal,
            )
        assert words in " ".join(refused.value.as_dict()[field])
    assert not WhatIfRun.objects.exists()


def test_a_run_whose_history_is_gone_fails_with_a_message(cast: Cast) -> None:
    history = build_history(cast)
    run = services.whatif_run_create(
        actor=cast.platform_admin,
        cluster=history.cluster,
        kind="whatif",
        days=30,
        proposal=Proposal(),
    )
    history.cluster.workloads.all().delete()

    done = services.whatif_run_execute(run_id=run.pk)

    assert done is not None and done.status == "failed"
    assert "no finished workloads" in done.error


def test_a_finished_run_is_not_run_again_when_its_task_comes_twice(cast: Cast) -> None:
    run = run_now(cast, "whatif")
    assert services.whatif_run_execute(run_id=run.pk) is None
    run.refresh_from_db()
    assert run.status == "done" and run.attempts == 1


def test_a_run_whose_worker_died_starts_over_when_its_task_is_delivered_again(cast: Cast) -> None:
    history = build_history(cast)
    run = services.whatif_run_create(
        actor=cast.platform_admin,
        cluster=history.cluster,
        kind="whatif",
        days=30,
        proposal=Proposal(),
    )
    WhatIfRun.objects.filter(pk=run.pk).update(status="running", attempts=1, progress=40)

    done = services.whatif_run_execute(run_id=run.pk)

    assert done is not None and done.status == "done" and done.attempts == 2


def test_a_run_that_lost_its_worker_shows_as_failed_and_can_run_again(cast: Cast) -> None:
    history = build_history(cast)
    run = services.whatif_run_create(
        actor=cast.platform_admin,
        cluster=history.cluster,
        kind="whatif",
        days=30,
        proposal=Proposal(),
    )
    WhatIfRun.objects.filter(pk=run.pk).update(status="running", attempts=1)
    later = timezone.now() + services.STALLED_AFTER + timedelta(seconds=1)

    assert services.whatif_runs_fail_stalled(now=later) == 1
    run.refresh_from_db()
    assert run.status == "failed" and "worker" in run.error

    again = services.whatif_run_repeat(actor=cast.platform_admin, run=run)
    assert again.pk != run.pk and again.params == run.params and again.status == "queued"


def test_only_platform_admins_see_runs(cast: Cast) -> None:
    run_now(cast, "whatif")
    users: list[Any] = [cast.dept_admin, cast.finance, cast.lead, cast.member, cast.outsider]
    assert services.whatif_runs_visible_to(cast.platform_admin).count() == 1
    assert all(not services.whatif_runs_visible_to(u).exists() for u in users)


def test_a_proposal_keeps_the_tenant_tree_and_limits_it_does_not_change() -> None:
    from billing.whatif.records import Proposal, QuotaEntry
    from billing.whatif.runs import proposed_plan
    from scheduler_bridge.replay.cluster import QuotaPlan

    today = QuotaPlan(
        {("vision", "h100"): 4, ("research", "h100"): 8},
        {"vision": 1.0},
        parents={"vision": "research", "research": None},
        borrow_limits={("vision", "h100"): 2},
    )
    plan = proposed_plan(today, Proposal(quotas=(QuotaEntry("vision", "h100", 6),)))
    assert plan.guaranteed == {("vision", "h100"): 6, ("research", "h100"): 8}
    assert plan.parents == today.parents and plan.borrow_limits == today.borrow_limits
