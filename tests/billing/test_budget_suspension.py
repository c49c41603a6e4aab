"""A spent hard budget set to suspend: its subtree's preemptible running work goes back to
the queue through the workload life cycle, once (even with two evaluations at once), with
an audit record, a reason on each workload and a notice to the leads in their language."""

from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core import mail
from django.db import connection

from billing.budgeting.budgets import budget_create, budgets_evaluate
from billing.models import Budget
from scheduler_bridge.workloads.models import Workload
from tenants.models import AuditEvent, UserPreference
from tests.billing.conftest import MAR, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import Cast, client_for
from tests.factories import PriorityClassFactory, WorkloadFactory
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db
NOW = MAR + timedelta(days=10)


def spent_budget(cast: Cast, gpu: GpuCluster, on_exhausted: str = "suspend") -> Budget:
    budget = budget_create(
        actor=cast.finance,
        tenant=cast.team_a,
        amount=Decimal("100.00"),
        currency="USD",
        enforcement="hard",
        on_exhausted=on_exhausted,
        thresholds=[200],  # no alert mail in the way
        now=NOW,
    )
    record_usage(cast.team_a, gpu.h100, NOW - timedelta(hours=26), hours=26, devices=2)  # 104.00
    return budget


def running(cast: Cast, gpu: GpuCluster, name: str, **kw: Any) -> Workload:
    return WorkloadFactory(
        cluster=gpu.cluster,
        tenant=kw.pop("tenant", cast.team_a),
        name=name,
        state=Workload.State.RUNNING,
        admitted_at=NOW - timedelta(hours=2),
        started_at=NOW - timedelta(hours=2),
        flavour=gpu.h100,
        gpus=1,
        **kw,
    )


@pytest.fixture
def work(cast: Cast, gpu: GpuCluster) -> dict[str, Workload]:
    spot = PriorityClassFactory(name="spot", preemptible=True)
    critical = PriorityClassFactory(name="critical", preemptible=False)
    return {
        "spot": running(cast, gpu, "spot-train", priority_class=spot),
        "critical": running(cast, gpu, "serving", priority_class=critical, preemptible=False),
        "other": running(cast, gpu, "speech-train", tenant=cast.team_b, priority_class=spot),
    }


def evaluate_and_notify(capture: Any) -> list[int]:
    """Evaluate, then run billing's queued notices (not the admission cycle it also
    queues: that would decide the suspended work again on this node-less cluster)."""
    with capture(execute=False) as callbacks:
        suspended = budgets_evaluate(now=NOW).suspended
    for callback in callbacks:
        if str(getattr(callback, "key", "")).startswith("billing."):
            callback()
    return suspended


def states(work: dict[str, Workload]) -> dict[str, str]:
    return {key: Workload.objects.get(pk=w.pk).state for key, w in work.items()}


def test_a_spent_budget_suspends_its_preemptible_running_work_only(
    cast: Cast,
    gpu: GpuCluster,
    work: dict[str, Workload],
    django_capture_on_commit_callbacks: Any,
) -> None:
    budget = spent_budget(cast, gpu)
    assert evaluate_and_notify(django_capture_on_commit_callbacks) == [work["spot"].pk]
    assert states(work) == {"spot": "pending", "critical": "running", "other": "running"}
    spot = Workload.objects.get(pk=work["spot"].pk)
    assert spot.reason == (
        "preempted: the vision budget for 2026-03 is spent (104.00 of 100.00 USD) and "
        "suspends preemptible work"
    )
    assert spot.preemptions == 1 and spot.past_runs  # its run is kept for billing
    # one life-cycle record on the workload, one on the budget
    assert AuditEvent.objects.filter(
        object_type="scheduler_bridge.workload", object_id=str(spot.pk), after__transition="preempt"
    ).exists()
    record = AuditEvent.objects.get(
        object_type="billing.budget", object_id=str(budget.pk), action="action"
    )
    assert record.after is not None and record.after["suspended"] == [spot.pk]
    assert "1 running workload suspended" in record.message
    (notice,) = mail.outbox
    assert set(notice.to) == {
        "vision-lead@example.com",
        "money@example.com",
        "dept-admin@example.com",
    }
    assert "1 workload suspended" in notice.subject
    assert "104.00 USD of its 100.00 USD" in notice.body and "vision/spot-train" in notice.body
    # evaluated again: nothing more to suspend, nobody told twice
    assert evaluate_and_notify(django_capture_on_commit_callbacks) == []
    assert len(mail.outbox) == 1


def test_a_budget_that_holds_new_work_leaves_running_work_alone(
    cast: Cast, gpu: GpuCluster, work: dict[str, Workload]
) -> None:
    spent_budget(cast, gpu, on_exhausted="hold")
    assert budgets_evaluate(now=NOW).suspended == []
    assert set(states(work).values()) == {"running"}


def test_work_with_a_grace_is_told_first_and_keeps_running_until_then(
    cast: Cast, gpu: GpuCluster, django_capture_on_commit_callbacks: Any
) -> None:
    spot = PriorityClassFactory(name="spot", preemptible=True, max_preemption_grace_s=600)
    saver = running(cast, gpu, "checkpointing", priority_class=spot, preemption_grace_s=300)
    spent_budget(cast, gpu)
    assert evaluate_and_notify(django_capture_on_commit_callbacks) == [saver.pk]
    assert evaluate_and_notify(django_capture_on_commit_callbacks) == []  # already told
    saver.refresh_from_db()
    assert saver.state == "running" and saver.preempt_at is not None
    assert "is spent (104.00 of 100.00 USD)" in saver.reason


def test_the_notice_reaches_each_lead_in_their_language(
    cast: Cast,
    gpu: GpuCluster,
    work: dict[str, Workload],
    django_capture_on_commit_callbacks: Any,
) -> None:
    UserPreference.objects.create(user=cast.lead, language="zh-hans")
    spent_budget(cast, gpu)
    evaluate_and_notify(django_capture_on_commit_callbacks)
    by_reader = {tuple(message.to): message for message in mail.outbox}
    chinese = by_reader[("vision-lead@example.com",)]
    assert "预算" in chinese.subject and "suspended" not in chinese.subject
    assert "vision/spot-train" in chinese.body


@pytest.mark.django_db(transaction=True)
def test_two_evaluations_at_once_suspend_once_and_notify_once(
    cast: Cast, gpu: GpuCluster, work: dict[str, Workload]
) -> None:
    spent_budget(cast, gpu)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    suspended: list[list[int]] = []

    def evaluate() -> None:
        try:
            barrier.wait()
            suspended.append(budgets_evaluate(now=NOW).suspended)
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
    assert sorted(suspended) == [[], [work["spot"].pk]]
    spot = Workload.objects.get(pk=work["spot"].pk)
    assert spot.state == "pending" and spot.preemptions == 1
    assert AuditEvent.objects.filter(object_type="billing.budget", action="action").count() == 1
    assert len(mail.outbox) == 1


# --- the policy in the API and the portal -------------------------------------------


def test_the_api_takes_the_policy_and_refuses_anything_else(cast: Cast, gpu: GpuCluster) -> None:
    client = client_for(cast.finance)
    bad = client.post(
        "/api/v1/billing/budgets/",
        {"tenant": "vision", "amount": "500.00", "currency": "USD", "on_exhausted": "explode"},
        format="json",
    )
    assert bad.status_code == 400 and "on_exhausted" in bad.json()
    assert not Budget.objects.exists()
    made = client.post(
        "/api/v1/billing/budgets/",
        {"tenant": "vision", "amount": "500.00", "currency": "USD", "enforcement": "hard"},
        format="json",
    )
    assert made.status_code == 201 and made.json()["on_exhausted"] == "hold"
    url = f"/api/v1/billing/budgets/{made.json()['id']}/"
    changed = client.patch(url, {"on_exhausted": "suspend"}, format="json")
    assert changed.status_code == 200 and changed.json()["on_exhausted"] == "suspend"
    assert client.patch(url, {"on_exhausted": ""}, format="json").status_code == 400
    outsider = client_for(cast.outsider).patch(url, {"on_exhausted": "hold"}, format="json")
    assert outsider.status_code == 404
    assert Budget.objects.get().on_exhausted == "suspend"


def test_the_portal_form_changes_the_policy_with_help_and_field_errors(
    cast: Cast, gpu: GpuCluster
) -> None:
    budget = spent_budget(cast, gpu, on_exhausted="hold")
    url = f"/billing/budgets/{budget.pk}/edit/"
    finance = logged_in(cast.finance)
    page = finance.get(url)
    assert page.status_code == 200
    assert "suspend the running work of the subtree that may be preempted" in page.text
    assert f'href="{url}"' in finance.get("/billing/budgets/").text
    form = {"amount": "100.00", "enforcement": "hard", "is_active": "on"}
    refused = finance.post(url, form | {"on_exhausted": "explode"})
    assert refused.status_code == 400 and 'id="id_on_exhausted-error"' in refused.text
    assert finance.post(url, form | {"on_exhausted": "suspend"}).status_code == 302
    budget.refresh_from_db()
    assert budget.on_exhausted == "suspend"
    assert "Suspend preemptible running work" in finance.get("/billing/budgets/").text
    for stranger in (cast.outsider, cast.member):
        assert logged_in(stranger).get(url).status_code == 404
        assert logged_in(stranger).post(url, form | {"on_exhausted": "hold"}).status_code == 404
    budget.refresh_from_db()
    assert budget.on_exhausted == "suspend"
