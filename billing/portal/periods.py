"""Billing periods from finance's side: every period with its state and totals, its
downloads, and closing one with a confirmation that says what will freeze."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from billing import selectors
from billing.charging.pricing import IDLE_TENANT
from billing.errors import PeriodBusy, PeriodClosed
from billing.models import BillingPeriod
from billing.permissions import can_manage_platform_billing
from billing.portal.common import period_or_404, require_billing_reader, subtree_from_query
from billing.reporting import reports
from billing.statements import exports, periods
from scheduler_bridge.templatetags.tidegate import money
from tenants.errors import PermissionDenied, TidegateError
from tenants.models import Tenant


@dataclass(frozen=True)
class ClosePreview:
    """What closing a period writes and freezes, as the confirmation states it."""

    statements: int
    tenants: int
    lines: int
    total: Decimal
    currency: str
    idle: bool
    # totals in other currencies (tenants billed in them), never added to ``total``
    others: tuple[tuple[str, Decimal], ...] = ()

    @property
    def currency_text(self) -> str:
        """The currency after ``total``, followed by the totals in other currencies:
        "USD · 348.04 CNY"."""
        return " · ".join([self.currency, *(money(a, c) for c, a in self.others)])


def close_preview(
    user: Any, period: BillingPeriod, report: reports.PeriodReport | None = None
) -> ClosePreview:
    """Statements (one per active tenant or tenant with charges, plus the idle capacity
    statement when the policy shows it as a line), lines and total the close will freeze,
    priced as of now like the close itself (billing.statements.periods). ``report``: the caller's
    whole-platform report of ``period``, when it has one already."""
    report = report or reports.period_report(user, period)
    charged = {row.tenant_id for row in report.rows if row.tenant_id is not None}
    active = set(Tenant.objects.filter(is_active=True).values_list("pk", flat=True))
    tenants = len(active | charged)
    idle = any(row.tenant == IDLE_TENANT for row in report.rows)
    return ClosePreview(
        statements=tenants + (1 if idle else 0),
        tenants=tenants,
        lines=len(report.rows),
        total=report.total,
        currency=report.currency,
        idle=idle,
        others=tuple(
            (c, a) for c, a in report.totals_by_currency().items() if c != report.currency
        ),
    )


def may_close(user: Any, period: BillingPeriod) -> bool:
    return (
        can_manage_platform_billing(user)
        and period.state != BillingPeriod.State.CLOSED
        and period.end <= timezone.now()
    )


@login_required
def period_list(request: HttpRequest) -> HttpResponse:
    """Every period, newest first: state, statements and totals, downloads, close."""
    require_billing_reader(request)
    visible = selectors.periods_visible_to(request.user).order_by("-start")
    # totals per currency: statements billed in different currencies are never added up
    frozen: dict[int, dict[str, Any]] = {}
    for found in (
        selectors.statements_visible_to(request.user)
        .filter(tenant__isnull=False)
        .order_by("period_id", "currency")
        .values("period_id", "currency")
        .annotate(total=Sum("total"), statements=Count("id"))
    ):
        entry = frozen.setdefault(found["period_id"], {"statements": 0, "totals": []})
        entry["statements"] += found["statements"]
        entry["totals"].append({"total": found["total"], "currency": found["currency"]})
    now = timezone.now()
    rows = []
    for period in visible[:60]:
        row: dict[str, Any] = {
            "period": period,
            "frozen": frozen.get(period.pk),
            "ended": period.end <= now,
        }
        if period.state != BillingPeriod.State.CLOSED and period.start <= now:
            report = reports.period_report(request.user, period)
            row["provisional_total"] = report.total
            row["provisional_totals"] = report.totals_by_currency()
            row["currency"] = report.currency
            if may_close(request.user, period):
                row["preview"] = close_preview(request.user, period, report)
        rows.append(row)
    return render(request, "billing/periods.html", {"rows": rows})


@login_required
def period_export(request: HttpRequest, name: str, fmt: str) -> HttpResponse:
    require_billing_reader(request)
    if fmt not in exports.CONTENT_TYPES:
        raise Http404
    period = period_or_404(name)
    subtree = subtree_from_query(request)
    report = reports.period_report(request.user, period, subtree=subtree)
    response = HttpResponse(exports.export(report, fmt), content_type=exports.CONTENT_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="{exports.filename(report, fmt)}"'
    response["X-Tidegate-Provisional"] = "true" if report.provisional else "false"
    return response


@login_required
@require_POST
def period_close(request: HttpRequest, name: str) -> HttpResponse:
    """Close a period from the portal, then back to the page it was closed from."""
    require_billing_reader(request)
    period = period_or_404(name)
    try:
        periods.period_close(actor=request.user, period=period, source="portal")
    except TidegateError as error:
        messages.error(request, _close_refused(error, period))
    else:
        messages.success(
            request,
            _("Period %(name)s closed: its statements are frozen.") % {"name": period.name},
        )
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = f"{reverse('billing-home')}?period={period.name}"
    return redirect(target)


def _close_refused(error: TidegateError, period: BillingPeriod) -> str:
    """Why a close was refused, in the user's language."""
    period.refresh_from_db()
    if isinstance(error, PermissionDenied):
        return _(
            "Closing a billing period needs the platform admin role, or finance on every "
            "top-level tenant."
        )
    if isinstance(error, PeriodBusy):
        return _("Billing period %(name)s is being closed right now; try again in a minute.") % {
            "name": period.name
        }
    if isinstance(error, PeriodClosed) and period.state == BillingPeriod.State.CLOSED:
        return _(
            "Billing period %(name)s is already closed; its statements are frozen. Record "
            "corrections as adjustments in an open period."
        ) % {"name": period.name}
    if isinstance(error, PeriodClosed):
        return _(
            "Billing period %(name)s runs until %(end)s; it can be closed once it has ended."
        ) % {"name": period.name, "end": period.end.date().isoformat()}
    return error.message
