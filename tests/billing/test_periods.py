"""Closing periods: statements to the cent, frozen for good, one set even when two workers
close at once or one crashes midway; late usage and corrections land in the next period."""

from __future__ import annotations

import threading
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection

from billing.charging.history import billing_value
from billing.errors import PeriodBusy, PeriodClosed, StatementFrozen
from billing.models import (
    Adjustment,
    BillingPeriod,
    BillingPolicy,
    Statement,
    StatementLine,
    TenantBillingSettings,
    UsageRecord,
)
from billing.statements.periods import period_close, period_reopen
from tenants.errors import PermissionDenied
from tenants.history import record_setting
from tenants.models import AuditEvent
from tests.billing.conftest import FEB, MAR, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import Cast, client_for

pytestmark = pytest.mark.django_db


def february(cast: Cast, gpu: GpuCluster) -> BillingPeriod:
    """vision: 2 H100 x 10 h, 4 x 1g.5gb x 7 h, 1 x 3g.20gb x 1 h; speech: 1 H100 x 5 h,
    borrowed, at the spot multiplier."""
    day = FEB + timedelta(days=3)
    record_usage(cast.team_a, gpu.h100, day, hours=10, devices=2, pod="train", busy_ratio="0.5")
    record_usage(cast.team_a, gpu.mig_1g, day, hours=7, devices=4, pod="infer")
    record_usage(cast.team_a, gpu.mig_3g, day, hours=1, devices=1, pod="small")
    record_usage(cast.team_b, gpu.h100, day, hours=5, borrowed=1, priority="spot", pod="spot")
    return BillingPeriod.objects.get(name="2026-02")


def lines_of(slug: str, period: str = "2026-02") -> dict[tuple[str, str], Decimal]:
    statement = Statement.objects.get(tenant_slug=slug, period__name=period)
    return {(line.kind, line.flavour_name): line.amount for line in statement.lines.all()}


def test_closing_writes_hand_computed_statements(cast: Cast, gpu: GpuCluster) -> None:
    period = period_close(actor=cast.platform_admin, period=february(cast, gpu))
    assert period.state == "closed"
    # 20 GPU-h x 2.00; 28 instance-h of 1g = 4 GPU-h x 2.00; 3/7 GPU-h x 2.00 = 0.857 -> 0.86.
    assert lines_of("vision") == {
        ("usage", "h100-80gb"): Decimal("40.00"),
        ("usage", "a100-sxm4-40gb-mig-1g.5gb"): Decimal("8.00"),
        ("usage", "a100-sxm4-40gb-mig-3g.20gb"): Decimal("0.86"),
    }
    vision = Statement.objects.get(tenant_slug="vision")
    assert vision.total == Decimal("48.86") and vision.currency == "USD"
    assert vision.gpu_hours_busy == Decimal("10.0000")
    # 5 h borrowed at 3.00 x 0.5 (spot).
    assert lines_of("speech") == {("on_demand", "h100-80gb"): Decimal("7.50")}
    # Idle: H100 8 x 672 - 25 held = 5351 h x 2.00; 1g: (14 x 672 - 28) / 7 x 2.00;
    # 3g: (4 x 672 - 1) x 3/7 x 2.00 = 2303.142857 -> 2303.14.
    assert lines_of("__idle__") == {
        ("idle", "h100-80gb"): Decimal("10702.00"),
        ("idle", "a100-sxm4-40gb-mig-1g.5gb"): Decimal("2680.00"),
        ("idle", "a100-sxm4-40gb-mig-3g.20gb"): Decimal("2303.14"),
    }
    # One statement per tenant (empty ones too) and the platform's idle statement.
    assert Statement.objects.count() == 6
    assert Statement.objects.get(tenant_slug="globex").total == Decimal("0.00")
    assert AuditEvent.objects.filter(
        object_type="billing.billingperiod", message__startswith="closed"
    ).exists()


def test_showback_reserved_charging_and_spread_idle(cast: Cast, gpu: GpuCluster) -> None:
    policy = BillingPolicy.current()
    policy.idle_mode = BillingPolicy.IdleMode.SPREAD
    policy.save()
    settings = TenantBillingSettings.objects.create(
        tenant=cast.team_b, mode="showback", charge_reserved=True
    )
    # in force from February on (billing settings are effective-dated)
    record_setting("billing", cast.team_b.pk, billing_value(settings), at=FEB)
    period = february(cast, gpu)
    period_close(actor=cast.platform_admin, period=period)
    speech = Statement.objects.get(tenant_slug="speech")
    assert speech.mode == "showback"
    # speech keeps its 2 H100 guarantee: 2 x 672 h x 2.00 = 2688.00 reserved, used or not;
    # its borrowed hours still pay on demand.
    assert lines_of("speech")[("reserved_capacity", "h100-80gb")] == Decimal("2688.00")
    assert lines_of("speech")[("on_demand", "h100-80gb")] == Decimal("7.50")
    # H100 idle = 5376 - 25 held - (1344 - 0) reserved unused = 4007 h x 2.00 = 8014.00,
    # spread by net guarantees: vision 4, speech 2, globex 2 (org and dept keep 0).
    idle = {
        s.tenant_slug: s.lines.get(kind="idle_share", flavour_name="h100-80gb").amount
        for s in Statement.objects.filter(lines__kind="idle_share", lines__flavour_name="h100-80gb")
    }
    assert idle == {
        "vision": Decimal("4007.00"),
        "speech": Decimal("2003.50"),
        "globex": Decimal("2003.50"),
    }
    # MIG capacity has no guarantee: its idle stays on the platform's line.
    assert ("idle", "a100-sxm4-40gb-mig-1g.5gb") in lines_of("__idle__")


def test_closing_twice_is_a_409_and_writes_nothing(cast: Cast, gpu: GpuCluster) -> None:
    period = february(cast, gpu)
    client = client_for(cast.platform_admin)
    assert client.post("/api/v1/billing/periods/2026-02/close/").status_code == 200
    count = Statement.objects.count()
    response = client.post("/api/v1/billing/periods/2026-02/close/")
    assert response.status_code == 409 and "already closed" in response.json()["detail"]
    assert Statement.objects.count() == count
    with pytest.raises(PeriodClosed):
        period_close(actor=cast.platform_admin, period=period)


def test_a_period_that_has_not_ended_cannot_close(cast: Cast, gpu: GpuCluster) -> None:
    from billing.statements.periods import period_current

    period = period_current()
    response = client_for(cast.platform_admin).post(f"/api/v1/billing/periods/{period.name}/close/")
    assert response.status_code == 409 and "once it has ended" in response.json()["detail"]
    assert not Statement.objects.exists()


def test_statements_are_frozen_in_the_model_layer(cast: Cast, gpu: GpuCluster) -> None:
    period_close(actor=cast.platform_admin, period=february(cast, gpu))
    statement = Statement.objects.get(tenant_slug="vision")
    statement.total = Decimal("1.00")
    with pytest.raises(StatementFrozen):
        statement.save()
    with pytest.raises(StatementFrozen):
        statement.delete()
    with pytest.raises(StatementFrozen):
        Statement.objects.filter(pk=statement.pk).update(total=0)
    with pytest.raises(StatementFrozen):
        Statement.objects.filter(pk=statement.pk).delete()
    line = statement.lines.first()
    assert line is not None
    with pytest.raises(StatementFrozen):
        line.save()
    with pytest.raises(StatementFrozen):
        StatementLine.objects.all().delete()
    with pytest.raises(StatementFrozen):
        UsageRecord.objects.all().update(devices=9)  # the ledger is append-only too
    statement.refresh_from_db()
    assert statement.total == Decimal("48.86")


@pytest.mark.parametrize("method", ["patch", "put", "delete"])
def test_the_api_answers_409_to_changing_a_closed_statement(
    cast: Cast, gpu: GpuCluster, method: str
) -> None:
    period_close(actor=cast.platform_admin, period=february(cast, gpu))
    statement = Statement.objects.get(tenant_slug="vision")
    response = getattr(client_for(cast.finance), method)(
        f"/api/v1/billing/statements/{statement.pk}/", {"total": "0.00"}, format="json"
    )
    assert response.status_code == 409 and "frozen" in response.json()["detail"]
    assert Statement.objects.get(pk=statement.pk).total == Decimal("48.86")


def test_late_usage_after_close_becomes_an_adjustment_in_the_next_period(
    cast: Cast, gpu: GpuCluster
) -> None:
    feb = period_close(actor=cast.platform_admin, period=february(cast, gpu))
    feb_statement = Statement.objects.get(tenant_slug="vision", period=feb)
    # Two hours of 20 February arrive after the close.
    record_usage(cast.team_a, gpu.h100, FEB + timedelta(days=19), hours=2, pod="late")
    late = UsageRecord.objects.filter(pod_name="late")
    assert {row.period.name for row in late} == {"2026-03"}
    march = period_close(
        actor=cast.platform_admin, period=BillingPeriod.objects.get(name="2026-03")
    )
    line = StatementLine.objects.get(statement__period=march, statement__tenant_slug="vision")
    assert (line.kind, line.usage_period, line.amount) == ("late_usage", "2026-02", Decimal("4.00"))
    assert line.corrects_id == feb_statement.pk
    assert Statement.objects.get(pk=feb_statement.pk).total == Decimal("48.86")


def test_finance_corrects_a_closed_statement_with_an_adjustment(
    cast: Cast, gpu: GpuCluster
) -> None:
    period_close(actor=cast.platform_admin, period=february(cast, gpu))
    feb_statement = Statement.objects.get(tenant_slug="vision", period__name="2026-02")
    record_usage(cast.team_b, gpu.h100, MAR, hours=1, pod="march")
    client = client_for(cast.finance)
    response = client.post(
        "/api/v1/billing/adjustments/",
        {
            "tenant": "vision",
            "period": "2026-03",
            "amount": "-10.00",
            "currency": "USD",
            "reason": "node h100-1 was faulty for 5 h",
            "corrects": feb_statement.pk,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    bad = client.post(
        "/api/v1/billing/adjustments/",
        {
            "tenant": "vision",
            "period": "2026-02",
            "amount": "5.00",
            "currency": "USD",
            "reason": "x",
        },
        format="json",
    )
    assert bad.status_code == 409 and "closed" in bad.json()["detail"]
    wrong_currency = client.post(
        "/api/v1/billing/adjustments/",
        {
            "tenant": "vision",
            "period": "2026-03",
            "amount": "5.00",
            "currency": "EUR",
            "reason": "x",
        },
        format="json",
    )
    assert wrong_currency.status_code == 422 and "USD" in wrong_currency.json()["detail"]
    assert Adjustment.objects.count() == 1
    period_close(actor=cast.platform_admin, period=BillingPeriod.objects.get(name="2026-03"))
    line = StatementLine.objects.get(statement__period__name="2026-03", kind="adjustment")
    assert (line.amount, line.corrects_id) == (Decimal("-10.00"), feb_statement.pk)
    assert Statement.objects.get(tenant_slug="vision", period__name="2026-03").total == Decimal(
        "-10.00"
    )


def test_reopening_is_an_audited_admin_action_and_keeps_the_old_set(
    cast: Cast, gpu: GpuCluster
) -> None:
    feb = period_close(actor=cast.platform_admin, period=february(cast, gpu))
    with pytest.raises(PermissionDenied):
        period_reopen(actor=cast.finance, period=feb, reason="typo")
    response = client_for(cast.platform_admin).post(
        "/api/v1/billing/periods/2026-02/reopen/",
        {"reason": "rate card was wrong", "reprice": True},
        format="json",
    )
    assert response.status_code == 200 and response.json()["revision"] == 2
    event = AuditEvent.objects.filter(object_type="billing.billingperiod").first()
    assert event is not None and "rate card was wrong" in event.message
    gpu.card.reserved_price = Decimal("1.0000")
    gpu.card.save()
    period_close(actor=cast.platform_admin, period=BillingPeriod.objects.get(name="2026-02"))
    assert Statement.objects.filter(tenant_slug="vision").count() == 2  # both kept
    listed = client_for(cast.finance).get("/api/v1/billing/statements/?tenant=vision").json()
    assert [(s["revision"], s["total"]) for s in listed["results"]] == [(2, "24.43")]


def test_only_the_latest_closed_period_can_reopen(cast: Cast, gpu: GpuCluster) -> None:
    feb = period_close(actor=cast.platform_admin, period=february(cast, gpu))
    record_usage(cast.team_a, gpu.h100, MAR, pod="march")
    period_close(actor=cast.platform_admin, period=BillingPeriod.objects.get(name="2026-03"))
    with pytest.raises(PeriodClosed):
        period_reopen(actor=cast.platform_admin, period=feb, reason="x")


def test_a_crashed_close_resumes_without_duplicates(
    cast: Cast, gpu: GpuCluster, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.TIDEGATE_BILLING = {"CLOSE_CHUNK": 2}
    period = february(cast, gpu)
    from billing.statements import periods as module

    real = module._insert_statements
    calls = {"n": 0}

    def crash_on_second_chunk(*args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("worker killed")
        real(*args, **kwargs)

    monkeypatch.setattr(module, "_insert_statements", crash_on_second_chunk)
    with pytest.raises(RuntimeError):
        period_close(actor=cast.platform_admin, period=period)
    period.refresh_from_db()
    assert period.state == "closing" and Statement.objects.count() == 2
    # Another worker may not barge in while the lease runs...
    with pytest.raises(PeriodBusy):
        period_close(actor=cast.platform_admin, period=period)
    # ...but takes over once it expired, and finishes the job.
    assert period.close_lease_expires_at is not None
    BillingPeriod.objects.filter(pk=period.pk).update(
        close_lease_expires_at=period.close_lease_expires_at - timedelta(hours=1)
    )
    monkeypatch.setattr(module, "_insert_statements", real)
    period_close(actor=cast.platform_admin, period=period)
    assert Statement.objects.count() == 6
    assert Statement.objects.values("tenant_id").distinct().count() == 6


@pytest.mark.django_db(transaction=True)
def test_two_closes_at_once_write_one_set_of_statements(cast: Cast, gpu: GpuCluster) -> None:
    period = february(cast, gpu)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def close() -> None:
        try:
            barrier.wait()
            period_close(actor=cast.platform_admin, period=period)
            outcomes.append("closed")
        except (PeriodBusy, PeriodClosed) as error:
            outcomes.append(type(error).__name__)
        finally:
            connection.close()

    threads = [threading.Thread(target=close) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("closed") == 1
    assert set(outcomes) - {"closed"} <= {"PeriodBusy", "PeriodClosed"}
    assert Statement.objects.count() == 6
    assert BillingPeriod.objects.get(pk=period.pk).state == "closed"
