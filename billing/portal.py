"""Portal pages of billing: the finance overview (spend per cost centre, statements,
exports, period close), statement detail with drill-down to workloads, and the budget /
burn / idle-GPU panel on tenant pages for leads.

Pages load through `billing.selectors`; a user without a billing role sees 404 (plain
members see no money).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models.functions import TruncDay
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, path, reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from billing import charts, exports, periods, pricing, reports, selectors
from billing.budgets import budget_window
from billing.charges import default_multipliers, grouped_usage, load_cards, load_flavours
from billing.conf import billing_setting
from billing.models import BillingPeriod, Budget, BudgetAlert, UsageRecord
from billing.permissions import can_manage_platform_billing, can_read_any_billing
from billing.pricing import Kind
from tenants import access
from tenants.errors import TidegateError
from tenants.models import Tenant


def _period_from_query(request: HttpRequest) -> BillingPeriod:
    name = request.GET.get("period")
    if name:
        period = BillingPeriod.objects.filter(name=name).first()
        if period is None:
            raise Http404
        return period
    return periods.period_current()


@login_required
def billing_home(request: HttpRequest) -> HttpResponse:
    """Finance overview of one period (default: the current month)."""
    if not can_read_any_billing(request.user):
        raise Http404
    period = _period_from_query(request)
    subtree = None
    if request.GET.get("tenant"):
        subtree = get_object_or_404(
            selectors.billing_tenants(request.user), slug=request.GET["tenant"]
        )
    report = reports.period_report(request.user, period, subtree=subtree)
    by_cost_center = report.grouped("cost_center")
    month_end = min(timezone.now(), period.end)
    context = {
        "period": period,
        "periods": BillingPeriod.objects.order_by("-start")[:24],
        "subtree": subtree,
        "report": report,
        "by_tenant": report.grouped("tenant"),
        "by_cost_center": by_cost_center,
        "by_flavor": report.grouped("flavor"),
        "chart": charts.spend_by_cost_center(
            by_cost_center,
            report.currency,
            _("Spend per cost centre, %(period)s") % {"period": period.name},
        ),
        "efficiency": reports.efficiency_by_tenant(
            request.user, start=period.start, end=month_end, subtree=subtree
        ),
        "statements": selectors.statements_visible_to(request.user)
        .filter(period=period)
        .order_by("tenant_slug")[:500],
        "budgets": selectors.budgets_visible_to(request.user)[:200],
        "may_close": can_manage_platform_billing(request.user)
        and period.state != BillingPeriod.State.CLOSED
        and period.end <= timezone.now(),
    }
    return render(request, "billing/home.html", context)


# What each kind of statement line is, in words finance reads (billing/pricing.py Kind).
LINE_KINDS: dict[str, Any] = {
    Kind.USAGE: gettext_lazy("in quota"),
    Kind.ON_DEMAND: gettext_lazy("borrowed (on-demand rate)"),
    Kind.RESERVED_CAPACITY: gettext_lazy("reserved capacity"),
    Kind.IDLE: gettext_lazy("idle capacity"),
    Kind.IDLE_SHARE: gettext_lazy("share of idle capacity"),
    Kind.LATE_USAGE: gettext_lazy("late usage"),
    Kind.LATE_ON_DEMAND: gettext_lazy("late borrowed usage"),
    Kind.ADJUSTMENT: gettext_lazy("adjustment"),
}


def line_kind(kind: str) -> str:
    label = LINE_KINDS.get(kind)
    return str(label) if label is not None else kind


@login_required
def statement_detail(request: HttpRequest, pk: int) -> HttpResponse:
    statement = get_object_or_404(selectors.statements_visible_to(request.user), pk=pk)
    workloads = []
    if statement.tenant is not None:
        workloads = reports.workload_breakdown(
            request.user, statement.period, tenant=statement.tenant, subtree=False
        )
    lines = list(statement.lines.order_by("flavour_name", "kind", "id"))
    corrected_by = list(statement.corrected_by.select_related("statement", "statement__period"))
    for line in [*lines, *corrected_by]:
        line.kind_label = line_kind(line.kind)  # type: ignore[attr-defined]
    context = {
        "statement": statement,
        "lines": lines,
        "corrected_by": corrected_by,
        "workloads": workloads,
    }
    return render(request, "billing/statement_detail.html", context)


@login_required
def period_export(request: HttpRequest, name: str, fmt: str) -> HttpResponse:
    if not can_read_any_billing(request.user) or fmt not in exports.CONTENT_TYPES:
        raise Http404
    period = get_object_or_404(BillingPeriod, name=name)
    subtree = None
    if request.GET.get("tenant"):
        subtree = get_object_or_404(
            selectors.billing_tenants(request.user), slug=request.GET["tenant"]
        )
    report = reports.period_report(request.user, period, subtree=subtree)
    response = HttpResponse(exports.export(report, fmt), content_type=exports.CONTENT_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="{exports.filename(report, fmt)}"'
    response["X-Tidegate-Provisional"] = "true" if report.provisional else "false"
    return response


@login_required
@require_POST
def period_close(request: HttpRequest, name: str) -> HttpResponse:
    if not can_read_any_billing(request.user):
        raise Http404
    period = get_object_or_404(BillingPeriod, name=name)
    try:
        periods.period_close(actor=request.user, period=period, source="portal")
    except TidegateError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, _("Period %(name)s closed.") % {"name": period.name})
    return redirect(f"{reverse('billing-home')}?period={period.name}")


def _daily_spend(
    tenant: Tenant, start: datetime, end: datetime
) -> tuple[list[date], list[Decimal]]:
    """Usage charges of ``tenant``'s subtree per day in [start, end): one GROUP BY query."""
    cards, flavours = load_cards(), load_flavours()
    rows = UsageRecord.objects.filter(
        tenant__path__startswith=tenant.path, interval_start__gte=start, interval_start__lt=end
    ).annotate(day=TruncDay("interval_start"))
    days: dict[date, int] = {}
    usage = []
    for extra, item in grouped_usage(rows, pricing.boundaries(cards), None, ("day",)):
        index = days.setdefault(extra["day"].date(), len(days))
        usage.append(
            pricing.Usage(
                tenant_id=index,
                flavour_id=item.flavour_id,
                segment_start=item.segment_start,
                device_seconds=item.device_seconds,
                borrowed_device_seconds=item.borrowed_device_seconds,
                priority_class=item.priority_class,
            )
        )
    totals = pricing.price(
        pricing.PricingInput(
            start=start,
            end=end,
            flavours=flavours,
            cards=cards,
            usage=usage,
            default_multipliers=default_multipliers(),
        )
    ).totals()
    all_days = []
    amounts = []
    moment = start
    while moment < end:
        day = moment.date()
        all_days.append(day)
        amounts.append(totals.get(days[day], Decimal(0)) if day in days else Decimal(0))
        moment += timedelta(days=1)
    return all_days, amounts


def budget_panel(request: HttpRequest, tenant: Tenant) -> dict[str, Any] | None:
    """Budget, burn and idle-GPU warnings on a tenant page, for those who read its money."""
    if not access.can_read_billing(request.user, tenant):
        return None
    try:
        reverse("billing-home")
    except NoReverseMatch:  # billing pages not routed in this URLconf
        return None
    now = timezone.now()
    budgets = list(
        Budget.objects.filter(tenant_id__in=tenant.ancestor_ids(), is_active=True)
        .select_related("tenant", "status")
        .order_by("tenant__depth")
    )
    own = next((b for b in budgets if b.tenant_id == tenant.pk), budgets[-1] if budgets else None)
    name, start, end = budget_window(own.cadence if own else Budget.Cadence.MONTH, now)
    days, daily = _daily_spend(tenant, start, min(end, now + timedelta(hours=1)))
    status = getattr(own, "status", None) if own else None
    alerts = BudgetAlert.objects.filter(
        budget__in=budgets, period_name__in={budget_window(b.cadence, now)[0] for b in budgets}
    ).select_related("budget", "budget__tenant")
    findings = reports.idle_findings(request.user, subtree=tenant, limit=20)
    efficiency = reports.efficiency_by_tenant(request.user, start=start, end=now, subtree=tenant)
    per_tenant: dict[str, Any] = defaultdict(lambda: None)
    for row in efficiency:
        per_tenant[row["tenant"]] = row
    return {
        "template": "billing/budget_panel.html",
        "tenant": tenant,
        "budgets": budgets,
        "own": own,
        "status": status,
        "window_name": name,
        "alerts": list(alerts[:10]),
        "findings": findings,
        "efficiency": per_tenant.get(tenant.slug),
        "chart": charts.burn(
            days,
            daily,
            budget=own.amount if own else None,
            currency=own.currency if own else "",
            forecast_at=status.forecast_exhausted_at if status else None,
            title=_("Spend of %(tenant)s in %(period)s") % {"tenant": tenant.slug, "period": name},
        ),
        "threshold": billing_setting("IDLE_THRESHOLD"),
    }


urlpatterns = [
    path("billing/", billing_home, name="billing-home"),
    path("billing/statements/<int:pk>/", statement_detail, name="billing-statement"),
    path(
        "billing/periods/<str:name>/export/<str:fmt>/", period_export, name="billing-period-export"
    ),
    path("billing/periods/<str:name>/close/", period_close, name="portal-billing-period-close"),
]
