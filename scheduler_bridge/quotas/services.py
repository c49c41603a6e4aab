"""Writes to quotas and quota requests: role checks, the quota rules, audit, one transaction.

All quota changes of one flavour serialise on that flavour's row, so two approvals at
once can never together hand out more than the parent (or the cluster) has.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from scheduler_bridge.followups import queue_admission_cycle, queue_quota_sync
from scheduler_bridge.inventory.models import Flavour
from scheduler_bridge.quotas.models import Quota, QuotaRequest
from scheduler_bridge.quotas.rules import QuotaContext, largest_guarantee, quota_violations
from tenants import access
from tenants.audit import audit_record, snapshot
from tenants.errors import Conflict, PermissionDenied, ValidationFailed
from tenants.models import Role, Tenant


def can_set_quota(user: Any, tenant: Tenant) -> bool:
    """Guarantees are handed down the tree: the parent's admins set a child's quota;
    top-level quotas are the platform admins'."""
    if access.is_platform_admin(user):
        return True
    return tenant.parent is not None and access.has_role(user, tenant.parent, [Role.ADMIN])


def _sum(queryset: Any) -> int:
    return int(queryset.aggregate(total=Sum("guaranteed"))["total"] or 0)


def quota_context(tenant: Tenant, flavour: Flavour) -> QuotaContext:
    """The numbers around a (tenant, flavour) quota, read inside the caller's transaction."""
    parent = tenant.parent
    same_flavour = Quota.objects.filter(flavour=flavour)
    parent_quota = same_flavour.filter(tenant=parent).first() if parent else None
    return QuotaContext(
        tenant=tenant.slug,
        flavour=flavour.name,
        parent=parent.slug if parent else None,
        parent_guaranteed=parent_quota.guaranteed if parent_quota else 0,
        siblings_guaranteed=_sum(same_flavour.filter(tenant__parent=parent).exclude(tenant=tenant))
        if parent
        else 0,
        children_guaranteed=_sum(same_flavour.filter(tenant__parent=tenant)),
        capacity=flavour.capacity,
        other_top_level_guaranteed=_sum(
            same_flavour.filter(tenant__parent__isnull=True).exclude(tenant=tenant)
        ),
    )


def _raise_violations(violations: list[Any]) -> None:
    if violations:
        field_errors: dict[str, list[str]] = {}
        for violation in violations:
            field_errors.setdefault(violation.field, []).append(violation.message)
        raise ValidationFailed(violations[0].message, field_errors=field_errors)


def _check_amounts(guaranteed: Any, borrow_limit: Any, lend_limit: Any) -> None:
    for field, value in (
        ("guaranteed", guaranteed),
        ("borrow_limit", borrow_limit),
        ("lend_limit", lend_limit),
    ):
        if value is None and field != "guaranteed":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValidationFailed(
                f"{field} must be a whole number >= 0 (got {value!r}).", field=field
            )


def quota_set(
    *,
    actor: Any,
    tenant: Tenant,
    flavour: Flavour,
    guaranteed: int,
    borrow_limit: int | None = None,
    lend_limit: int | None = None,
    overcommit_allowed: bool | None = None,
    source: str = "api",
    message: str = "",
) -> Quota:
    """Create or change the quota of `tenant` on `flavour` (see ``quota_upsert``)."""
    quota, _ = quota_upsert(
        actor=actor,
        tenant=tenant,
        flavour=flavour,
        guaranteed=guaranteed,
        borrow_limit=borrow_limit,
        lend_limit=lend_limit,
        overcommit_allowed=overcommit_allowed,
        source=source,
        message=message,
    )
    return quota


def quota_upsert(
    *,
    actor: Any,
    tenant: Tenant,
    flavour: Flavour,
    guaranteed: int,
    borrow_limit: int | None = None,
    lend_limit: int | None = None,
    overcommit_allowed: bool | None = None,
    source: str = "api",
    message: str = "",
) -> tuple[Quota, bool]:
    """Create or change the quota of `tenant` on `flavour`, checking every quota rule;
    returns it and whether it was created. Syncs the cluster's ResourceQuotas and runs an
    admission cycle after commit.

    Raises PermissionDenied unless the actor administers the tenant's parent (platform
    admins for top-level tenants; only they may allow an overcommit), ValidationFailed
    with the numbers when a rule is broken.
    """
    if not can_set_quota(actor, tenant):
        raise PermissionDenied(
            f"Setting quotas of {tenant.slug} needs the admin role on "
            f"{tenant.parent.slug if tenant.parent else 'the platform'}."
        )
    if overcommit_allowed is not None and not access.is_platform_admin(actor):
        raise PermissionDenied("Only platform administrators may allow an overcommit.")
    _check_amounts(guaranteed, borrow_limit, lend_limit)
    with transaction.atomic():
        Flavour.objects.select_for_update().get(pk=flavour.pk)
        flavour.refresh_from_db()
        quota = Quota.objects.filter(tenant=tenant, flavour=flavour).first()
        before = snapshot(quota) if quota else None
        if quota is None:
            quota = Quota(tenant=tenant, flavour=flavour)
        allowed = quota.overcommit_allowed if overcommit_allowed is None else overcommit_allowed
        _raise_violations(
            quota_violations(
                quota_context(tenant, flavour),
                guaranteed=guaranteed,
                lend_limit=lend_limit,
                overcommit_allowed=allowed,
            )
        )
        quota.guaranteed = guaranteed
        quota.borrow_limit = borrow_limit
        quota.lend_limit = lend_limit
        quota.overcommit_allowed = allowed
        quota.save()
        audit_record(
            actor=actor,
            action="update" if before else "create",
            instance=quota,
            before=before,
            after=snapshot(quota),
            source=source,
            message=message,
        )
        queue_quota_sync(flavour.cluster_id)
        _queue_admission(flavour.cluster_id)
    return quota, before is None


def _queue_admission(cluster_id: int) -> None:
    """A changed quota may let waiting work in (or make borrowers reclaimable)."""
    queue_admission_cycle(cluster_id)


def quota_delete(*, actor: Any, quota: Quota, source: str = "api") -> None:
    """Remove a quota (its children must hold none of the flavour any more)."""
    if not can_set_quota(actor, quota.tenant):
        raise PermissionDenied(
            f"Removing quotas of {quota.tenant.slug} needs the parent's admin role."
        )
    with transaction.atomic():
        Flavour.objects.select_for_update().get(pk=quota.flavour_id)
        held = _sum(Quota.objects.filter(flavour=quota.flavour, tenant__parent=quota.tenant))
        if held:
            raise Conflict(
                f"{quota.tenant.slug}'s sub-tenants hold {held} {quota.flavour.name}; "
                "remove their quotas first."
            )
        audit_record(
            actor=actor,
            action="delete",
            instance=quota,
            before=snapshot(quota),
            after=None,
            source=source,
        )
        quota.delete()
    queue_quota_sync(quota.flavour.cluster_id)


def quota_request_create(
    *,
    actor: Any,
    tenant: Tenant,
    flavour: Flavour,
    guaranteed: int,
    justification: str,
    borrow_limit: int | None = None,
    lend_limit: int | None = None,
    source: str = "api",
) -> QuotaRequest:
    """A lead (or admin) of `tenant` asks for a quota change, with a justification."""
    if not access.has_role(actor, tenant, [Role.LEAD, Role.ADMIN]):
        raise PermissionDenied(f"Asking for quota of {tenant.slug} needs the lead or admin role.")
    if not justification.strip():
        raise ValidationFailed("Say why the team needs this change.", field="justification")
    if flavour.capacity == 0:
        raise ValidationFailed(
            f"Cluster {flavour.cluster.name} currently has no {flavour.name}; "
            f"ask for one of: {', '.join(_available_flavours(flavour))}.",
            field="flavour",
        )
    _check_amounts(guaranteed, borrow_limit, lend_limit)
    if lend_limit is not None and lend_limit > guaranteed:
        raise ValidationFailed(
            f"lend_limit {lend_limit} exceeds guaranteed {guaranteed}.", field="lend_limit"
        )
    # refused now, with what it could ask for, rather than pending for nothing (the
    # approval checks again, against the quotas of that moment)
    current = Quota.objects.filter(tenant=tenant, flavour=flavour).first()
    allowed = bool(current and current.overcommit_allowed)
    context = quota_context(tenant, flavour)
    violations = quota_violations(
        context, guaranteed=guaranteed, lend_limit=lend_limit, overcommit_allowed=allowed
    )
    if violations:
        largest = largest_guarantee(context, overcommit_allowed=allowed)
        hint = (
            f" The most {tenant.slug} can ask for now is {largest} {flavour.name}."
            if largest is not None and guaranteed > largest
            else ""
        )
        raise ValidationFailed(
            violations[0].message + hint,
            field_errors={v.field: [v.message + hint] for v in violations},
        )
    with transaction.atomic():
        request = QuotaRequest.objects.create(
            tenant=tenant,
            flavour=flavour,
            guaranteed=guaranteed,
            borrow_limit=borrow_limit,
            lend_limit=lend_limit,
            justification=justification.strip(),
            requested_by=actor,
        )
        audit_record(
            actor=actor,
            action="create",
            instance=request,
            before=None,
            after=snapshot(request),
            source=source,
        )
    return request


def _available_flavours(flavour: Flavour) -> list[str]:
    names = Flavour.objects.filter(cluster_id=flavour.cluster_id, capacity__gt=0)
    return list(names.values_list("name", flat=True)) or ["(none: sync the inventory first)"]


def _decide(
    actor: Any, request: QuotaRequest, state: str, comment: str, source: str
) -> QuotaRequest:
    locked = QuotaRequest.objects.select_for_update().get(pk=request.pk)
    if locked.state != QuotaRequest.State.PENDING:
        raise Conflict(
            f"Quota request {locked.pk} is already {locked.state}; it cannot be decided again."
        )
    before = snapshot(locked)
    locked.state = state
    locked.decided_by = actor
    locked.decision_comment = comment
    locked.decided_at = timezone.now()
    locked.save()
    audit_record(
        actor=actor,
        action="update",
        instance=locked,
        before=before,
        after=snapshot(locked),
        source=source,
        message=f"quota request {state}",
    )
    return locked


def quota_request_approve(
    *, actor: Any, request: QuotaRequest, comment: str = "", source: str = "api"
) -> QuotaRequest:
    """Approve and apply in one transaction: the quota rules are checked now, against the
    quotas of this moment; a request that no longer fits is refused (400), still pending.
    A borrow or lend limit the request left empty keeps the quota's current one."""
    if not can_set_quota(actor, request.tenant):
        raise PermissionDenied(
            f"Approving quota for {request.tenant.slug} needs the admin role on its parent."
        )
    with transaction.atomic():
        decided = _decide(actor, request, QuotaRequest.State.APPROVED, comment, source)
        current = Quota.objects.filter(tenant=decided.tenant, flavour=decided.flavour).first()
        kept_borrow = current.borrow_limit if current is not None else None
        kept_lend = current.lend_limit if current is not None else None
        quota_set(
            actor=actor,
            tenant=decided.tenant,
            flavour=decided.flavour,
            guaranteed=decided.guaranteed,
            borrow_limit=decided.borrow_limit if decided.borrow_limit is not None else kept_borrow,
            lend_limit=decided.lend_limit if decided.lend_limit is not None else kept_lend,
            source=source,
            message=f"approved quota request {decided.pk}",
        )
    return decided


def quota_request_reject(
    *, actor: Any, request: QuotaRequest, comment: str, source: str = "api"
) -> QuotaRequest:
    if not can_set_quota(actor, request.tenant):
        raise PermissionDenied(
            f"Rejecting quota for {request.tenant.slug} needs the admin role on its parent."
        )
    if not comment.strip():
        raise ValidationFailed("Tell the requester why: a comment is required.", field="comment")
    with transaction.atomic():
        return _decide(actor, request, QuotaRequest.State.REJECTED, comment.strip(), source)


def quota_request_cancel(*, actor: Any, request: QuotaRequest, source: str = "api") -> QuotaRequest:
    if request.requested_by_id != getattr(actor, "pk", None) and not can_set_quota(
        actor, request.tenant
    ):
        raise PermissionDenied("Only the requester or an approver may cancel a quota request.")
    with transaction.atomic():
        return _decide(actor, request, QuotaRequest.State.CANCELLED, "", source)
