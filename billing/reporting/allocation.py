"""Cost allocation glue: read a window's charge lines and the ledger behind them, and hand
both to the pure :mod:`billing.reporting.allocation_core`, which spreads the money over any grouping
(tenant, namespace, workload, label:<key>, annotation:<key>, flavour, line type).

A closed period reads its frozen statement lines; an open period, or any [start, end), is
priced on the fly by :mod:`billing.charging.pricing` with idle capacity as a line (the view shares
it out by its own policy). Rows are the caller's tenants only; idle capacity is shown only
to those who manage platform billing.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.translation import gettext_lazy as _

from billing.charging import pricing
from billing.charging.charges import PricingContext, grouped_usage
from billing.charging.history import PeriodSettings, period_settings, resolve_period_settings
from billing.models import Adjustment, BillingPeriod, StatementLine, UsageRecord
from billing.months import add_months, month_name, parse_month
from billing.permissions import can_manage_platform_billing
from billing.reporting import allocation_core as core
from billing.reporting.reports import visible_tenant_ids
from billing.statements.exports import safe_text
from scheduler_bridge.workloads.models import Workload
from tenants.errors import ValidationFailed
from tenants.models import Tenant

MAX_WINDOW = timedelta(days=366)
VALUE_COLUMNS = (
    "gpu_hours_allocated",
    "gpu_hours_busy",
    "efficiency",
    "cost",
    "idle_cost",
    "total",
    "previous_total",
    "change",
    "currency",
)


@dataclass(frozen=True)
class Window:
    """What a view covers: a billing month ("2026-02") or any [start, end)."""

    label: str
    start: datetime
    end: datetime
    month: bool = False

    @property
    def period(self) -> BillingPeriod | None:
        if not self.month:
            return None
        return BillingPeriod.objects.filter(name=self.label).first()

    def previous(self) -> Window:
        """The window just before: the month before, or as long a range ending at start."""
        if self.month:
            start = add_months(self.start, -1)
            return Window(month_name(start), start, self.start, month=True)
        span = self.end - self.start
        return Window(_range_label(self.start - span, self.start), self.start - span, self.start)


def _span(elapsed: timedelta) -> str:
    days, hours = elapsed.days, elapsed.seconds // 3600
    if days and hours:
        return _("%(days)s days %(hours)s h") % {"days": days, "hours": hours}
    if days:
        return _("%(days)s days") % {"days": days}
    return _("%(hours)s h") % {"hours": hours}


def _range_label(start: datetime, end: datetime) -> str:
    return f"{start.isoformat()}..{end.isoformat()}"


def month_window(name: str) -> Window:
    """The billing month ``name``; ValidationFailed (field ``window``) when it is not one."""
    start = parse_month(name)
    if start is None:
        raise ValidationFailed(
            _("'%(value)s' is not a month; write window=YYYY-MM, e.g. window=2026-02."),
            params={"value": name},
            field="window",
        )
    return Window(name, start, add_months(start, 1), month=True)


def range_window(start: str, end: str) -> Window:
    """[start, end) from ISO 8601 dates or date-times (UTC when no offset is given)."""
    lo = _moment(start, "start")
    hi = _moment(end, "end")
    if hi <= lo:
        raise ValidationFailed(_("end must be after start."), field="end")
    if hi - lo > MAX_WINDOW:
        raise ValidationFailed(
            _("A window spans at most 366 days; pick a shorter range."), field="end"
        )
    return Window(_range_label(lo, hi), lo, hi)


def _moment(raw: str, name: str) -> datetime:
    """``raw`` in UTC; a date that does not exist (month 13), an offset of a day or more,
    or a moment UTC cannot hold (year 1 at +01:00) is a field error like a malformed one."""
    try:
        moment = parse_datetime(raw) if "T" in raw or " " in raw else None
        if moment is not None:
            return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)
        day = parse_date(raw) if raw else None
        if day is not None:
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
    except (ValueError, OverflowError):
        pass
    raise ValidationFailed(
        _("%(name)s must be an ISO 8601 date or date-time, e.g. 2026-02-01."),
        params={"name": name},
        field=name,
    )


def parse_aggregate(raw: str | None) -> list[str]:
    """``namespace,label:team`` as a list; ValidationFailed naming the keys that work."""
    keys = [key.strip() for key in (raw or "namespace").split(",") if key.strip()]
    if not keys:
        keys = ["namespace"]
    for key in keys:
        if core.unknown_dimension(key):
            raise ValidationFailed(
                _(
                    "Unknown aggregate key '%(key)s'; use tenant, namespace, workload, flavour, "
                    "line_type, label:<key> or annotation:<key>, separated by commas."
                ),
                params={"key": key},
                field="aggregate",
            )
    if len(set(keys)) != len(keys):
        raise ValidationFailed(_("Name each aggregate key once."), field="aggregate")
    return keys


def parse_idle(raw: str | None) -> core.IdlePolicy | None:
    if not raw:
        return None
    try:
        return core.IdlePolicy(raw)
    except ValueError:
        raise ValidationFailed(
            _("Unknown idle policy '%(value)s'; use idle=even, idle=guarantee or idle=usage."),
            params={"value": raw},
            field="idle",
        ) from None


@dataclass
class AllocationReport:
    window: Window
    previous: Window
    aggregate: list[str]
    idle_policy: core.IdlePolicy
    show_idle: bool
    provisional: bool
    currency: str
    rows: list[core.Row]

    @property
    def totals(self) -> core.Totals:
        return core.totals(self.rows)

    def columns(self) -> list[str]:
        shown = [c for c in VALUE_COLUMNS if self.show_idle or c != "idle_cost"]
        return [*self.aggregate, *shown]

    def records(self) -> list[dict[str, Any]]:
        """Each row as a dict of :meth:`columns` (Decimals stay Decimals)."""
        out = []
        for row in self.rows:
            record: dict[str, Any] = dict(zip(self.aggregate, row.keys, strict=True))
            record.update(
                gpu_hours_allocated=row.gpu_hours_allocated,
                gpu_hours_busy=row.gpu_hours_busy,
                efficiency=row.efficiency,
                cost=row.cost,
                total=row.total,
                previous_total=row.previous_total,
                change=row.change,
                currency=self.currency,
            )
            if self.show_idle:
                record["idle_cost"] = row.idle_cost
            out.append({column: record.get(column) for column in self.columns()})
        return out


def allocation_report(
    user: Any,
    window: Window,
    *,
    aggregate: Sequence[str],
    idle: core.IdlePolicy | None = None,
    subtree: Tenant | None = None,
    now: datetime | None = None,
) -> AllocationReport:
    """Cost of ``window`` by ``aggregate`` as ``user`` may see it (one subtree if given),
    with the previous window's totals beside it. ``idle``: how idle capacity is shared
    (default: the billing policy's ``allocation_idle``)."""
    now = now or timezone.now()
    context = PricingContext.load()
    policy = idle or core.IdlePolicy(context.policy.allocation_idle)
    show_idle = subtree is None and can_manage_platform_billing(user)
    ids = visible_tenant_ids(user, subtree)
    visible = frozenset(ids) if ids is not None else None
    slugs = dict(Tenant.objects.values_list("pk", "slug"))
    flavour_names = {pk: f.name for pk, f in context.flavours.items()}

    def rows_of(target: Window) -> tuple[list[core.Row], str | None, bool]:
        lines, pieces, currency, provisional, guarantees = _inputs(
            target, aggregate, context, visible if not show_idle else None, now
        )
        rows = core.allocate(
            core.AllocationInput(
                lines=lines,
                pieces=pieces,
                aggregate=aggregate,
                idle_policy=policy,
                tenant_slugs=slugs,
                flavour_names=flavour_names,
                guarantees=guarantees,
                visible=visible,
                show_idle=show_idle,
            )
        )
        return rows, currency, provisional

    current, currency, provisional = rows_of(window)
    previous_window = window.previous()
    if window.month and window.start <= now < window.end:
        # a month under way is compared with as many days of the month before, never
        # with all of it: like with like
        elapsed = now.replace(minute=0, second=0, microsecond=0) - window.start
        start = previous_window.start
        previous_window = Window(
            _("%(month)s, its first %(span)s (as far as %(now)s has come)")
            % {"month": previous_window.label, "span": _span(elapsed), "now": window.label},
            start,
            start + elapsed,
        )
    previous, _currency, _provisional = rows_of(previous_window)
    return AllocationReport(
        window=window,
        previous=previous_window,
        aggregate=list(aggregate),
        idle_policy=policy,
        show_idle=show_idle,
        provisional=provisional,
        currency=currency or context.currency_at(window.start),
        rows=core.with_trend(current, previous),
    )


def _inputs(
    window: Window,
    aggregate: Sequence[str],
    context: PricingContext,
    only: frozenset[int] | None,
    now: datetime,
) -> tuple[list[core.Line], list[core.Piece], str | None, bool, dict[tuple[int, int], int]]:
    """(charge lines, usage pieces, currency, provisional, guarantee weights) of ``window``;
    ``only``: read just these tenants (when idle capacity is not shown, nobody else's usage
    matters). Quotas, the tree and billing settings are those in force during the window
    (billing.charging.history); guarantee weights are the guarantee-hours each tenant held in it."""
    period = window.period
    if window.month and period is None:
        return [], [], None, False, {}  # nothing was metered in that month
    settings = (
        period_settings(period)
        if period is not None
        else resolve_period_settings(window.start, window.end)
    )
    bounds = pricing.boundaries(settings.cards if settings.cards is not None else context.cards)
    by = _ledger_fields(aggregate)
    if period is not None:
        rows = UsageRecord.objects.filter(period=period)
        own_month: str | None = period.name
    else:
        rows = UsageRecord.objects.filter(
            interval_start__gte=window.start, interval_start__lt=window.end
        )
        own_month = None
    if only is not None:
        rows = rows.filter(tenant_id__in=only)
    items = grouped_usage(
        rows, bounds, own_month, by, settings.tenant_cuts(window.start, window.end)
    )
    if period is not None and period.state == BillingPeriod.State.CLOSED:
        lines = _statement_lines(period, only)
        provisional = False
    else:
        lines = _priced_lines(window, period, items, context, settings, only, now)
        provisional = True
    reserved = {
        (ln.tenant_id, ln.flavour_id) for ln in lines if ln.kind == pricing.Kind.RESERVED_CAPACITY
    }
    pieces = _pieces(items, reserved, context, aggregate)
    currency = next((ln.currency for ln in lines), None)
    guarantees: dict[tuple[int, int], int] = {}
    for piece in settings.guarantees:
        if piece.tenant_id is None:
            continue
        key = (piece.tenant_id, piece.flavour_id)
        seconds = int((min(piece.end, window.end) - max(piece.start, window.start)).total_seconds())
        guarantees[key] = guarantees.get(key, 0) + piece.units * max(seconds, 0)
    return [ln.line for ln in lines], pieces, currency, provisional, guarantees


def _ledger_fields(aggregate: Sequence[str]) -> tuple[str, ...]:
    fields: list[str] = []
    if "namespace" in aggregate or "workload" in aggregate:
        fields.append("namespace")
    if "workload" in aggregate:
        fields += ["job_name", "pod_name"]
    if any(key.startswith(core.KEYED_PREFIXES) for key in aggregate):
        fields.append("workload_id")
    return tuple(fields)


@dataclass(frozen=True)
class _PricedLine:
    line: core.Line
    currency: str

    @property
    def tenant_id(self) -> int | None:
        return self.line.tenant_id

    @property
    def flavour_id(self) -> int | None:
        return self.line.flavour_id

    @property
    def kind(self) -> str:
        return self.line.kind


def _statement_lines(period: BillingPeriod, only: frozenset[int] | None) -> list[_PricedLine]:
    lines = StatementLine.objects.filter(
        statement__period=period, statement__revision=period.revision
    )
    if only is not None:
        lines = lines.filter(statement__tenant_id__in=only)
    fields = (
        "statement__tenant_id",
        "kind",
        "flavour_id",
        "priority_class",
        "rate_card_id",
        "usage_period",
        "amount",
        "currency",
    )
    return [
        _PricedLine(core.Line(tenant, kind, flavour, priority, card, usage, amount), currency)
        for tenant, kind, flavour, priority, card, usage, amount, currency in (
            lines.order_by("statement__tenant_slug", "id").values_list(*fields)
        )
    ]


def _priced_lines(
    window: Window,
    period: BillingPeriod | None,
    items: list[tuple[dict[str, Any], pricing.Usage]],
    context: PricingContext,
    settings: PeriodSettings,
    only: frozenset[int] | None,
    now: datetime,
) -> list[_PricedLine]:
    """The window priced now, with idle capacity as its own lines (up to ``now``)."""
    adjustments = []
    if period is not None:
        found = Adjustment.objects.filter(period=period).order_by("pk")
        if only is not None:
            found = found.filter(tenant_id__in=only)
        adjustments = [
            pricing.ManualAdjustment(
                id=a.pk, tenant_id=a.tenant_id, amount=a.amount, currency=a.currency
            )
            for a in found
        ]
    reservations = [r for r in settings.reservations if only is None or r.tenant_id in only]
    cards = settings.cards if settings.cards is not None else context.cards
    priced = pricing.price(
        pricing.PricingInput(
            start=window.start,
            end=window.end,
            flavours=context.flavours,
            cards=cards,
            usage=[usage for _extra, usage in items],
            reservations=reservations,
            adjustments=adjustments,
            default_multipliers=context.multipliers,
            idle_mode=pricing.IdleMode.LINE if only is None else pricing.IdleMode.HIDDEN,
            as_of=min(now, window.end),
            default_currency=context.currency_at(window.start),
            spans=settings.spans,
            capacity=settings.capacity,
            guarantee_pieces=settings.guarantees,
        )
    )
    return [
        _PricedLine(
            core.Line(
                line.tenant_id,
                line.kind.value,
                line.flavour_id,
                line.priority_class,
                line.rate_card_id,
                line.usage_period or "",
                line.amount,
            ),
            line.currency,
        )
        for line in priced.lines
    ]


def _pieces(
    items: list[tuple[dict[str, Any], pricing.Usage]],
    reserved: set[tuple[int | None, int | None]],
    context: PricingContext,
    aggregate: Sequence[str],
) -> list[core.Piece]:
    """Each ledger sum cut the way pricing cuts it: borrowed or not, late or not, covered
    by a reservation or not, under the rate card that priced it."""
    workloads = _workload_metadata(items, aggregate)
    pieces = []
    for extra, usage in items:
        flavour = context.flavours.get(usage.flavour_id)
        if flavour is None:
            continue
        card = pricing.resolve_card(context.cards, flavour, usage.segment_start)
        late = usage.usage_period is not None
        values = _values(extra, aggregate, workloads)
        borrowed = min(usage.borrowed_device_seconds, usage.device_seconds)
        for is_borrowed, seconds in ((False, usage.device_seconds - borrowed), (True, borrowed)):
            if seconds <= 0:
                continue
            busy = None
            if usage.busy_device_seconds is not None and usage.device_seconds > 0:
                busy = Fraction(usage.busy_device_seconds) * seconds / usage.device_seconds
            if not is_borrowed and (usage.tenant_id, flavour.id) in reserved and not late:
                kind = pricing.Kind.RESERVED_CAPACITY
            elif late:
                kind = pricing.Kind.LATE_ON_DEMAND if is_borrowed else pricing.Kind.LATE_USAGE
            else:
                kind = pricing.Kind.ON_DEMAND if is_borrowed else pricing.Kind.USAGE
            pieces.append(
                core.Piece(
                    tenant_id=usage.tenant_id,
                    flavour_id=flavour.id,
                    kind=kind.value,
                    priority_class=usage.priority_class,
                    card_id=card.id if card else None,
                    usage_period=usage.usage_period or "",
                    device_seconds=seconds,
                    busy_device_seconds=busy,
                    gpu_fraction=flavour.fraction,
                    values=values,
                )
            )
    return pieces


def _workload_metadata(
    items: list[tuple[dict[str, Any], pricing.Usage]], aggregate: Sequence[str]
) -> dict[int, tuple[dict[str, str], dict[str, str]]]:
    """Workload id -> (labels, annotations), for the ids the window's usage names."""
    if not any(key.startswith(core.KEYED_PREFIXES) for key in aggregate):
        return {}
    ids = {extra["workload_id"] for extra, _usage in items if extra.get("workload_id")}
    found = Workload.objects.filter(pk__in=ids).values_list("pk", "labels", "annotations")
    return {pk: (labels or {}, annotations or {}) for pk, labels, annotations in found}


def _values(
    extra: dict[str, Any],
    aggregate: Sequence[str],
    workloads: dict[int, tuple[dict[str, str], dict[str, str]]],
) -> dict[str, str]:
    values: dict[str, str] = {}
    for key in aggregate:
        if key == "namespace":
            values[key] = extra["namespace"]
        elif key == "workload":
            name = extra["job_name"] or extra["pod_name"]
            values[key] = f"{extra['namespace']}/{name}" if name else ""
        elif key.startswith(core.KEYED_PREFIXES):
            kind, _sep, name = key.partition(":")
            labels, annotations = workloads.get(extra.get("workload_id") or 0, ({}, {}))
            values[key] = str((labels if kind == "label" else annotations).get(name, ""))
    return values


def to_csv(report: AllocationReport) -> bytes:
    """The report's rows as CSV (text cells made inert for spreadsheets)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = report.columns()
    writer.writerow(columns)
    for record in report.records():
        writer.writerow([_cell(record[column]) for column in columns])
    return out.getvalue().encode("utf-8")


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, str):
        return safe_text(value)
    return value


def csv_filename(report: AllocationReport) -> str:
    marker = "-PROVISIONAL" if report.provisional else ""
    label = report.window.label if report.window.month else report.window.start.date().isoformat()
    return f"allocation-{label}-{'-'.join(_slug(k) for k in report.aggregate)}{marker}.csv"


def _slug(key: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in key)[:40]


def plain(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records for JSON: Decimals as strings (money never goes through float)."""
    return [
        {k: str(v) if isinstance(v, Decimal) else v for k, v in record.items()}
        for record in records
    ]
