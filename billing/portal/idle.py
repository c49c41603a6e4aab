"""Idle capacity explained: what it is, how it is computed, where the billing policy puts
it, and what each tenant pays (or would pay) when it is shared out by guarantee."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext_lazy

from billing import selectors
from billing.charging import pricing
from billing.charging.charges import PricingContext, price_period
from billing.models import BillingPolicy
from billing.permissions import can_manage_platform_billing
from billing.portal.common import can_read_rate_cards, period_from_query
from billing.reporting import reports
from tenants.models import Tenant

ZERO = Decimal("0.00")
POLICY_LABELS: dict[str, Any] = {
    BillingPolicy.IdleMode.HIDDEN: gettext_lazy("Not shown on statements"),
    BillingPolicy.IdleMode.LINE: gettext_lazy("Kept on the platform's own statement"),
    BillingPolicy.IdleMode.SPREAD: gettext_lazy("Shared out over tenants by guarantee"),
}


def _hours(period_start: Any, until: Any) -> Fraction:
    return Fraction(int(max((until - period_start).total_seconds(), 0)), 3600)


@login_required
def idle_capacity(request: HttpRequest) -> HttpResponse:
    """Finance and platform billing managers; the platform-wide amounts only to managers."""
    if not can_read_rate_cards(request.user):
        raise Http404
    period = period_from_query(request)
    manager = can_manage_platform_billing(request.user)
    context = PricingContext.load()
    until = min(timezone.now(), period.end)
    # Priced as if idle were shared out by guarantee: the idle lines that no guarantee
    # covers stay whole; the rest become each tenant's share.
    priced = price_period(
        period,
        as_of=until,
        context=context,
        idle_mode=BillingPolicy.IdleMode.SPREAD,
        convert=False,  # idle is explained in the cards' currency
    )
    idle_lines = [line for line in priced.lines if pricing.KIND_FACTS[line.kind].idle]
    per_flavour: dict[int, dict[str, Any]] = {}
    hours = _hours(period.start, until)
    for line in idle_lines:
        flavour = context.flavours.get(line.flavour_id or 0)
        if flavour is None:
            continue
        group = per_flavour.setdefault(
            flavour.id,
            {
                "flavour": flavour.name,
                "capacity": pricing.round_half_even(flavour.capacity * flavour.fraction * hours, 2),
                "idle_hours": Decimal(0),
                "amount": ZERO,
                "rate": line.rate,
            },
        )
        group["idle_hours"] += line.gpu_hours
        group["amount"] += line.amount
    for group in per_flavour.values():
        group["share"] = (
            group["idle_hours"] * 100 / group["capacity"] if group["capacity"] else None
        )
    visible = reports.visible_tenant_ids(request.user)
    names = dict(Tenant.objects.values_list("pk", "slug"))
    shares: dict[str, Decimal] = defaultdict(lambda: ZERO)
    for line in idle_lines:
        if line.tenant_id is None or (visible is not None and line.tenant_id not in visible):
            continue
        shares[names.get(line.tenant_id, "?")] += line.amount
    total_idle = sum((line.amount for line in idle_lines), ZERO)
    report = reports.period_report(request.user, period) if manager else None
    total = report.total if report is not None else None
    policy = context.policy.idle_mode
    kept = sum((line.amount for line in idle_lines if line.tenant_id is None), ZERO)
    page = {
        "period": period,
        "periods": selectors.periods_visible_to(request.user).order_by("-start")[:24],
        "manager": manager,
        "policy": policy,
        "policy_label": POLICY_LABELS.get(policy, policy),
        "flavours": sorted(per_flavour.values(), key=lambda g: -g["amount"]),
        "shares": sorted(shares.items(), key=lambda kv: -kv[1]),
        "total_idle": total_idle,
        "kept": kept,
        "total": total,
        "idle_percent": (
            total_idle * 100 / total if total and policy == BillingPolicy.IdleMode.LINE else None
        ),
        "currency": context.currency_at(period.start),
        "provisional": period.state != period.State.CLOSED,
    }
    return render(request, "billing/idle.html", page)
