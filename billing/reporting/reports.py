"""Finance reports: charges by period x tenant subtree x cost centre x flavour, drill-down to
workloads, efficiency (busy / allocated) and idle-GPU findings. Every function takes the
caller and only reads what `tenants.access` lets them see.

A closed period reads its frozen statements (GROUP BY in SQL); an open one is priced on the
fly from the ledger with the code that will close it, and is marked provisional.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.db.models import Count, F, Max, Min, Q, Sum
from django.utils import timezone

from billing.charging import pricing
from billing.charging.charges import PricingContext, grouped_usage, period_usage, price_period
from billing.charging.history import period_settings
from billing.conf import billing_setting
from billing.models import BillingPeriod, Statement, StatementLine, UsageRecord
from billing.permissions import can_manage_platform_billing
from billing.selectors import billing_tenants, statements_visible_to, usage_visible_to
from billing.usage.ledger_cache import ledger_cached, ledger_mark
from tenants.models import Tenant

ZERO = Decimal("0.00")


@dataclass(frozen=True)
class ReportRow:
    """One charge line as finance sees it (the CSV's columns, plus what drill-down needs)."""

    period: str
    tenant_id: int | None
    tenant: str
    tenant_name: str
    cost_center: str
    flavor: str
    kind: str
    gpu_hours_allocated: Decimal
    gpu_hours_busy: Decimal | None
    rate: Decimal
    amount: Decimal
    currency: str
    mode: str = "chargeback"
    note: str = ""
    # The frozen statement the line is on ("" while the period is open: provisional).
    revision: str = ""
    statement: str = ""
    # Late usage: the (closed) month the usage belongs to.
    usage_period: str = ""
    multiplier: Decimal = Decimal(1)
    # where the tenant sat in the tree during the hours of the line ("": not recorded)
    tenant_path: str = ""
    # a converted line: the rate it used, "1 USD = 7.1234 CNY (2026-02)" ("": none)
    exchange: str = ""


@dataclass
class PeriodReport:
    period: BillingPeriod
    provisional: bool
    rows: list[ReportRow]
    currency: str

    @property
    def total(self) -> Decimal:
        """The total in :attr:`currency` (rows in other currencies are in
        :meth:`totals_by_currency`: amounts of two currencies are never added)."""
        return sum((row.amount for row in self.rows if row.currency == self.currency), ZERO)

    def totals_by_currency(self) -> dict[str, Decimal]:
        """The total per currency, the report's own currency first."""
        totals: dict[str, Decimal] = {self.currency: ZERO} if self.rows else {}
        for row in self.rows:
            totals[row.currency] = totals.get(row.currency, ZERO) + row.amount
        return totals

    def totals_by_class(self) -> dict[str, dict[str, Decimal]]:
        """Per charge class (``pricing.charge_class``: chargeback, showback, platform
        cost) the total per currency: what is charged, what is only shown and the
        platform's unrecovered idle cost are never one sum."""
        totals: dict[str, dict[str, Decimal]] = {}
        for row in self.rows:
            by_currency = totals.setdefault(pricing.charge_class(row.mode), {})
            by_currency[row.currency] = by_currency.get(row.currency, ZERO) + row.amount
        return totals

    @property
    def several_currencies(self) -> bool:
        return len({row.currency for row in self.rows}) > 1

    def grouped(self, key: str) -> list[dict[str, Any]]:
        """Rows summed by ``key`` (tenant, cost_center, flavor or kind) and currency,
        largest first."""
        groups: dict[tuple[str, str], dict[str, Any]] = {}
        for row in self.rows:
            name = str(getattr(row, key)) or "—"
            group = groups.setdefault(
                (name, row.currency),
                {
                    "key": name,
                    "currency": row.currency,
                    "gpu_hours_allocated": Decimal(0),
                    "gpu_hours_busy": Decimal(0),
                    "amount": ZERO,
                    "chargeback": ZERO,
                    "showback": ZERO,
                    pricing.PLATFORM_COST: ZERO,
                },
            )
            group["gpu_hours_allocated"] += row.gpu_hours_allocated
            group["gpu_hours_busy"] += row.gpu_hours_busy or 0
            group["amount"] += row.amount
            group[pricing.charge_class(row.mode)] += row.amount
        return sorted(
            groups.values(), key=lambda g: (g["currency"] != self.currency, -g["amount"], g["key"])
        )


def exchange_text(source: str, rate: Decimal | None, target: str, month: str) -> str:
    """The rate a converted line used, as finance quotes it: "1 USD = 7.1234 CNY (2026-02)"
    (empty when the line was not converted)."""
    if not source or rate is None:
        return ""
    text = f"{rate:f}"
    text = text.rstrip("0").rstrip(".") if "." in text else text
    return f"1 {source} = {text} {target} ({month})"


def visible_tenant_ids(user: Any, subtree: Tenant | None = None) -> set[int] | None:
    """Ids of the tenants whose money ``user`` reads (within ``subtree``); None: all."""
    tenants = billing_tenants(user)
    if subtree is not None:
        tenants = tenants.filter(path__startswith=subtree.path)
    elif (
        can_manage_platform_billing(user)
        and not Tenant.objects.exclude(pk__in=tenants.values("pk")).exists()
    ):
        return None
    return set(tenants.values_list("pk", flat=True))


def period_report(
    user: Any, period: BillingPeriod, *, subtree: Tenant | None = None, now: datetime | None = None
) -> PeriodReport:
    """Every charge line of ``period`` the caller may see (one subtree if given)."""
    ids = visible_tenant_ids(user, subtree)
    show_idle = subtree is None and can_manage_platform_billing(user)
    # A subtree's roll-up holds what was charged while tenants sat in it: a tenant that
    # moved in mid-period brings only its later lines, one that moved out leaves its
    # earlier ones (lines keep the tenant's path at their hours).
    within = subtree.path if subtree is not None and ids is not None and subtree.pk in ids else None
    if period.state == BillingPeriod.State.CLOSED:
        return _closed_report(user, period, ids, show_idle, within)
    return _provisional_report(period, ids, show_idle, now or timezone.now(), within)


def _closed_report(
    user: Any,
    period: BillingPeriod,
    ids: set[int] | None,
    show_idle: bool,
    within: str | None = None,
) -> PeriodReport:
    statements = statements_visible_to(user).filter(period=period)
    if within is not None:
        # the subtree is the caller's: every line charged within it is theirs to read
        statements = Statement.objects.filter(period=period, revision=F("period__revision"))
    elif ids is not None:
        statements = statements.filter(Q(tenant_id__in=ids) | Q(tenant__isnull=True))
    if not show_idle:
        statements = statements.filter(tenant__isnull=False)
    lines = StatementLine.objects.filter(statement__in=statements).select_related(
        "statement", "statement__period"
    )
    if within is not None:
        lines = lines.filter(
            Q(tenant_path__startswith=within)
            | Q(tenant_path="", statement__tenant__path__startswith=within)
        )
    rows = [
        line_row(line)
        for line in lines.order_by("statement__tenant_slug", "flavour_name", "kind", "id")
    ]
    return PeriodReport(period, False, rows, _main_currency(rows))


def line_row(line: StatementLine) -> ReportRow:
    """A frozen statement line as a report row (its statement's number and revision)."""
    statement = line.statement
    return ReportRow(
        period=statement.period.name,
        tenant_id=statement.tenant_id,
        tenant=statement.tenant_slug,
        tenant_name=statement.tenant_name,
        cost_center=line.cost_center if line.tenant_path else statement.cost_center,
        flavor=line.flavour_name or line.kind,
        kind=line.kind,
        gpu_hours_allocated=line.gpu_hours,
        gpu_hours_busy=line.gpu_hours_busy,
        rate=line.rate,
        amount=line.amount,
        currency=line.currency,
        mode=line.mode or statement.mode,
        note=line.note,
        tenant_path=line.tenant_path,
        exchange=exchange_text(
            line.source_currency, line.exchange_rate, line.currency, line.exchange_month
        ),
        revision=str(statement.revision),
        statement=statement.number,
        usage_period=line.usage_period,
        multiplier=line.multiplier,
    )


def statement_rows(statement: Statement) -> list[ReportRow]:
    """The lines of one statement as report rows, in the order the statement page shows."""
    lines = statement.lines.select_related("statement", "statement__period")
    return [line_row(line) for line in lines.order_by("kind", "flavour_name", "id")]


def _provisional_report(
    period: BillingPeriod,
    ids: set[int] | None,
    show_idle: bool,
    now: datetime,
    within: str | None = None,
) -> PeriodReport:
    context = PricingContext.load()
    # The month's ledger summed is kept while the ledger does not grow; the pricing runs
    # on every request (idle capacity and reservations count up to ``now``).
    bounds = pricing.boundaries(context.cards)
    settings = period_settings(period)
    cuts = sorted(settings.tenant_cuts(period.start, period.end).items())
    usage = ledger_cached(
        "period-usage",
        ledger_mark(),
        (period.pk, period.name, bounds, cuts),
        lambda: period_usage(period, bounds, settings),
    )
    priced = price_period(
        period,
        as_of=min(now, period.end),
        context=context,
        usage=usage,
        settings=settings,
        strict_rates=False,
    )
    tenants = {t.pk: t for t in Tenant.objects.all()}
    rows = []
    for line in priced.lines:
        if line.tenant_id is None and not show_idle:
            continue
        if line.tenant_id is not None and within is not None:
            if not line.attribution.path.startswith(within):
                continue
        elif line.tenant_id is not None and ids is not None and line.tenant_id not in ids:
            continue
        tenant = tenants.get(line.tenant_id) if line.tenant_id is not None else None
        flavour = context.flavours.get(line.flavour_id) if line.flavour_id else None
        rows.append(
            ReportRow(
                period=period.name,
                tenant_id=line.tenant_id,
                tenant=tenant.slug if tenant else pricing.IDLE_TENANT,
                tenant_name=tenant.name if tenant else "Idle capacity",
                cost_center=line.attribution.cost_center
                if line.attribution.path
                else (tenant.cost_center if tenant else ""),
                flavor=flavour.name if flavour else line.kind.value,
                kind=line.kind.value,
                gpu_hours_allocated=line.gpu_hours,
                gpu_hours_busy=line.gpu_hours_busy,
                rate=line.rate,
                amount=line.amount,
                currency=line.currency,
                mode=line.attribution.mode,
                note=line.note,
                tenant_path=line.attribution.path,
                usage_period=line.usage_period or "",
                multiplier=line.multiplier,
                exchange=exchange_text(
                    line.source_currency, line.exchange_rate, line.currency, line.exchange_month
                ),
            )
        )
    rows.sort(key=lambda r: (r.tenant, r.flavor, r.kind))
    return PeriodReport(period, True, rows, _main_currency(rows, context.currency))


def _main_currency(rows: list[ReportRow], default: str | None = None) -> str:
    """The currency a report leads with: the platform's default when rows use it, else the
    one most rows use (other currencies get totals of their own)."""
    default = default or PricingContext.load().currency
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        counts[row.currency] += 1
    if not counts or default in counts:
        return default
    return max(sorted(counts), key=lambda c: counts[c])


def roll_up_to_children(report: PeriodReport, parent: Tenant) -> list[dict[str, Any]]:
    """The report summed per direct child of ``parent`` (and ``parent`` itself)."""
    paths = dict(Tenant.objects.filter(path__startswith=parent.path).values_list("pk", "path"))
    children = {c.pk: c for c in parent.children.all()}
    prefix = {child.path: child for child in children.values()}
    totals: dict[tuple[str, str], Decimal] = defaultdict(lambda: ZERO)
    for row in report.rows:
        path = row.tenant_path or paths.get(row.tenant_id or 0, "")
        owner = next((c.slug for p, c in prefix.items() if path.startswith(p)), parent.slug)
        totals[(owner, row.currency)] += row.amount  # per currency, never mixed
    return [
        {"key": k, "currency": c, "amount": v}
        for (k, c), v in sorted(totals.items(), key=lambda kv: (kv[0][1], -kv[1]))
    ]


def workload_breakdown(
    user: Any,
    period: BillingPeriod,
    *,
    tenant: Tenant | None = None,
    subtree: bool = True,
    limit: int = 200,
) -> list[dict[str, Any]]:
    """Usage of ``period`` per workload (per Job, or per pod when it has neither), with
    an estimated cost: each workload priced alone with the period's cards, so its cents
    may differ from the statement's by rounding. One GROUP BY query."""
    rows = usage_visible_to(user).filter(period=period)
    if tenant is not None and subtree:
        rows = rows.filter(tenant__path__startswith=tenant.path)
    elif tenant is not None:
        rows = rows.filter(tenant=tenant)
    context = PricingContext.load()
    bounds = pricing.boundaries(context.cards)
    by = ("namespace", "job_name", "workload_id", "pod_name")
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    usage = []
    for extra, item in grouped_usage(rows, bounds, period.name, by):
        pod = "" if extra["job_name"] or extra["workload_id"] else extra["pod_name"]
        key = (
            item.tenant_id,
            extra["namespace"],
            extra["job_name"],
            extra["workload_id"],
            pod,
            item.flavour_id,
        )
        group = groups.setdefault(
            key,
            {
                "index": len(groups),
                "allocated": 0,
                "busy": None,
                "extra": extra,
                "pod": pod,
                "usage": item,
            },
        )
        group["allocated"] += item.device_seconds
        if item.busy_device_seconds is not None:
            group["busy"] = (group["busy"] or Decimal(0)) + item.busy_device_seconds
        usage.append(_as_tenant(item, group["index"]))
    if not groups:
        return []
    priced = pricing.price(
        pricing.PricingInput(
            start=period.start,
            end=period.end,
            flavours=context.flavours,
            cards=context.cards,
            usage=usage,
            default_multipliers=context.multipliers,
        )
    )
    cost = priced.totals()
    slugs = dict(Tenant.objects.values_list("pk", "slug"))
    out = []
    top = sorted(groups.items(), key=lambda kv: -kv[1]["allocated"])[:limit]
    for (tenant_id, namespace, job_name, workload_id, pod, flavour_id), group in top:
        flavour = context.flavours.get(flavour_id)
        fraction = flavour.fraction if flavour else Fraction(1)
        allocated = Fraction(int(group["allocated"])) * fraction / 3600
        busy = Fraction(group["busy"]) * fraction / 3600 if group["busy"] is not None else None
        out.append(
            {
                "tenant": slugs.get(tenant_id, ""),
                "namespace": namespace,
                "job_name": job_name or pod or "—",
                "workload_id": workload_id,
                "flavor": flavour.name if flavour else "",
                "gpu_hours_allocated": pricing.round_half_even(allocated, 4),
                "gpu_hours_busy": pricing.round_half_even(busy, 4) if busy is not None else None,
                "efficiency": _ratio(busy, allocated),
                "estimated_amount": cost.get(group["index"], ZERO),
            }
        )
    return out


def _as_tenant(usage: pricing.Usage, index: int) -> pricing.Usage:
    return pricing.Usage(
        tenant_id=index,
        flavour_id=usage.flavour_id,
        segment_start=usage.segment_start,
        device_seconds=usage.device_seconds,
        borrowed_device_seconds=usage.borrowed_device_seconds,
        busy_device_seconds=usage.busy_device_seconds,
        priority_class=usage.priority_class,
        usage_period=usage.usage_period,
    )


def _ratio(busy: Fraction | None, allocated: Fraction) -> Decimal | None:
    if busy is None or allocated <= 0:
        return None
    return pricing.round_half_even(busy / allocated, 4)


def efficiency_by_tenant(
    user: Any, *, start: datetime, end: datetime, subtree: Tenant | None = None
) -> list[dict[str, Any]]:
    """Busy / allocated device-seconds per tenant over [start, end), from rows with busy data
    (rows without it count as allocated but are left out of the ratio). The ledger's sums
    per tenant (of the subtree, or of everyone) are kept while the ledger does not grow;
    the caller's tenants are picked from them."""
    tenants = billing_tenants(user)
    scope: list[int] | None = None
    if subtree is not None:
        tenants = tenants.filter(path__startswith=subtree.path)
        scope = sorted(
            Tenant.objects.filter(path__startswith=subtree.path).values_list("pk", flat=True)
        )
    mark = ledger_mark()
    sums = ledger_cached(
        "tenant-efficiency",
        mark,
        (scope, start, mark.bound(end)),
        lambda: _usage_sums_per_tenant(scope, start, end),
    )
    shown = tenants.filter(pk__in=list(sums)).order_by("slug").values_list("pk", "slug", "name")
    out = []
    for pk, slug, name in shown:
        allocated, measured_seconds, busy_seconds = sums[pk]
        measured = Fraction(int(measured_seconds or 0))
        busy = Fraction(busy_seconds) if busy_seconds is not None else None
        out.append(
            {
                "tenant": slug,
                "tenant_name": name,
                "device_hours_allocated": pricing.round_half_even(
                    Fraction(int(allocated or 0), 3600), 2
                ),
                "device_hours_measured": pricing.round_half_even(measured / 3600, 2),
                "device_hours_busy": (
                    pricing.round_half_even(busy / 3600, 2) if busy is not None else None
                ),
                "efficiency": _ratio(busy, measured),
            }
        )
    return out


def _usage_sums_per_tenant(
    tenant_ids: list[int] | None, start: datetime, end: datetime
) -> dict[int, tuple[Any, Any, Any]]:
    """tenant id -> (allocated, measured, busy) device-seconds over [start, end)."""
    rows = UsageRecord.objects.filter(interval_start__gte=start, interval_start__lt=end)
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=tenant_ids)
    grouped = (
        rows.order_by()
        .values("tenant_id")
        .annotate(
            allocated=Sum("gpu_seconds_allocated"),
            measured=Sum("gpu_seconds_allocated", filter=Q(gpu_seconds_busy__isnull=False)),
            busy=Sum("gpu_seconds_busy"),
        )
    )
    return {g["tenant_id"]: (g["allocated"], g["measured"], g["busy"]) for g in grouped}


def idle_findings(
    user: Any, *, since: datetime | None = None, subtree: Tenant | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    """Allocations whose engine activity stayed under IDLE_THRESHOLD for a whole hour or
    more, per tenant x namespace x pod (or job), most idle hours first."""
    since = since or timezone.now() - timedelta(days=7)
    threshold = Decimal(str(billing_setting("IDLE_THRESHOLD")))
    # by tenant id, not by path: a path prefix leaves PostgreSQL guessing one tenant
    ids = visible_tenant_ids(user, subtree)
    rows = (
        UsageRecord.objects.all() if ids is None else UsageRecord.objects.filter(tenant_id__in=ids)
    )
    rows = (
        rows.filter(interval_start__gte=since, gpu_seconds_busy__isnull=False)
        .filter(gpu_seconds_allocated__gte=F("devices") * 3600)
        .filter(gpu_seconds_busy__lt=F("gpu_seconds_allocated") * threshold)
    )
    grouped = (
        rows.order_by()
        .values("tenant__slug", "namespace", "pod_name", "job_name", "flavour__name")
        .annotate(
            hours=Count("id"),
            devices=Max("devices"),
            allocated=Sum("gpu_seconds_allocated"),
            busy=Sum("gpu_seconds_busy"),
            first=Min("interval_start"),
            last=Max("interval_end"),
            run_of=Max("workload_id"),
        )
        .order_by("-hours", "tenant__slug", "namespace", "pod_name")[:limit]
    )
    return [
        {
            "tenant": g["tenant__slug"],
            "namespace": g["namespace"],
            "pod": g["pod_name"] or g["job_name"],
            "job_name": g["job_name"],
            "flavor": g["flavour__name"],
            "devices": g["devices"],
            "idle_hours": g["hours"],
            "activity": _ratio(Fraction(g["busy"] or 0), Fraction(int(g["allocated"] or 0))),
            "first": g["first"],
            "last": g["last"],
            "workload_id": g["run_of"],
        }
        for g in grouped
    ]
