"""An independent recomputation of a month: every statement line of a closed February is
compared with amounts worked out here from first principles (hours x devices x price),
not with the pricing code. The month holds what history-true billing must get right: a
quota cut on day 20, a price change on day 15, a tenant moved (and given a new cost
centre) on day 10, a preempted run sharing an hour with its rerun, a pod restarted under
the same name, and a MIG pod without busy-time metrics. Re-opening and closing again after
today's settings changed gives the same statements; a changed ledger gives a revision
that says what changed."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

import pytest

from billing.charging.history import billing_value
from billing.models import (
    BillingPeriod,
    BillingPolicy,
    RateCard,
    Statement,
    StatementLine,
    TenantBillingSettings,
)
from billing.reporting.reports import period_report
from billing.statements.periods import period_close, period_reopen
from billing.usage.ledger import LedgerRow, ledger_append
from scheduler_bridge.history import quota_key
from scheduler_bridge.quotas.models import Quota
from tenants.history import record_setting, tenant_place
from tenants.models import Tenant
from tests.billing.conftest import FEB, MAR, GpuCluster
from tests.billing.factories import record_usage
from tests.conftest import Cast
from tests.tenants.test_portal import logged_in

pytestmark = pytest.mark.django_db

DAY10 = FEB + timedelta(days=9)  # 2026-02-10 00:00, the move
DAY15 = FEB + timedelta(days=14)  # 2026-02-15 00:00, the new rate card
DAY20 = FEB + timedelta(days=19)  # 2026-02-20 00:00, the quota cut
OLD_PRICE, NEW_PRICE = Fraction(2), Fraction("2.5")
OLD_ON_DEMAND, NEW_ON_DEMAND = Fraction(3), Fraction("3.5")


def four_places(value: Fraction) -> Decimal:
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(
        Decimal("0.0001"), rounding=ROUND_HALF_EVEN
    )


def cents(value: Fraction) -> Decimal:
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(
        Decimal("0.01"), rounding=ROUND_HALF_EVEN
    )


def hours(start: datetime, end: datetime) -> int:
    return int((end - start).total_seconds()) // 3600


def ledger_row(
    tenant: Tenant, gpu: GpuCluster, start: datetime, uid: str, name: str, seconds: int
) -> LedgerRow:
    return LedgerRow(
        tenant_id=tenant.pk,
        cluster_id=gpu.cluster.pk,
        flavour_id=gpu.h100.pk,
        namespace=f"{tenant.slug}-train",
        pod_uid=uid,
        pod_name=name,
        job_name="",
        workload_id=None,
        priority_class="",
        interval_start=start,
        devices=1,
        gpu_seconds_allocated=seconds,
        gpu_seconds_busy=Decimal(seconds) / 2,
        gpu_seconds_borrowed=0,
    )


@pytest.fixture
def month(cast: Cast, gpu: GpuCluster) -> BillingPeriod:
    vision, speech, org = cast.team_a, cast.team_b, cast.org
    # The price changes on the 15th: the first card ends, a second one starts.
    gpu.card.valid_to = date(2026, 2, 15)
    gpu.card.save()
    RateCard.objects.create(
        name="From the 15th",
        currency="USD",
        reserved_price=Decimal("2.5"),
        on_demand_price=Decimal("3.5"),
        valid_from=date(2026, 2, 15),
    )
    # speech is charged for its guarantee (2 H100) from February on; cut to 1 on the 20th.
    settings = TenantBillingSettings.objects.create(tenant=speech, charge_reserved=True)
    record_setting("billing", speech.pk, billing_value(settings), at=FEB)
    record_setting("quota", quota_key(speech.pk, gpu.h100.pk), 1, at=DAY20)
    # vision pays from cost centre CC-R in February, and from the 10th sits directly under
    # the organisation with cost centre CC-V.
    vision.cost_center = "CC-R"
    vision.save()
    record_setting("tenant", vision.pk, tenant_place(vision), at=FEB)
    moved = {"path": f"{org.path}{vision.pk}/", "cost_center": "CC-V"}
    record_setting("tenant", vision.pk, moved, at=DAY10)

    # vision: 2 H100 for 3 h on the 5th (CC-R, old price), 1 for 4 h on the 12th (CC-V, old
    # price), 1 for 2 h on the 21st (new price); a pod restarted under the same name on the
    # 22nd at 10:00 (two runs of 30 min in one hour: one GPU-hour, not two).
    record_usage(vision, gpu.h100, FEB + timedelta(days=4, hours=10), hours=3, devices=2, pod="a")
    record_usage(vision, gpu.h100, FEB + timedelta(days=11, hours=8), hours=4, pod="b")
    record_usage(vision, gpu.h100, FEB + timedelta(days=20, hours=8), hours=2, pod="c")
    restart = FEB + timedelta(days=21, hours=10)
    ledger_append(
        [
            ledger_row(vision, gpu, restart, "uid-first-run", "train-0", 1800),
            ledger_row(vision, gpu, restart, "uid-second-run", "train-0", 1800),
        ]
    )
    # vision: a MIG 1g pod for 7 h on the 23rd without busy-time metrics (busy unknown).
    record_usage(vision, gpu.mig_1g, FEB + timedelta(days=22), hours=7, pod="mig")
    # speech: a preempted run (20 min) and its rerun (40 min) share 09:00 on the 16th,
    # within its reserved guarantee (covered, not charged again); 2 borrowed H100-hours on
    # the 21st at the on-demand price.
    shared = FEB + timedelta(days=15, hours=9)
    ledger_append(
        [
            ledger_row(speech, gpu, shared, "uid-preempted", "speech-job-0", 1200),
            ledger_row(speech, gpu, shared, "uid-rerun", "speech-job-0", 2400),
        ]
    )
    record_usage(speech, gpu.h100, FEB + timedelta(days=20, hours=12), hours=2, borrowed=1)
    return BillingPeriod.objects.get(name="2026-02")


def lines(slug: str, revision: int = 1) -> dict[tuple[str, str, str], tuple[Decimal, Decimal]]:
    """(kind, flavour, cost centre) -> (GPU-hours, amount), summed."""
    out: dict[tuple[str, str, str], tuple[Decimal, Decimal]] = {}
    for line in StatementLine.objects.filter(
        statement__tenant_slug=slug, statement__revision=revision
    ):
        key = (line.kind, line.flavour_name, line.cost_center)
        had = out.get(key, (Decimal(0), Decimal(0)))
        out[key] = (had[0] + line.gpu_hours, had[1] + line.amount)
    return out


def expected_month(
    gpu: GpuCluster,
) -> dict[str, dict[tuple[str, str, str], tuple[Decimal, Decimal]]]:
    """Every line of the month, from first principles."""
    h100, mig = gpu.h100.name, gpu.mig_1g.name
    # vision's H100 usage: 6 h (2 x 3) before the move, 4 h after it at the old price,
    # 2 h + 1 h (two 30-minute runs) at the new price.
    vision = {
        ("usage", h100, "CC-R"): (Fraction(6), 6 * OLD_PRICE),
        ("usage", h100, "CC-V"): (Fraction(4 + 3), 4 * OLD_PRICE + 3 * NEW_PRICE),
        # 7 instance-hours of 1g = one GPU-hour (1/7 of a GPU each) at the new price
        ("usage", mig, "CC-V"): (Fraction(1), NEW_PRICE),
    }
    # speech's reservation: 2 GPUs to the 20th, 1 after; old price to the 15th.
    reserved_old = 2 * hours(FEB, DAY15)
    reserved_new = 2 * hours(DAY15, DAY20) + 1 * hours(DAY20, MAR)
    speech = {
        ("reserved_capacity", h100, ""): (
            Fraction(reserved_old + reserved_new),
            reserved_old * OLD_PRICE + reserved_new * NEW_PRICE,
        ),
        ("on_demand", h100, ""): (Fraction(2), 2 * NEW_ON_DEMAND),
    }
    # Idle per flavour and price: capacity - held - reserved but unused.
    held_old = 6 + 4  # vision's H100 hours before the 15th; speech held none then
    held_new = 2 + 1 + 1 + 2  # vision 2 + restart 1, speech's shared hour 1 + borrowed 2
    covered_new = 1  # speech's shared hour is inside its reservation
    idle_h100_old = 8 * hours(FEB, DAY15) - held_old - reserved_old
    idle_h100_new = 8 * hours(DAY15, MAR) - held_new - (reserved_new - covered_new)
    seventh = Fraction(1, 7)
    idle_1g_old = 14 * hours(FEB, DAY15) * seventh
    idle_1g_new = (14 * hours(DAY15, MAR) - 7) * seventh
    three = Fraction(3, 7)
    idle_3g_old = 4 * hours(FEB, DAY15) * three
    idle_3g_new = 4 * hours(DAY15, MAR) * three
    idle = {
        ("idle", h100, "", "old"): (Fraction(idle_h100_old), idle_h100_old * OLD_PRICE),
        ("idle", h100, "", "new"): (Fraction(idle_h100_new), idle_h100_new * NEW_PRICE),
        ("idle", mig, "", "old"): (idle_1g_old, idle_1g_old * OLD_PRICE),
        ("idle", mig, "", "new"): (idle_1g_new, idle_1g_new * NEW_PRICE),
        ("idle", gpu.mig_3g.name, "", "old"): (idle_3g_old, idle_3g_old * OLD_PRICE),
        ("idle", gpu.mig_3g.name, "", "new"): (idle_3g_new, idle_3g_new * NEW_PRICE),
    }
    idle_lines: dict[tuple[str, str, str], tuple[Decimal, Decimal]] = {}
    for (kind, flavour, cost, _price), (gpu_hours, amount) in idle.items():
        had = idle_lines.get((kind, flavour, cost), (Decimal(0), Decimal(0)))
        # each (flavour, price) is its own line, rounded on its own
        idle_lines[(kind, flavour, cost)] = (
            had[0] + four_places(gpu_hours),
            had[1] + cents(amount),
        )
    return {
        "vision": {k: (four_places(h), cents(a)) for k, (h, a) in vision.items()},
        "speech": {k: (four_places(h), cents(a)) for k, (h, a) in speech.items()},
        "__idle__": idle_lines,
    }


def test_every_line_of_the_month_matches_a_recomputation(
    cast: Cast, gpu: GpuCluster, month: BillingPeriod
) -> None:
    period_close(actor=cast.platform_admin, period=month)
    expected = expected_month(gpu)
    for slug, wanted in expected.items():
        got = lines(slug)
        assert set(got) == set(wanted), slug
        for key, (gpu_hours, amount) in wanted.items():
            assert got[key][1] == amount, (slug, key)
            assert abs(got[key][0] - gpu_hours) <= Decimal("0.0002"), (slug, key)
    vision = Statement.objects.get(tenant_slug="vision")
    assert vision.total == sum((a for _h, a in expected["vision"].values()), Decimal("0.00"))
    # the quota cut is priced: the reservation is not 2 GPUs all month (the old defect)
    two_all_month = cents(2 * hours(FEB, DAY15) * OLD_PRICE + 2 * hours(DAY15, MAR) * NEW_PRICE)
    assert lines("speech")[("reserved_capacity", gpu.h100.name, "")][1] < two_all_month


def test_a_moved_tenant_leaves_its_earlier_spend_with_its_old_parent(
    cast: Cast, gpu: GpuCluster, month: BillingPeriod
) -> None:
    period_close(actor=cast.platform_admin, period=month)
    # the move itself, as the tree now stands
    Tenant.objects.filter(pk=cast.team_a.pk).update(
        parent=cast.org, path=f"{cast.org.path}{cast.team_a.pk}/", depth=1
    )
    dept = period_report(cast.platform_admin, month, subtree=cast.dept)
    vision_in_dept = sum((r.amount for r in dept.rows if r.tenant == "vision"), Decimal(0))
    # only what vision ran while it sat in research: 6 H100-hours at 2.00
    assert vision_in_dept == Decimal("12.00")
    org = period_report(cast.platform_admin, month, subtree=cast.org)
    vision_total = Statement.objects.get(tenant_slug="vision").total
    assert sum((r.amount for r in org.rows if r.tenant == "vision"), Decimal(0)) == vision_total


def test_a_reclose_after_settings_changed_reproduces_the_statements(
    cast: Cast, gpu: GpuCluster, month: BillingPeriod
) -> None:
    period_close(actor=cast.platform_admin, period=month)
    first = {slug: lines(slug) for slug in ("vision", "speech", "__idle__")}
    period_reopen(actor=cast.platform_admin, period=month, reason="audit asked for a re-run")
    # Today's settings change: every price doubles, vision is charged for its guarantee,
    # speech's quota goes up, idle is spread over tenants.
    for card in RateCard.objects.all():
        card.reserved_price *= 2
        card.on_demand_price *= 2
        card.save()
    TenantBillingSettings.objects.create(tenant=cast.team_a, charge_reserved=True)
    Quota.objects.filter(tenant=cast.team_b, flavour=gpu.h100).update(guaranteed=2)
    policy = BillingPolicy.current()
    policy.idle_mode = BillingPolicy.IdleMode.SPREAD
    policy.save()
    month.refresh_from_db()
    period_close(actor=cast.platform_admin, period=month)
    again = {slug: lines(slug, revision=2) for slug in ("vision", "speech", "__idle__")}
    assert again == first
    assert all(s.changes == [] for s in Statement.objects.filter(revision=2))


def test_a_reclose_after_the_ledger_changed_says_what_changed(
    cast: Cast, gpu: GpuCluster, month: BillingPeriod
) -> None:
    period_close(actor=cast.platform_admin, period=month)
    period_reopen(actor=cast.platform_admin, period=month, reason="late rows found")
    record_usage(cast.team_a, gpu.h100, FEB + timedelta(days=25), hours=2, pod="late")
    month.refresh_from_db()
    period_close(actor=cast.platform_admin, period=month)
    vision = Statement.objects.get(tenant_slug="vision", revision=2)
    assert vision.number.endswith("-r2")
    # 2 more H100-hours at 2.50 on vision's CC-V usage (4 x 2.00 + 3 x 2.50 before)
    assert {"line": "usage h100-80gb", "field": "amount", "before": "15.50", "after": "20.50"} in (
        vision.changes
    )
    totals = [c for c in vision.changes if c["line"] == "total"]
    assert totals and Decimal(totals[0]["after"]) - Decimal(totals[0]["before"]) == Decimal("5.00")
    # speech's statement is the same as before
    assert Statement.objects.get(tenant_slug="speech", revision=2).changes == []


def test_the_statement_page_shows_where_lines_went_and_what_a_revision_changed(
    cast: Cast, gpu: GpuCluster, month: BillingPeriod
) -> None:
    period_close(actor=cast.platform_admin, period=month)
    vision = Statement.objects.get(tenant_slug="vision")
    page = logged_in(cast.finance).get(f"/billing/statements/{vision.pk}/").content.decode()
    charged = page[page.index('id="charged-to"') :]
    assert "CC-R" in charged and "CC-V" in charged and "12.00" in charged
    assert "acme › research › vision" in charged and "acme › vision" in charged
    period_reopen(actor=cast.platform_admin, period=month, reason="late rows found")
    record_usage(cast.team_a, gpu.h100, FEB + timedelta(days=25), hours=2, pod="late")
    month.refresh_from_db()
    period_close(actor=cast.platform_admin, period=month)
    second = Statement.objects.get(tenant_slug="vision", revision=2)
    response = logged_in(cast.finance).get(
        f"/billing/statements/{second.pk}/", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    text = response.content.decode()
    changes = text[text.index('id="revision-changes"') :]
    assert "修订" in changes  # the section speaks Chinese
    assert "15.50" in changes and "20.50" in changes
    assert f'href="/billing/statements/{vision.pk}/"' in changes  # the revision it replaces
    assert logged_in(cast.outsider).get(f"/billing/statements/{second.pk}/").status_code == 404
