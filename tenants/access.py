"""Access control in one place: every queryset, API view and portal page asks here.

A role on a tenant covers the tenant's whole subtree. Platform administrators (staff)
see and write everything. Members read their tenants; leads also manage members and
namespace bindings; finance reads everything billing-related; admins write everything.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Q, QuerySet

from tenants.models import AuditEvent, Membership, NamespaceBinding, Role, Tenant

ALL_ROLES = frozenset(Role.values)
MANAGE_MEMBERS_ROLES = frozenset({Role.ADMIN, Role.LEAD})
MANAGE_BINDINGS_ROLES = frozenset({Role.ADMIN, Role.LEAD})
BILLING_READ_ROLES = frozenset({Role.ADMIN, Role.FINANCE, Role.LEAD})
WRITE_ALL_ROLES = frozenset({Role.ADMIN})


def is_platform_admin(user: Any) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.is_staff)


def _role_paths(user: Any, roles: Iterable[str]) -> list[str]:
    """Paths of the tenants on which `user` holds one of `roles` (cached per request user)."""
    if not (user and user.is_authenticated and user.is_active):
        return []
    cache: dict[str, str] | None = getattr(user, "_tidegate_role_paths", None)
    if cache is None:
        cache = {}
        for path, role in Membership.objects.filter(user=user).values_list("tenant__path", "role"):
            cache[path] = role
        user._tidegate_role_paths = cache
    wanted = set(roles)
    return [path for path, role in cache.items() if role in wanted]


def _subtree_filter(paths: list[str], field: str = "path") -> Q:
    query = Q(pk__in=[])
    for path in paths:
        query |= Q(**{f"{field}__startswith": path})
    return query


def tenants_with_role(user: Any, roles: Iterable[str] = ALL_ROLES) -> QuerySet[Tenant]:
    """Tenants on which `user` holds one of `roles`, directly or through an ancestor."""
    if is_platform_admin(user):
        return Tenant.objects.all()
    return Tenant.objects.filter(_subtree_filter(_role_paths(user, roles)))


def tenants_visible_to(user: Any) -> QuerySet[Tenant]:
    """Every tenant `user` may read: the subtrees of all their memberships."""
    return tenants_with_role(user, ALL_ROLES)


def tenant_filter(user: Any, roles: Iterable[str] = ALL_ROLES, field: str = "tenant") -> Q:
    """A Q object restricting any model with a tenant foreign key to what `user` may see.

    `field` is the lookup path to the tenant (e.g. "tenant" or "workload__tenant").
    """
    if is_platform_admin(user):
        return Q()
    return _subtree_filter(_role_paths(user, roles), field=f"{field}__path")


def has_role(user: Any, tenant: Tenant, roles: Iterable[str]) -> bool:
    """Whether `user` holds one of `roles` on `tenant` or on one of its ancestors."""
    if is_platform_admin(user):
        return True
    return any(tenant.path.startswith(path) for path in _role_paths(user, roles))


def role_on(user: Any, tenant: Tenant) -> str | None:
    """The strongest role `user` holds over `tenant` (staff count as admin)."""
    if is_platform_admin(user):
        return Role.ADMIN
    order = [Role.ADMIN, Role.LEAD, Role.FINANCE, Role.MEMBER]
    for role in order:
        if has_role(user, tenant, [role]):
            return role
    return None


def can_manage_members(user: Any, tenant: Tenant) -> bool:
    return has_role(user, tenant, MANAGE_MEMBERS_ROLES)


def can_manage_bindings(user: Any, tenant: Tenant) -> bool:
    return has_role(user, tenant, MANAGE_BINDINGS_ROLES)


def can_write_tenant(user: Any, tenant: Tenant) -> bool:
    return has_role(user, tenant, WRITE_ALL_ROLES)


def can_read_billing(user: Any, tenant: Tenant) -> bool:
    return has_role(user, tenant, BILLING_READ_ROLES)


def grantable_roles(user: Any, tenant: Tenant) -> set[str]:
    """Roles `user` may hand out on `tenant`: admins any, leads member and lead only."""
    if has_role(user, tenant, WRITE_ALL_ROLES):
        return set(ALL_ROLES)
    if has_role(user, tenant, [Role.LEAD]):
        return {Role.MEMBER, Role.LEAD}
    return set()


def memberships_visible_to(user: Any) -> QuerySet[Membership]:
    return Membership.objects.filter(tenant_filter(user)).select_related("user", "tenant")


def bindings_visible_to(user: Any) -> QuerySet[NamespaceBinding]:
    return NamespaceBinding.objects.filter(tenant_filter(user)).select_related("tenant")


def audit_events_visible_to(user: Any) -> QuerySet[AuditEvent]:
    """Staff see the whole trail; tenant admins the events of their subtrees."""
    if is_platform_admin(user):
        return AuditEvent.objects.all()
    return AuditEvent.objects.filter(
        _subtree_filter(_role_paths(user, WRITE_ALL_ROLES), field="tenant_path")
    )


def clear_access_cache(user: Any) -> None:
    """Forget cached roles (after a membership of `user` changed within one request)."""
    if hasattr(user, "_tidegate_role_paths"):
        del user._tidegate_role_paths


def roles_held(user: Any) -> set[str]:
    """The set of roles `user` holds anywhere (for navigation)."""
    _role_paths(user, ALL_ROLES)
    return set(getattr(user, "_tidegate_role_paths", {}).values())
