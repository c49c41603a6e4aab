"""Reads of billing, every one scoped through `tenants.access` (see billing.permissions)."""

from __future__ import annotations

from typing import Any

from django.db.models import F, Q, QuerySet

from billing.models import (
    Adjustment,
    BillingPeriod,
    Budget,
    BudgetAlert,
    ExchangeRate,
    RateCard,
    Statement,
    StatementLine,
    TenantBillingSettings,
    UsageRecord,
)
from billing.permissions import (
    can_manage_platform_billing,
    can_read_any_billing,
    can_read_platform_rates,
)
from tenants import access
from tenants.models import Tenant


def billing_tenants(user: Any) -> QuerySet[Tenant]:
    """Tenants whose money `user` may read."""
    return access.tenants_with_role(user, access.BILLING_READ_ROLES)


def _scope(user: Any, field: str = "tenant") -> Q:
    return access.tenant_filter(user, access.BILLING_READ_ROLES, field=field)


def usage_visible_to(user: Any) -> QuerySet[UsageRecord]:
    return UsageRecord.objects.filter(_scope(user))


def statements_visible_to(user: Any, *, current_only: bool = True) -> QuerySet[Statement]:
    """Final statements of the caller's subtrees; the platform's __idle__ statement for
    those who manage platform billing. ``current_only`` hides sets superseded by a re-open.

    Statements of a period still closing are never shown: the set is half written, and
    its amounts are the period's provisional report until the close finishes."""
    scope = _scope(user)
    # An empty Q (platform admins: everything) must stay empty: Q() | x would be just x.
    if scope and can_manage_platform_billing(user):
        scope |= Q(tenant__isnull=True)
    statements = (
        Statement.objects.filter(scope)
        .exclude(revision=F("period__revision"), period__state=BillingPeriod.State.CLOSING)
        .select_related("period", "tenant")
    )
    if current_only:
        statements = statements.filter(revision=F("period__revision"))
    return statements


def statement_lines_visible_to(user: Any) -> QuerySet[StatementLine]:
    return StatementLine.objects.filter(statement__in=statements_visible_to(user))


def budgets_visible_to(user: Any) -> QuerySet[Budget]:
    return Budget.objects.filter(_scope(user)).select_related("tenant", "status")


def budget_alerts_visible_to(user: Any) -> QuerySet[BudgetAlert]:
    return BudgetAlert.objects.filter(_scope(user, "budget__tenant")).select_related(
        "budget", "budget__tenant"
    )


def adjustments_visible_to(user: Any) -> QuerySet[Adjustment]:
    return Adjustment.objects.filter(_scope(user)).select_related(
        "tenant", "period", "corrects", "created_by"
    )


def tenant_settings_visible_to(user: Any) -> QuerySet[TenantBillingSettings]:
    return TenantBillingSettings.objects.filter(_scope(user)).select_related("tenant")


def rate_cards_visible_to(user: Any) -> QuerySet[RateCard]:
    """Prices apply to everyone, so anyone who reads money reads them all."""
    cards = RateCard.objects.select_related("cluster", "flavour", "flavour__cluster")
    return cards if can_read_any_billing(user) else cards.none()


def exchange_rates_visible_to(user: Any) -> QuerySet[ExchangeRate]:
    """Rates convert everyone's charges; finance and platform billing read them."""
    rates = ExchangeRate.objects.all()
    return rates if can_read_platform_rates(user) else rates.none()


def periods_visible_to(user: Any) -> QuerySet[BillingPeriod]:
    periods = BillingPeriod.objects.all()
    return periods if can_read_any_billing(user) else periods.none()
