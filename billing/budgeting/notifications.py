"""Who hears about budget alerts and suspensions, and what the e-mails say."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from billing.models import Budget, BudgetAlert
from scheduler_bridge.workloads.models import Workload
from tenants.languages import emails_by_language
from tenants.models import Membership, Role

NOTIFIED_ROLES = (Role.ADMIN, Role.FINANCE, Role.LEAD)


def alert_recipients(alert: BudgetAlert) -> dict[str, list[str]]:
    """E-mail addresses of admins, finance and leads on the budget's tenant or above it,
    grouped by the language each chose (each group gets the mail in its language)."""
    tenant = alert.budget.tenant
    memberships = Membership.objects.filter(
        tenant_id__in=tenant.ancestor_ids(), role__in=NOTIFIED_ROLES
    ).select_related("user")
    return emails_by_language({m.user for m in memberships})


def alert_mail(alert: BudgetAlert) -> tuple[str, str]:
    budget = alert.budget
    values = {
        "tenant": budget.tenant.name,
        "slug": budget.tenant.slug,
        "threshold": alert.threshold,
        "period": alert.period_name,
        "spent": alert.spent,
        "amount": alert.amount,
        "currency": alert.currency,
        "kind": budget.get_enforcement_display(),
    }
    subject = (
        _("[Tidegate] %(slug)s has used %(threshold)s %% of its budget for %(period)s") % values
    )
    body = (
        _(
            "%(tenant)s (%(slug)s) has spent %(spent)s %(currency)s of its %(amount)s %(currency)s "
            "budget for %(period)s, crossing the %(threshold)s %% threshold.\n\n"
            "Budget type: %(kind)s. A hard budget stops admission of new GPU work once it is spent.\n"
            "See the tenant page in Tidegate for the burn rate and the forecast."
        )
        % values
    )
    return subject, body


def suspension_recipients(budget: Budget, workloads: Sequence[Workload]) -> dict[str, list[str]]:
    """Those told an alert of ``budget`` (admins, finance, leads on its tenant or above)
    and the leads of each tenant whose work was suspended, grouped by language."""
    tenant = budget.tenant
    memberships = Membership.objects.filter(
        tenant_id__in=tenant.ancestor_ids(), role__in=NOTIFIED_ROLES
    ).select_related("user")
    leads = Membership.objects.filter(
        tenant_id__in={w.tenant_id for w in workloads}, role=Role.LEAD
    ).select_related("user")
    return emails_by_language({m.user for m in [*memberships, *leads]})


def suspension_mail(
    budget: Budget,
    period_name: str,
    spent: Decimal,
    amount: Decimal,
    workloads: Sequence[Workload],
) -> tuple[str, str]:
    """The notice that a spent hard budget suspended running work, in the active language."""
    values = {
        "tenant": budget.tenant.name,
        "slug": budget.tenant.slug,
        "period": period_name,
        "spent": spent,
        "amount": amount,
        "currency": budget.currency,
        "count": len(workloads),
    }
    subject = (
        ngettext(
            "[Tidegate] %(slug)s budget for %(period)s is spent: %(count)s workload suspended",
            "[Tidegate] %(slug)s budget for %(period)s is spent: %(count)s workloads suspended",
            len(workloads),
        )
        % values
    )
    body = (
        _(
            "%(tenant)s (%(slug)s) has spent %(spent)s %(currency)s of its %(amount)s "
            "%(currency)s hard budget for %(period)s. The budget suspends running work that "
            "may be preempted once it is spent, so this work went back to the queue:"
        )
        % values
    )
    lines = [f"  - {w.tenant.slug}/{w.name} (#{w.pk})" for w in workloads]
    ending = _(
        "It starts again when the budget allows it (a new budget period, or a larger "
        "budget). Work that may not be preempted keeps running."
    )
    return subject, "\n".join([body, "", *lines, "", ending])
