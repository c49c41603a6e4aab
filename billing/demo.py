"""Demo data of billing: rate cards, billing settings, budgets and usage on the simulated
cluster `demo` from the start of last month until now - the demo's trace work replayed
through the admission simulator - with last month closed into statements, so the finance
pages and the tenant panels have something to show. While the demo runs, its clock's
virtual hours are metered here too (``demo_usage_meter``). Idempotent: seeding does
nothing once rate cards exist."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal

from django.utils import timezone
from django.utils.translation import gettext, gettext_noop

from billing.budgeting.budgets import budgets_evaluate
from billing.models import (
    BillingPolicy,
    Budget,
    BudgetAlert,
    RateCard,
    Statement,
    TenantBillingSettings,
    UsageRecord,
)
from billing.months import add_months, month_start
from billing.statements.periods import period_close
from billing.usage.hourly_borrowing import with_borrowed
from billing.usage.ledger import LedgerRow, ledger_append, period_create
from billing.usage.metering import floor_hour
from scheduler_bridge.demo.clock import TRACE_PRIORITY, DemoUsage, history_replay
from scheduler_bridge.demo.replay import HeldRun
from scheduler_bridge.demo.trace import HOUR_S, WEEK_S, busy_ratio, hour_pieces
from scheduler_bridge.inventory.models import Cluster, Flavour
from tenants.deletion import Description, said
from tenants.demo import DEMO_CLUSTER, DemoResult
from tenants.models import Tenant

IDLE_RATIO = 0.02  # how busy a forgotten job keeps its GPUs
IDLE_BELOW = 0.05  # busy_ratio below this: the job is one of the trace's nearly idle ones
# the idle-GPU panels look back a week (billing.reporting.reports.idle_findings)
IDLE_WEEK_S = WEEK_S


def billing_deletion_blocker(tenant: Tenant) -> Description | None:
    parts = []
    if UsageRecord.objects.filter(tenant=tenant).exists():
        parts.append(gettext_noop("metered usage"))
    if Statement.objects.filter(tenant=tenant).exists():
        parts.append(gettext_noop("billing statements"))
    if Budget.objects.filter(tenant=tenant).exists():
        parts.append(gettext_noop("budgets"))
    if not parts:
        return None
    return said(lambda: _and([gettext(part) for part in parts]))


def _and(parts: list[str]) -> str:
    text = parts[-1]
    for part in reversed(parts[:-1]):
        text = gettext("%(first)s and %(rest)s") % {"first": part, "rest": text}
    return text


def _rate_cards(start: datetime) -> None:
    day = start.date()
    cards = [
        ("H100 80GB", "H100-80GB", "", "2.5000", "3.7500"),
        ("A100 80GB", "A100-SXM4-80GB", "", "1.6000", "2.4000"),
        ("H100 1g.10gb (own price)", "H100-80GB", "1g.10gb", "0.4000", "0.6000"),
        ("Any other GPU", "", "", "1.0000", "1.5000"),
    ]
    for name, product, profile, reserved, on_demand in cards:
        RateCard.objects.create(
            name=name,
            product=product,
            mig_profile=profile,
            currency="USD",
            reserved_price=Decimal(reserved),
            on_demand_price=Decimal(on_demand),
            priority_multipliers={"spot": "0.6"},
            valid_from=day,
        )


def _usage(cluster: Cluster, start: datetime, end: datetime) -> int:
    """Hourly rows of what the demo's trace work held from ``start`` to ``end``, as the
    admission simulator replays it on this cluster (scheduler_bridge.demo.clock): the
    same work, teams and quotas the live demo runs, so last month's idle line is the
    capacity that replay left unheld."""
    teams = dict(Tenant.objects.values_list("slug", "pk"))
    flavours = dict(Flavour.objects.filter(cluster=cluster).values_list("name", "pk"))
    lo, hi = start.timestamp(), end.timestamp()
    rows: list[LedgerRow] = []
    runs = history_replay(cluster, start, end).runs
    forgotten = forgotten_runs(runs, max(lo, hi - IDLE_WEEK_S), hi)
    for run in runs:
        ratio = Decimal(
            str(round(IDLE_RATIO if run.name in forgotten else busy_ratio(run.name), 3))
        )
        for hour, seconds in hour_pieces(max(lo, run.start), min(hi, run.end)):
            rows.append(
                LedgerRow(
                    tenant_id=teams[run.team],
                    cluster_id=cluster.pk,
                    flavour_id=flavours[run.flavour],
                    namespace=f"{run.team}-train",
                    pod_uid=f"demo-{run.name}-{run.run}",
                    pod_name=f"{run.name}-0",
                    job_name=run.name,
                    priority_class=TRACE_PRIORITY,
                    source=UsageRecord.Source.DEMO,
                    interval_start=datetime.fromtimestamp(hour * 3600, UTC),
                    devices=run.devices,
                    gpu_seconds_allocated=int(seconds) * run.devices,
                    gpu_seconds_busy=(ratio * int(seconds) * run.devices).quantize(
                        Decimal("0.001")
                    ),
                )
            )
    return ledger_append(with_borrowed(rows))


def forgotten_runs(runs: Sequence[HeldRun], lo: float, hi: float) -> set[str]:
    """Per team, the run the demo shows nearly idle (a forgotten job) in [lo, hi), the week
    the idle-GPU panels look at, when none of the team's nearly idle runs held its GPUs for
    a whole hour there: its run that held them longest in that week, if two hours or more.
    Without it, whether a team's panel shows an idle GPU would depend on the day the demo
    is seeded."""
    longest: dict[str, HeldRun] = {}
    covered: set[str] = set()
    for run in runs:
        held = run.seconds_within(lo, hi)
        if held < 2 * HOUR_S:  # a whole clock hour inside it is only sure from two hours
            continue
        if busy_ratio(run.name) < IDLE_BELOW:
            covered.add(run.team)
        best = longest.get(run.team)
        if best is None or held > best.seconds_within(lo, hi):
            longest[run.team] = run
    return {run.name for team, run in longest.items() if team not in covered}


def seed_demo_billing(result: DemoResult) -> None:
    cluster = Cluster.objects.filter(name=DEMO_CLUSTER).first()
    if cluster is None or RateCard.objects.exists():
        return
    now = timezone.now()
    history_start = add_months(month_start(now), -1)
    _rate_cards(add_months(history_start, -2))
    policy = BillingPolicy.current()
    policy.idle_mode = BillingPolicy.IdleMode.LINE
    policy.save()
    org = Tenant.objects.get(slug="acme")
    TenantBillingSettings.objects.get_or_create(tenant=org, defaults={"mode": "chargeback"})
    platform = Tenant.objects.filter(slug="platform").first()
    if platform is not None:
        TenantBillingSettings.objects.get_or_create(tenant=platform, defaults={"mode": "showback"})
    result.created += _usage(cluster, history_start, floor_hour(now))
    closed = period_close(actor=None, period=period_create(history_start), source="system", now=now)
    # Budgets sized on last month's bill, so that whatever the day the demo starts, some are
    # on track, one is tight and the hard one can run out before the month ends.
    for slug, factor, enforcement in [
        ("research", Decimal("1.3"), Budget.Enforcement.SOFT),
        ("vision", Decimal("1.05"), Budget.Enforcement.HARD),
        ("search", Decimal("0.8"), Budget.Enforcement.SOFT),
    ]:
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            continue
        last = sum(
            Statement.objects.filter(
                period=closed, tenant__path__startswith=tenant.path
            ).values_list("total", flat=True),
            Decimal(0),
        )
        Budget.objects.get_or_create(
            tenant=tenant,
            cadence=Budget.Cadence.MONTH,
            defaults={
                "amount": max(Decimal(100), (last * factor).quantize(Decimal(1))),
                "currency": "USD",
                "enforcement": enforcement,
            },
        )
    budgets_evaluate(now=now)
    # The demo's alerts are shown in the portal, not e-mailed to made-up addresses.
    BudgetAlert.objects.filter(emailed_at__isnull=True).update(emailed_at=now)


def demo_usage_meter(usage: Sequence[DemoUsage]) -> int:
    """Ledger rows for the slices of real time the living demo's clock finished, written
    as the collector writes an admitted workload's hours (one row per workload and
    slice, dated in the real hour the slice falls in), then budgets evaluated again."""
    now = timezone.now()
    cluster_ids = dict(Flavour.objects.values_list("pk", "cluster_id"))
    rows = [
        LedgerRow(
            tenant_id=u.tenant_id,
            cluster_id=cluster_ids[u.flavour_id],
            flavour_id=u.flavour_id,
            namespace="",
            pod_uid=f"demo-w{u.workload_id}-t{u.slice_start}",
            pod_name=u.name,
            workload_id=u.workload_id,
            job_name=u.name,
            priority_class=u.priority_class,
            source=UsageRecord.Source.DEMO,
            interval_start=floor_hour(datetime.fromtimestamp(u.slice_start, UTC)),
            devices=u.devices,
            gpu_seconds_allocated=u.gpu_seconds,
            gpu_seconds_busy=(Decimal(str(round(u.busy_ratio, 3))) * u.gpu_seconds).quantize(
                Decimal("0.001")
            ),
        )
        for u in usage
        if u.flavour_id in cluster_ids
    ]
    written = ledger_append(with_borrowed(rows))
    if written:
        budgets_evaluate(now=now)
        BudgetAlert.objects.filter(emailed_at__isnull=True).update(emailed_at=now)
    return written
