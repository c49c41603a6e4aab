"""Writes to tenants, memberships and namespace bindings.

Every service checks the caller's role, validates, writes and records the audit event in
one transaction. Visibility (404 for what a user may not see) is the caller's job: load
objects through `tenants.access` selectors first.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, Value
from django.db.models.functions import Concat, Substr
from django.utils.translation import gettext_lazy as _

from tenants import access
from tenants.audit import audit_record, snapshot
from tenants.binding_rules import bindings_changed
from tenants.deletion import blocker_list, deletion_blockers
from tenants.errors import (
    NamespaceAlreadyBound,
    PermissionDenied,
    TenantInUse,
    TreeCycle,
    ValidationFailed,
)
from tenants.history import record_setting, tenant_place
from tenants.models import Membership, NamespaceBinding, Role, Tenant
from tenants.transactions import queue_after_commit

TENANT_FIELDS = ("slug", "name", "cost_center", "weight", "is_active")


def _full_clean(instance: Any, exclude: list[str] | None = None) -> None:
    try:
        instance.full_clean(exclude=exclude, validate_unique=True, validate_constraints=False)
    except DjangoValidationError as error:
        field_errors = {field: [str(m) for m in msgs] for field, msgs in error.message_dict.items()}
        first = next(iter(field_errors.items()))
        raise ValidationFailed(
            _("%(field)s: %(problem)s"),
            params={"field": first[0], "problem": first[1][0]},
            field=first[0],
            field_errors=field_errors,
        ) from error


def _lock_tenants(*tenants: Tenant | None) -> None:
    """Row-lock tenants in primary-key order so concurrent tree edits serialise."""
    ids = sorted({t.pk for t in tenants if t is not None and t.pk})
    if ids:
        list(Tenant.objects.select_for_update().filter(pk__in=ids).order_by("pk"))


def tenant_create(
    *,
    actor: Any,
    parent: Tenant | None,
    slug: str,
    name: str,
    cost_center: str = "",
    weight: Decimal | int | str = Decimal("1"),
    is_active: bool = True,
    source: str = "api",
) -> Tenant:
    """Create a tenant under `parent` (top level: platform admins only).

    Raises PermissionDenied without the admin role on `parent`, ValidationFailed on bad fields.
    """
    if parent is None and not access.is_platform_admin(actor):
        raise PermissionDenied(_("Only platform administrators create top-level tenants."))
    if parent is not None and not access.can_write_tenant(actor, parent):
        raise PermissionDenied(
            _("Creating a tenant under %(parent)s needs the admin role on it."),
            params={"parent": parent.slug},
        )
    tenant = Tenant(
        parent=parent,
        slug=slug,
        name=name,
        cost_center=cost_center,
        weight=Decimal(str(weight)),
        is_active=is_active,
    )
    _full_clean(tenant)
    with transaction.atomic():
        _lock_tenants(parent)
        if parent is not None:
            parent.refresh_from_db()
        try:
            with transaction.atomic():
                tenant.save()
        except IntegrityError as error:
            raise ValidationFailed(
                _("A tenant with slug '%(slug)s' already exists; choose another slug."),
                params={"slug": slug},
                field="slug",
            ) from error
        tenant.path = f"{parent.path if parent else '/'}{tenant.pk}/"
        tenant.depth = parent.depth + 1 if parent else 0
        tenant.save(update_fields=["path", "depth"])
        audit_record(
            actor=actor,
            action="create",
            instance=tenant,
            before=None,
            after=snapshot(tenant),
            source=source,
        )
    return tenant


def tenant_update(
    *,
    actor: Any,
    tenant: Tenant,
    source: str = "api",
    **changes: Any,
) -> Tenant:
    """Change a tenant's fields and/or move it under another parent (`parent=`).

    Moving needs the admin role on both the tenant and its new parent. Moving a tenant under
    itself or one of its descendants raises TreeCycle naming the cycle.
    """
    if not access.can_write_tenant(actor, tenant):
        raise PermissionDenied(
            _("Changing %(tenant)s needs the admin role on it."), params={"tenant": tenant.slug}
        )
    unknown = set(changes) - set(TENANT_FIELDS) - {"parent"}
    if unknown:
        raise ValidationFailed(
            _("Unknown field(s): %(fields)s."), params={"fields": ", ".join(sorted(unknown))}
        )
    if "weight" in changes and Decimal(str(changes["weight"])) != tenant.weight:
        _check_share(actor, tenant)
    moving = "parent" in changes and changes["parent"] != tenant.parent
    new_parent: Tenant | None = changes.pop("parent", tenant.parent)
    if moving:
        if new_parent is None and not access.is_platform_admin(actor):
            raise PermissionDenied(_("Only platform administrators create top-level tenants."))
        if new_parent is not None and not access.can_write_tenant(actor, new_parent):
            raise PermissionDenied(
                _("Moving %(tenant)s under %(parent)s needs the admin role on it."),
                params={"tenant": tenant.slug, "parent": new_parent.slug},
            )
    with transaction.atomic():
        _lock_tenants(tenant, new_parent)
        tenant.refresh_from_db()
        before = snapshot(tenant)
        for field, value in changes.items():
            setattr(tenant, field, Decimal(str(value)) if field == "weight" else value)
        if moving:
            if new_parent is not None:
                new_parent.refresh_from_db()
                if new_parent.pk == tenant.pk or new_parent.path.startswith(tenant.path):
                    chain = _chain(tenant, new_parent)
                    raise TreeCycle(
                        _(
                            "Cannot move %(tenant)s under %(parent)s: it would create the "
                            "cycle %(cycle)s. Choose a parent outside %(tenant)s's subtree."
                        ),
                        params={"tenant": tenant.slug, "parent": new_parent.slug, "cycle": chain},
                    )
            tenant.parent = new_parent
        _full_clean(tenant)
        try:
            with transaction.atomic():
                tenant.save()
        except IntegrityError as error:
            raise ValidationFailed(
                _("A tenant with slug '%(slug)s' already exists; choose another slug."),
                params={"slug": tenant.slug},
                field="slug",
            ) from error
        if moving:
            _move_subtree(tenant, new_parent)
        audit_record(
            actor=actor,
            action="update",
            instance=tenant,
            before=before,
            after=snapshot(tenant),
            source=source,
        )
    return tenant


def can_set_share(actor: Any, tenant: Tenant) -> bool:
    """A tenant's fair-share weight is a claim against its siblings: only an admin of its
    parent (a platform admin for a top-level tenant) sets it, never its own admins."""
    if access.is_platform_admin(actor):
        return True
    return tenant.parent is not None and access.can_write_tenant(actor, tenant.parent)


def _check_share(actor: Any, tenant: Tenant) -> None:
    if can_set_share(actor, tenant):
        return
    if tenant.parent is None:
        raise PermissionDenied(
            _(
                "The fair-share weight of %(tenant)s weighs it against the other top-level "
                "tenants: only platform administrators change it."
            ),
            params={"tenant": tenant.slug},
            field="weight",
        )
    raise PermissionDenied(
        _(
            "The fair-share weight of %(tenant)s weighs it against its siblings under "
            "%(parent)s: only an admin of %(parent)s changes it."
        ),
        params={"tenant": tenant.slug, "parent": tenant.parent.slug},
        field="weight",
    )


def _chain(tenant: Tenant, new_parent: Tenant) -> str:
    """'a -> b -> c -> a': the path from `tenant` down to `new_parent`, then back."""
    ids = new_parent.ancestor_ids()
    ids = ids[ids.index(tenant.pk) :] if tenant.pk in ids else [tenant.pk]
    slugs = dict(Tenant.objects.filter(pk__in=ids).values_list("pk", "slug"))
    return " -> ".join([slugs[i] for i in ids] + [tenant.slug])


def _move_subtree(tenant: Tenant, new_parent: Tenant | None) -> None:
    old_path = tenant.path
    new_path = f"{new_parent.path if new_parent else '/'}{tenant.pk}/"
    depth_shift = (new_parent.depth + 1 if new_parent else 0) - tenant.depth
    # One UPDATE rewrites the prefix of every descendant's path.
    Tenant.objects.filter(path__startswith=old_path).update(
        path=Concat(Value(new_path), Substr("path", len(old_path) + 1)),
        depth=F("depth") + depth_shift,
    )
    tenant.refresh_from_db()
    # the UPDATE sends no post_save: billing's history learns of each move here
    for moved in Tenant.objects.filter(path__startswith=tenant.path):
        record_setting("tenant", moved.pk, tenant_place(moved))


def tenant_delete(*, actor: Any, tenant: Tenant, source: str = "api") -> None:
    """Delete a tenant that nothing points to any more; else raise TenantInUse (409)."""
    if not access.can_write_tenant(actor, tenant):
        raise PermissionDenied(
            _("Deleting %(tenant)s needs the admin role on it."), params={"tenant": tenant.slug}
        )
    if tenant.parent is None and not access.is_platform_admin(actor):
        raise PermissionDenied(_("Only platform administrators delete top-level tenants."))
    with transaction.atomic():
        _lock_tenants(tenant)
        blockers = deletion_blockers(tenant)
        if blockers:
            raise TenantInUse(
                _(
                    "Tenant %(tenant)s still has %(blockers)s. Remove or move them first, or "
                    "mark the tenant inactive instead."
                ),
                params={"tenant": tenant.slug, "blockers": blocker_list(blockers)},
            )
        audit_record(
            actor=actor,
            action="delete",
            instance=tenant,
            before=snapshot(tenant),
            after=None,
            source=source,
        )
        tenant.delete()


def membership_create(
    *, actor: Any, tenant: Tenant, user: Any, role: str, source: str = "api"
) -> Membership:
    """Give `user` a role on `tenant`. Leads grant member and lead; admins any role."""
    _check_grant(actor, tenant, role)
    with transaction.atomic():
        try:
            with transaction.atomic():
                membership = Membership.objects.create(user=user, tenant=tenant, role=role)
        except IntegrityError as error:
            raise ValidationFailed(
                _(
                    "%(user)s is already a member of %(tenant)s; change the existing "
                    "membership's role instead."
                ),
                params={"user": user.get_username(), "tenant": tenant.slug},
                field="user",
            ) from error
        audit_record(
            actor=actor,
            action="create",
            instance=membership,
            before=None,
            after=snapshot(membership),
            source=source,
        )
        queue_after_commit("tenants.tasks.membership_notify", membership.pk)
    access.clear_access_cache(user)
    return membership


def membership_update(
    *, actor: Any, membership: Membership, role: str | None = None, source: str = "api"
) -> Membership:
    """Change a membership's role; without one (a PATCH of no fields), check that the
    actor may change it and change nothing."""
    role = role or membership.role
    _check_grant(actor, membership.tenant, role)
    _check_grant(actor, membership.tenant, membership.role)
    _check_not_own_role(actor, membership)
    if role == membership.role:
        return membership
    with transaction.atomic():
        before = snapshot(membership)
        membership.role = role
        membership.save(update_fields=["role"])
        audit_record(
            actor=actor,
            action="update",
            instance=membership,
            before=before,
            after=snapshot(membership),
            source=source,
        )
    access.clear_access_cache(membership.user)
    return membership


def membership_delete(*, actor: Any, membership: Membership, source: str = "api") -> None:
    _check_grant(actor, membership.tenant, membership.role)
    with transaction.atomic():
        audit_record(
            actor=actor,
            action="delete",
            instance=membership,
            before=snapshot(membership),
            after=None,
            source=source,
        )
        membership.delete()
    access.clear_access_cache(membership.user)


def _check_not_own_role(actor: Any, membership: Membership) -> None:
    """Nobody changes their own role (a lead naming itself lead of more, an admin
    re-granting itself after a demotion); another lead or admin does, or an admin of a
    tenant above, whose power does not rest on this membership."""
    if membership.user_id != getattr(actor, "pk", None) or access.is_platform_admin(actor):
        return
    parent = membership.tenant.parent
    if parent is not None and access.has_role(actor, parent, access.WRITE_ALL_ROLES):
        return
    raise PermissionDenied(
        _("You cannot change your own role on %(tenant)s; ask another lead or an admin."),
        params={"tenant": membership.tenant.slug},
        field="role",
    )


def _check_grant(actor: Any, tenant: Tenant, role: str) -> None:
    if role not in Role.values:
        raise ValidationFailed(
            _("Unknown role '%(role)s'; use one of %(roles)s."),
            params={"role": role, "roles": ", ".join(Role.values)},
            field="role",
        )
    allowed = access.grantable_roles(actor, tenant)
    if not allowed:
        raise PermissionDenied(
            _("Managing members of %(tenant)s needs the lead or admin role."),
            params={"tenant": tenant.slug},
        )
    if role not in allowed:
        raise PermissionDenied(
            _("Your role on %(tenant)s may grant only %(allowed)s, not %(role)s."),
            params={"tenant": tenant.slug, "allowed": ", ".join(sorted(allowed)), "role": role},
        )


def binding_create(
    *, actor: Any, tenant: Tenant, cluster_name: str, namespace: str, source: str = "api"
) -> NamespaceBinding:
    """Bind (cluster, namespace) to `tenant`; a namespace binds to one tenant only."""
    if not access.can_manage_bindings(actor, tenant):
        raise PermissionDenied(
            _("Binding namespaces to %(tenant)s needs the lead or admin role."),
            params={"tenant": tenant.slug},
        )
    binding = NamespaceBinding(tenant=tenant, cluster_name=cluster_name, namespace=namespace)
    _full_clean(binding, exclude=["tenant"])  # NamespaceBinding.clean: binding_rules
    with transaction.atomic():
        try:
            with transaction.atomic():
                binding.save()
        except IntegrityError as error:
            raise _already_bound(actor, cluster_name, namespace) from error
        audit_record(
            actor=actor,
            action="create",
            instance=binding,
            before=None,
            after=snapshot(binding),
            source=source,
        )
        bindings_changed(cluster_name)
    return binding


def _already_bound(actor: Any, cluster_name: str, namespace: str) -> NamespaceAlreadyBound:
    current = (
        NamespaceBinding.objects.filter(cluster_name=cluster_name, namespace=namespace)
        .select_related("tenant")
        .first()
    )
    params = {"namespace": namespace, "cluster": cluster_name}
    if current is not None and access.tenants_visible_to(actor).filter(pk=current.tenant_id):
        return NamespaceAlreadyBound(
            _(
                "Namespace %(namespace)s on cluster %(cluster)s is already bound to tenant "
                "%(tenant)s. A namespace belongs to one tenant; remove that binding first."
            ),
            params=params | {"tenant": current.tenant.slug},
        )
    return NamespaceAlreadyBound(
        _(
            "Namespace %(namespace)s on cluster %(cluster)s is already bound. A namespace "
            "belongs to one tenant; remove that binding first."
        ),
        params=params,
    )


def binding_update(
    *, actor: Any, binding: NamespaceBinding, tenant: Tenant | None = None, source: str = "api"
) -> NamespaceBinding:
    """Hand a namespace over to another tenant (needs lead or admin on both); without
    one (a PATCH of no fields), check that the actor may and change nothing."""
    tenant = tenant or binding.tenant
    for side in (binding.tenant, tenant):
        if not access.can_manage_bindings(actor, side):
            raise PermissionDenied(
                _("Moving bindings of %(tenant)s needs the lead or admin role."),
                params={"tenant": side.slug},
            )
    if tenant == binding.tenant:
        return binding
    with transaction.atomic():
        before = snapshot(binding)
        binding.tenant = tenant
        binding.save(update_fields=["tenant"])
        audit_record(
            actor=actor,
            action="update",
            instance=binding,
            before=before,
            after=snapshot(binding),
            source=source,
        )
        bindings_changed(binding.cluster_name)
    return binding


def binding_delete(*, actor: Any, binding: NamespaceBinding, source: str = "api") -> None:
    """Unbind a namespace; the listeners (the bridge's quota sync) then delete
    Tidegate's ResourceQuota there."""
    if not access.can_manage_bindings(actor, binding.tenant):
        raise PermissionDenied(
            _("Removing bindings of %(tenant)s needs the lead or admin role."),
            params={"tenant": binding.tenant.slug},
        )
    with transaction.atomic():
        audit_record(
            actor=actor,
            action="delete",
            instance=binding,
            before=snapshot(binding),
            after=None,
            source=source,
        )
        binding.delete()
        bindings_changed(binding.cluster_name)


def user_by_username(username: str) -> Any:
    """The active user called `username`, or ValidationFailed naming the field."""
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise ValidationFailed(
            _("No active user named '%(username)s'."), params={"username": username}, field="user"
        )
    return user
