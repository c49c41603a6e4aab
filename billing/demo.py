"""Demo data of billing: rate cards, billing settings, budgets and five weeks of plausible
usage on the simulated cluster `demo`, with last month closed into statements, so the
finance pages and the tenant panels have something to show. Idempotent: it does nothing
once rate cards exist."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from random import Random

from django.utils import timezone
from django.utils.translation import gettext, gettext_noop

from billing.budgets import budgets_evaluate
from billing.ledger import LedgerRow, ledger_append, period_create
from billing.metering import floor_hour
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
from billing.periods import period_close
from scheduler_bridge.inventory.models import Cluster, Flavour
from tenants.deletion import Description, said
from tenants.demo import DEMO_CLUSTER, DemoResult
from tenants.models import Tenant

HOUR = timedelta(hours=1)


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


def _flavour(cluster: Cluster, product: str, profile: str = "") -> Flavour | None:
    return (
        Flavour.objects.filter(cluster=cluster, product=product, mig_profile=profile)
        .order_by("name")
        .first()
    )


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


def _usage(cluster: Cluster, teams: list[Tenant], start: datetime, end: datetime) -> int:
    """Hourly rows per team: a training job (bursty, busy), a notebook (often idle) and a
    small inference service on MIG slices."""
    rng = Random(7)
    h100 = _flavour(cluster, "H100-80GB")
    a100 = _flavour(cluster, "A100-SXM4-80GB")
    slice_ = _flavour(cluster, "H100-80GB", "1g.10gb") or _flavour(
        cluster, "A100-SXM4-80GB", "1g.10gb"
    )
    if h100 is None or a100 is None:
        return 0
    rows: list[LedgerRow] = []
    hours = int((end - start) / HOUR)
    for index, team in enumerate(teams):
        namespace = f"{team.slug}-train"
        train = h100 if index % 2 == 0 else a100
        gpus = 8 if index < 3 else 4
        running = False
        for h in range(hours):
            moment = start + h * HOUR
            if h % 12 == 0:
                running = rng.random() < 0.55
            if running:
                borrowed = gpus // 2 if rng.random() < 0.2 else 0
                busy = Decimal(str(round(rng.uniform(0.55, 0.95), 3)))
                rows.append(
                    _row(
                        team,
                        cluster,
                        train,
                        namespace,
                        f"{team.slug}-train-{h // 12}",
                        moment,
                        gpus,
                        busy,
                        borrowed,
                        "spot" if index % 3 == 2 else "standard",
                    )
                )
            if moment.weekday() < 5 and 8 <= moment.hour < 20:
                busy = Decimal(str(round(rng.choice([0.01, 0.02, 0.2, 0.35]), 3)))
                rows.append(
                    _row(
                        team,
                        cluster,
                        a100,
                        f"{team.slug}-dev",
                        f"{team.slug}-notebook",
                        moment,
                        1,
                        busy,
                        0,
                        "standard",
                        job=False,
                    )
                )
            if slice_ is not None and index % 2 == 1:
                busy = Decimal(str(round(rng.uniform(0.3, 0.6), 3)))
                rows.append(
                    _row(
                        team,
                        cluster,
                        slice_,
                        f"{team.slug}-dev",
                        f"{team.slug}-inference",
                        moment,
                        2,
                        busy,
                        0,
                        "standard",
                        job=False,
                    )
                )
    return ledger_append(rows)


def _row(
    team: Tenant,
    cluster: Cluster,
    flavour: Flavour,
    namespace: str,
    name: str,
    moment: datetime,
    devices: int,
    busy_ratio: Decimal,
    borrowed: int,
    priority: str,
    *,
    job: bool = True,
) -> LedgerRow:
    return LedgerRow(
        tenant_id=team.pk,
        cluster_id=cluster.pk,
        flavour_id=flavour.pk,
        namespace=namespace,
        pod_uid=f"demo-{name}",
        pod_name=f"{name}-0" if job else name,
        job_name=name if job else "",
        priority_class=priority,
        source=UsageRecord.Source.DEMO,
        interval_start=moment,
        devices=devices,
        gpu_seconds_allocated=devices * 3600,
        gpu_seconds_busy=(busy_ratio * devices * 3600).quantize(Decimal("0.001")),
        gpu_seconds_borrowed=borrowed * 3600,
    )


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
    teams = list(Tenant.objects.filter(depth=2, path__startswith=org.path).order_by("path"))
    result.created += _usage(cluster, teams, history_start, floor_hour(now) - HOUR)
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
