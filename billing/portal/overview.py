"""The finance overview of one period and the month-over-month trend."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from decimal import Decimal
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.translation import gettext as _

from billing import selectors
from billing.charging.pricing import IDLE_TENANT
from billing.models import BillingPeriod, BillingPolicy
from billing.portal.common import (
    IDLE_COST_CENTRE,
    period_from_query,
    require_billing_reader,
    subtree_from_query,
)
from billing.portal.periods import close_preview, may_close
from billing.reporting import charts, reports

TREND_PERIODS = 12


def by_cost_centre(report: reports.PeriodReport) -> list[dict[str, Any]]:
    """The report summed per cost centre; idle capacity is its own (the platform's)."""
    rows = [
        replace(r, cost_center=IDLE_TENANT) if r.tenant == IDLE_TENANT else r for r in report.rows
    ]
    return reports.PeriodReport(report.period, report.provisional, rows, report.currency).grouped(
        "cost_center"
    )


def cost_centre_code(key: str) -> str:
    """The ``code`` query value of a grouped cost centre ("—" is the empty one)."""
    return "" if key == "—" else key


@login_required
def billing_home(request: HttpRequest) -> HttpResponse:
    """Finance overview of one period (default: the current month)."""
    require_billing_reader(request)
    period = period_from_query(request)
    subtree = subtree_from_query(request)
    report = reports.period_report(request.user, period, subtree=subtree)
    cost_centres = by_cost_centre(report)
    for group in cost_centres:
        group["name"] = _cost_centre_name(group["key"])
        group["url"] = (
            reverse("billing-cost-centre", args=[period.name])
            + "?"
            + urlencode({"code": cost_centre_code(group["key"])})
        )
    statements = list(
        selectors.statements_visible_to(request.user)
        .filter(period=period)
        .order_by("tenant_slug")[:500]
    )
    statement_of = {s.tenant_slug: s.pk for s in statements}
    by_tenant = report.grouped("tenant")
    for group in by_tenant:
        if group["key"] in statement_of:
            group["url"] = reverse("billing-statement", args=[statement_of[group["key"]]])
        elif group["key"] == IDLE_TENANT:
            group["url"] = reverse("billing-idle") + "?" + urlencode({"period": period.name})
        else:
            group["url"] = "?" + urlencode({"period": period.name, "tenant": group["key"]})
    month_end = min(timezone.now(), period.end)
    closable = may_close(request.user, period) and subtree is None
    context = {
        "period": period,
        "periods": selectors.periods_visible_to(request.user).order_by("-start")[:24],
        "subtree": subtree,
        "report": report,
        "by_tenant": by_tenant,
        "by_cost_center": cost_centres,
        "by_flavor": report.grouped("flavor"),
        "chart": charts.spend_by_cost_center(
            [g | {"key": g["name"]} for g in cost_centres],
            report.currency,
            _("Spend per cost centre, %(period)s") % {"period": period.name},
        ),
        "efficiency": reports.efficiency_by_tenant(
            request.user, start=period.start, end=month_end, subtree=subtree
        ),
        "statements": statements,
        "may_close": closable,
        "preview": close_preview(request.user, period, report) if closable else None,
    }
    return render(request, "billing/home.html", context)


def _cost_centre_name(key: str) -> str:
    if key == IDLE_TENANT:
        return str(IDLE_COST_CENTRE)
    return _("no cost centre") if key == "—" else key


@login_required
def spend_trend(request: HttpRequest) -> HttpResponse:
    """Chargeback and showback of the last 12 periods, for all or one cost centre."""
    require_billing_reader(request)
    user = request.user
    code = request.GET.get("cost_centre")
    recent = list(selectors.periods_visible_to(user).order_by("-start")[:TREND_PERIODS])[::-1]
    statements = selectors.statements_visible_to(user).filter(
        period__in=recent, tenant__isnull=False
    )
    tenants = selectors.billing_tenants(user)
    centres = sorted(
        {c for c in statements.values_list("cost_center", flat=True).distinct() if c}
        | {c for c in tenants.values_list("cost_center", flat=True).distinct() if c}
    )
    if code:
        statements = statements.filter(cost_center=code)
    # One chart, one currency (the platform's): statements billed in another are listed
    # apart, never added in.
    currency = BillingPolicy.current().default_currency
    other_currencies = sorted(
        set(statements.exclude(currency=currency).values_list("currency", flat=True).distinct())
    )
    statements = statements.filter(currency=currency)
    amounts: dict[tuple[int, str], Decimal] = defaultdict(Decimal)
    for frozen in statements.order_by().values("period_id", "mode").annotate(total=Sum("total")):
        amounts[(frozen["period_id"], frozen["mode"])] += frozen["total"] or Decimal(0)
    now = timezone.now()
    for period in recent:
        if period.state == BillingPeriod.State.CLOSED or period.start > now:
            continue
        report = reports.period_report(user, period)
        for row in report.rows:
            if row.tenant_id is None or (code and row.cost_center != code):
                continue
            if row.currency != currency:
                if row.currency not in other_currencies:
                    other_currencies.append(row.currency)
                continue
            amounts[(period.pk, row.mode)] += row.amount
    labels = [p.name + ("*" if p.state != BillingPeriod.State.CLOSED else "") for p in recent]
    chargeback = [amounts[(p.pk, "chargeback")] for p in recent]
    showback = [amounts[(p.pk, "showback")] for p in recent]
    title = (
        _("Spend per month of cost centre %(code)s") % {"code": code}
        if code
        else _("Spend per month, all cost centres")
    )
    rows = [
        {"period": p, "chargeback": c, "showback": s, "total": c + s}
        for p, c, s in zip(recent, chargeback, showback, strict=True)
    ]
    context = {
        "rows": rows[::-1],
        "centres": centres,
        "code": code or "",
        "currency": currency,
        "other_currencies": sorted(other_currencies),
        "chart": charts.trend(labels, chargeback, showback, currency=currency, title=title)
        if recent
        else "",
    }
    return render(request, "billing/trend.html", context)
