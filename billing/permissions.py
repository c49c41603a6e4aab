"""Who may do what in billing, on top of `tenants.access` (the one place roles live).

* Reading money (statements, ledger, budgets, reports): admin, finance and lead roles, on
  their subtrees (`access.BILLING_READ_ROLES`). Plain members see no money: for them
  billing objects do not exist (404), like for outsiders.
* Budgets, adjustments and tenant billing settings: admin or finance on the tenant.
* Rate cards, the billing policy and closing periods are platform-wide (they price every
  tenant): platform admins, or users holding finance or admin on every top-level tenant
  (in a one-organisation installation, its finance team). Re-opening a closed period is
  for platform admins only.
"""

from __future__ import annotations

from typing import Any

from tenants import access
from tenants.models import Role, Tenant

BILLING_WRITE_ROLES = frozenset({Role.ADMIN, Role.FINANCE})


def can_read_any_billing(user: Any) -> bool:
    """Whether `user` reads money anywhere (rate cards and periods are shared by all)."""
    if access.is_platform_admin(user):
        return True
    return bool(access.roles_held(user) & access.BILLING_READ_ROLES)


def can_manage_platform_billing(user: Any) -> bool:
    if access.is_platform_admin(user):
        return True
    if not (user and user.is_authenticated):
        return False
    roots = list(Tenant.objects.filter(parent__isnull=True))
    return bool(roots) and all(access.has_role(user, root, BILLING_WRITE_ROLES) for root in roots)


def can_read_platform_rates(user: Any) -> bool:
    """Rate cards and exchange rates pages: platform billing managers and finance (on any
    tenant); everyone else gets 404."""
    return can_manage_platform_billing(user) or Role.FINANCE in access.roles_held(user)


def can_reopen_periods(user: Any) -> bool:
    return access.is_platform_admin(user)


def can_write_billing(user: Any, tenant: Tenant) -> bool:
    return access.has_role(user, tenant, BILLING_WRITE_ROLES)
