"""Who hears about budget alerts, and what the e-mail says."""

from __future__ import annotations

from django.utils.translation import gettext as _

from billing.models import BudgetAlert
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
