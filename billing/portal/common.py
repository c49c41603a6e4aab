"""What the billing pages share: who may open them (everyone else gets 404), the period
and subtree a page is about, and the names finance reads instead of codes."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext, gettext_lazy

from billing import selectors
from billing.charging.pricing import IDLE_TENANT, charge_kind_facts
from billing.models import BillingPeriod
from billing.permissions import can_manage_platform_billing, can_read_any_billing
from billing.statements import periods
from tenants import access
from tenants.models import Role, Tenant

IDLE_NAME = gettext_lazy("Idle capacity (held by no tenant)")
IDLE_COST_CENTRE = gettext_lazy("Platform (idle capacity)")


def line_kind(kind: str) -> str:
    """What a kind of statement line is, in words finance reads (the code itself for
    anything else, such as a flavour's name in the same column)."""
    facts = charge_kind_facts(kind)
    return gettext(facts.label) if facts is not None else kind


def tenant_label(slug: str) -> str:
    """A tenant slug as shown; the platform's idle statement gets a name, not ``__idle__``."""
    return str(IDLE_NAME) if slug == IDLE_TENANT else slug


def require_billing_reader(request: HttpRequest) -> None:
    if not can_read_any_billing(request.user):
        raise Http404


def can_read_rate_cards(user: Any) -> bool:
    """Finance (on any tenant) and platform billing managers read the rate cards page."""
    return can_manage_platform_billing(user) or Role.FINANCE in access.roles_held(user)


def period_or_404(name: str) -> BillingPeriod:
    return get_object_or_404(BillingPeriod, name=name)


def period_from_query(request: HttpRequest) -> BillingPeriod:
    name = request.GET.get("period")
    if name:
        return period_or_404(name)
    return periods.period_current()


def subtree_from_query(request: HttpRequest) -> Tenant | None:
    slug = request.GET.get("tenant")
    if not slug:
        return None
    return get_object_or_404(selectors.billing_tenants(request.user), slug=slug)
