"""Budgets in the portal: the lead's budget panel on tenant pages (refreshed live through
an htmx partial) and finance's table and burn heat map of every budget it reads."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from billing import selectors
from billing.budgeting.budgets import (
    BurnRate,
    budget_create,
    budget_update,
    budget_window,
    status_burn_rate,
)
from billing.budgeting.spend import daily_spend, days_between
from billing.charging.charges import PricingContext
from billing.conf import billing_setting
from billing.models import Budget, BudgetAlert, BudgetStatus
from billing.permissions import can_write_billing
from billing.portal.common import require_billing_reader
from billing.reporting import charts, reports
from tenants import access
from tenants.errors import TidegateError
from tenants.models import Tenant


def burn_explained(rate: BurnRate) -> str:
    """How the shown burn rate (the one the forecast uses) was computed, in words."""
    if rate.basis == "running":
        return _(
            "what the work running now costs per hour; the average of the last %(hours)s h "
            "of metered spend is lower (%(recent)s/h)"
        ) % {"hours": rate.window_hours, "recent": f"{rate.recent_per_hour:.2f}"}
    return _("average of the last %(hours)s h of metered spend") % {"hours": rate.window_hours}


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
    subtree = set(Tenant.objects.filter(path__startswith=tenant.path).values_list("pk", flat=True))
    spend = daily_spend({tenant.slug: subtree}, start, min(end, now + timedelta(hours=1)))
    status = getattr(own, "status", None) if own else None
    rate = status_burn_rate(status) if status is not None else None
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
        "rate": rate,
        "rate_explained": burn_explained(rate) if rate is not None else "",
        "window_name": name,
        "alerts": list(alerts[:10]),
        "findings": findings,
        "efficiency": per_tenant.get(tenant.slug),
        "chart": charts.burn(
            spend.days,
            spend.amounts[tenant.slug],
            budget=own.amount if own else None,
            currency=own.currency if own else "",
            forecast_at=status.forecast_exhausted_at if status else None,
            title=_("Spend of %(tenant)s in %(period)s") % {"tenant": tenant.slug, "period": name},
            projection=_projection(status, rate, end),
        ),
        "threshold": billing_setting("IDLE_THRESHOLD"),
    }


def _projection(
    status: BudgetStatus | None, rate: BurnRate | None, window_end: datetime
) -> tuple[datetime, Decimal, datetime, Decimal] | None:
    """Spend from the evaluation on at the burn rate, up to the forecast or the window's end."""
    if status is None or rate is None or rate.per_hour <= 0:
        return None
    until = status.forecast_exhausted_at or window_end
    if until <= status.evaluated_at:
        return None
    hours = Decimal((until - status.evaluated_at).total_seconds()) / 3600
    return status.evaluated_at, status.spent, until, status.spent + rate.per_hour * hours


@login_required
def budget_panel_partial(request: HttpRequest, slug: str) -> HttpResponse:
    """The budget panel alone, for its htmx refresh every 30 s (404 to whoever may not
    read the tenant's money)."""
    tenant = get_object_or_404(access.tenants_visible_to(request.user), slug=slug)
    panel = budget_panel(request, tenant)
    if panel is None:
        raise Http404
    return render(request, "billing/budget_panel_body.html", {"panel": panel})


@login_required
def budget_overview(request: HttpRequest) -> HttpResponse:
    """Every budget the user reads, with spend, burn and forecast, and a heat map of the
    share of each budget spent day by day this month."""
    require_billing_reader(request)
    now = timezone.now()
    budgets = list(selectors.budgets_visible_to(request.user).order_by("tenant__path", "cadence"))
    rows = []
    for budget in budgets:
        status = getattr(budget, "status", None)
        rate = status_burn_rate(status) if status is not None else None
        share = status.spent * 100 / budget.amount if status is not None and budget.amount else None
        rows.append(
            {
                "budget": budget,
                "status": status,
                "rate": rate,
                "rate_explained": burn_explained(rate) if rate is not None else "",
                "share": share,
                "may_edit": can_write_billing(request.user, budget.tenant),
            }
        )
    chart = _heatmap(budgets, now) if budgets else ""
    context = {"rows": rows, "chart": chart, "may_create": may_create_budgets(request.user)}
    return render(request, "billing/budgets.html", context)


class BudgetForm(forms.Form):
    """What the portal changes on a budget (its tenant, cadence and currency stay)."""

    amount = forms.DecimalField(
        label=gettext_lazy("Amount"), max_digits=14, decimal_places=2, min_value=0.01
    )
    enforcement = forms.ChoiceField(
        label=gettext_lazy("Type"),
        choices=Budget.Enforcement.choices,
        help_text=gettext_lazy("A hard budget holds new work back once it is spent."),
    )
    on_exhausted = forms.ChoiceField(
        label=gettext_lazy("When a hard budget is spent"),
        choices=Budget.OnExhausted.choices,
        help_text=Budget._meta.get_field("on_exhausted").help_text,
    )
    is_active = forms.BooleanField(label=gettext_lazy("Active"), required=False)


@login_required
def budget_edit(request: HttpRequest, pk: int) -> HttpResponse:
    """Change a budget's amount, type and what it does once spent (404 to whoever may not
    write its tenant's budgets; a refused value is a field error, 400)."""
    budget = get_object_or_404(selectors.budgets_visible_to(request.user), pk=pk)
    if not can_write_billing(request.user, budget.tenant):
        raise Http404
    fields = ("amount", "enforcement", "on_exhausted", "is_active")
    form = BudgetForm(initial={name: getattr(budget, name) for name in fields})
    status = 200
    if request.method == "POST":
        form = BudgetForm(request.POST)
        if form.is_valid():
            try:
                budget_update(
                    actor=request.user, budget=budget, source="portal", **form.cleaned_data
                )
            except TidegateError as error:
                field = error.field if error.field in form.fields else None
                form.add_error(field, error.message)
            else:
                messages.success(
                    request, _("Budget of %(tenant)s saved.") % {"tenant": budget.tenant.slug}
                )
                return redirect("billing-budgets")
        status = 400
    return render(
        request, "billing/budget_edit.html", {"budget": budget, "form": form}, status=status
    )


class NewBudgetForm(BudgetForm):
    """A budget to create: its tenant (one the reader may set budgets of), cadence and
    currency, then what BudgetForm changes."""

    field_order = ["tenant", "cadence", "amount", "currency", "enforcement", "on_exhausted"]

    tenant = forms.ModelChoiceField(
        label=gettext_lazy("Tenant"), queryset=Tenant.objects.none(), to_field_name="slug"
    )
    cadence = forms.ChoiceField(label=gettext_lazy("Period"), choices=Budget.Cadence.choices)
    currency = forms.CharField(
        label=gettext_lazy("Currency"),
        max_length=3,
        help_text=gettext_lazy("Three capital letters (ISO 4217), e.g. USD."),
    )

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        del self.fields["is_active"]
        writable = [t.pk for t in access.tenants_visible_to(user) if can_write_billing(user, t)]
        field = self.fields["tenant"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = Tenant.objects.filter(pk__in=writable).order_by("path")


def may_create_budgets(user: Any) -> bool:
    return any(can_write_billing(user, t) for t in access.tenants_visible_to(user))


@login_required
def budget_new(request: HttpRequest) -> HttpResponse:
    """Create a budget (finance or admin of a tenant; 404 to anybody else). A refused value
    is a field error, 400, and nothing is written."""
    if not may_create_budgets(request.user):
        raise Http404
    initial = {"currency": PricingContext.load().currency, "cadence": Budget.Cadence.MONTH}
    form = NewBudgetForm(user=request.user, initial=initial)
    status = 200
    if request.method == "POST":
        form = NewBudgetForm(request.POST, user=request.user)
        if form.is_valid():
            fields = dict(form.cleaned_data)
            tenant = fields.pop("tenant")
            try:
                budget_create(actor=request.user, tenant=tenant, source="portal", **fields)
            except TidegateError as error:
                field = error.field if error.field in form.fields else None
                form.add_error(field, error.message)
            else:
                messages.success(
                    request, _("Budget of %(tenant)s created.") % {"tenant": tenant.slug}
                )
                return redirect("billing-budgets")
        status = 400
    return render(request, "billing/budget_new.html", {"form": form}, status=status)


def _heatmap(budgets: list[Budget], now: datetime) -> str:
    """Budgets x days of this month: the share of each budget spent by the end of each day
    (a quarterly budget counts its quarter's earlier months too)."""
    name, start, end = budget_window(Budget.Cadence.MONTH, now)
    paths = dict(Tenant.objects.values_list("pk", "path"))
    groups = {
        f"{b.tenant.slug} ({b.get_cadence_display()})": {
            pk for pk, path in paths.items() if path.startswith(b.tenant.path)
        }
        for b in budgets
    }
    spend = daily_spend(groups, start, min(end, now + timedelta(hours=1)))
    earlier_start = budget_window(Budget.Cadence.QUARTER, now)[1]
    earlier_groups = {
        label: members
        for (label, members), b in zip(groups.items(), budgets, strict=True)
        if b.cadence == Budget.Cadence.QUARTER
    }
    earlier = (
        daily_spend(earlier_groups, earlier_start, start)
        if earlier_groups and earlier_start < start
        else None
    )
    # The whole month is drawn; days still to come stay blank.
    month = days_between(start, end)
    blank: list[float | None] = [None] * (len(month) - len(spend.days))
    shares: list[list[float | None]] = []
    for label, budget in zip(groups, budgets, strict=True):
        before = sum(earlier.amounts.get(label, [])) if earlier else Decimal(0)
        shares.append(
            [
                *(
                    float((before + total) * 100 / budget.amount)
                    for total in spend.cumulative(label)
                ),
                *blank,
            ]
        )
    return charts.budget_heatmap(
        list(groups),
        month,
        shares,
        _("Share of each budget spent by the end of each day, %(period)s") % {"period": name},
        x_title=_("Day of %(period)s") % {"period": name},
    )
