"""Writes to quotas and quota requests: role checks, the quota rules, audit, one transaction.

All quota changes of one flavour serialise on that flavour's row, so two approvals at
once can never together hand out more than the parent (or the cluster) has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from i18n.wording import gettext_noop, wording
from scheduler_bridge.followups import queue_admission_cycle, queue_quota_sync
from scheduler_bridge.inventory.models import Flavour
from scheduler_bridge.quotas.models import Quota, QuotaRequest
from scheduler_bridge.quotas.rules import (
    QuotaContext,
    QuotaViolation,
    largest_guarantee,
    quota_violations,
)
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
        capacity=flavour.guarantee_ceiling,
        other_top_level_guaranteed=_sum(
            same_flavour.filter(tenant__parent__isnull=True).exclude(tenant=tenant)
        ),
    )


def violation_message(violation: QuotaViolation, context: QuotaContext, guaranteed: int) -> str:
    """A broken quota rule in the reader's language, with the numbers that explain it."""
    c = context
    if violation.code == "lend_above_guarantee":
        return _(
            "The lend limit exceeds guaranteed %(guaranteed)s: a tenant can lend only its "
            "own guarantee."
        ) % {"guaranteed": guaranteed}
    if violation.code == "parent_room":
        return _(
            "%(tenant)s asks %(asked)s %(flavour)s, parent %(parent)s has %(room)s unassigned "
            "(guaranteed %(parent_guaranteed)s, %(siblings)s given to other sub-tenants)."
        ) % {
            "tenant": c.tenant,
            "asked": guaranteed,
            "flavour": c.flavour,
            "parent": c.parent,
            "room": max(c.parent_guaranteed - c.siblings_guaranteed, 0),
            "parent_guaranteed": c.parent_guaranteed,
            "siblings": c.siblings_guaranteed,
        }
    if violation.code == "below_children":
        return _(
            "%(tenant)s's sub-tenants already hold %(held)s %(flavour)s; its guarantee cannot "
            "go below that (asked %(asked)s). Lower theirs first."
        ) % {
            "tenant": c.tenant,
            "held": c.children_guaranteed,
            "flavour": c.flavour,
            "asked": guaranteed,
        }
    if violation.code == "above_capacity":
        return _(
            "top-level guarantees would total %(total)s %(flavour)s but the cluster has "
            "%(capacity)s; lower them, or have a platform admin allow an explicit overcommit "
            "on this quota."
        ) % {
            "total": c.other_top_level_guaranteed + guaranteed,
            "flavour": c.flavour,
            "capacity": c.capacity,
        }
    return violation.message


def _raise_violations(
    violations: list[QuotaViolation], context: QuotaContext, guaranteed: int, hint: str = ""
) -> None:
    if violations:
        field_errors: dict[str, list[str]] = {}
        for violation in violations:
            message = violation_message(violation, context, guaranteed) + hint
            field_errors.setdefault(violation.field, []).append(message)
        first = violations[0]
        raise ValidationFailed(field_errors[first.field][0], field_errors=field_errors)


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
                _("%(field)s must be a whole number >= 0 (got %(value)s).")
                % {"field": field, "value": repr(value)},
                field=field,
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
        if tenant.parent is not None:
            message = _("Setting quotas of %(tenant)s needs the admin role on %(parent)s.") % {
                "tenant": tenant.slug,
                "parent": tenant.parent.slug,
            }
        else:
            message = _("Setting quotas of %(tenant)s needs the admin role on the platform.") % {
                "tenant": tenant.slug
            }
        raise PermissionDenied(message)
    if overcommit_allowed is not None and not access.is_platform_admin(actor):
        raise PermissionDenied(_("Only platform administrators may allow an overcommit."))
    _check_amounts(guaranteed, borrow_limit, lend_limit)
    with transaction.atomic():
        Flavour.objects.select_for_update().get(pk=flavour.pk)
        flavour.refresh_from_db()
        quota = Quota.objects.filter(tenant=tenant, flavour=flavour).first()
        before = snapshot(quota) if quota else None
        if quota is None:
            quota = Quota(tenant=tenant, flavour=flavour)
        allowed = quota.overcommit_allowed if overcommit_allowed is None else overcommit_allowed
        context = quota_context(tenant, flavour)
        _raise_violations(
            quota_violations(
                context, guaranteed=guaranteed, lend_limit=lend_limit, overcommit_allowed=allowed
            ),
            context,
            guaranteed,
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
            _("Removing quotas of %(tenant)s needs the parent's admin role.")
            % {"tenant": quota.tenant.slug}
        )
    with transaction.atomic():
        Flavour.objects.select_for_update().get(pk=quota.flavour_id)
        held = _sum(Quota.objects.filter(flavour=quota.flavour, tenant__parent=quota.tenant))
        if held:
            raise Conflict(
                _("%(tenant)s's sub-tenants hold %(held)s %(flavour)s; remove their quotas first.")
                % {"tenant": quota.tenant.slug, "held": held, "flavour": quota.flavour.name}
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


@dataclass(frozen=True)
class QuotaSeen:
    """A quota's numbers as a form showed them (all None: there was no quota yet)."""

    guaranteed: int | None
    borrow_limit: int | None
    lend_limit: int | None

    @classmethod
    def of(cls, quota: Quota | None) -> QuotaSeen:
        if quota is None:
            return cls(None, None, None)
        return cls(quota.guaranteed, quota.borrow_limit, quota.lend_limit)

    def describe(self) -> str:
        """'guaranteed 6, borrow limit 16, lend limit all unused', in the reader's language."""
        if self.guaranteed is None:
            return _("no quota yet")
        return _("guaranteed %(guaranteed)s, borrow limit %(borrow)s, lend limit %(lend)s") % {
            "guaranteed": self.guaranteed,
            "borrow": _("cohort") if self.borrow_limit is None else self.borrow_limit,
            "lend": _("all unused") if self.lend_limit is None else self.lend_limit,
        }


class QuotaChangedMeanwhile(Conflict):
    """The quota changed after the form asking to change it was shown."""

    def __init__(self, message: str, *, current: QuotaSeen) -> None:
        super().__init__(message)
        self.current = current


class AlreadyRequested(Conflict):
    """The same change is already waiting for a decision (a form sent twice)."""

    def __init__(self, message: str, *, existing: QuotaRequest) -> None:
        super().__init__(message)
        self.existing = existing


def quota_request_create(
    *,
    actor: Any,
    tenant: Tenant,
    flavour: Flavour,
    guaranteed: int | None,
    justification: str,
    borrow_limit: int | None = None,
    lend_limit: int | None = None,
    seen: QuotaSeen | None = None,
    source: str = "api",
) -> QuotaRequest:
    """A lead (or admin) of `tenant` asks for a quota change, with a justification.

    A blank (None) guarantee keeps the current one; blank borrow and lend limits are kept
    by the approval. With `seen` (the numbers a form showed), a quota that changed since
    is refused (QuotaChangedMeanwhile, with the current numbers). The same change asked
    again by the same person while the first waits is refused (AlreadyRequested): requests
    of one flavour serialise on its row, so two identical submits at once make one request.
    Raises PermissionDenied without the lead or admin role, ValidationFailed with the
    largest possible ask when the parent (or the cluster) cannot give it.
    """
    if not access.has_role(actor, tenant, [Role.LEAD, Role.ADMIN]):
        raise PermissionDenied(
            _("Asking for quota of %(tenant)s needs the lead or admin role.")
            % {"tenant": tenant.slug}
        )
    if not justification.strip():
        raise ValidationFailed(_("Say why the team needs this change."), field="justification")
    if flavour.guarantee_ceiling == 0:
        raise ValidationFailed(
            _("Cluster %(cluster)s currently has no %(flavour)s; ask for one of: %(available)s.")
            % {
                "cluster": flavour.cluster.name,
                "flavour": flavour.name,
                "available": ", ".join(_available_flavours(flavour)),
            },
            field="flavour",
        )
    _check_amounts(0 if guaranteed is None else guaranteed, borrow_limit, lend_limit)
    with transaction.atomic():
        Flavour.objects.select_for_update().get(pk=flavour.pk)
        current = Quota.objects.filter(tenant=tenant, flavour=flavour).first()
        now = QuotaSeen.of(current)
        if seen is not None and seen != now:
            raise QuotaChangedMeanwhile(
                _(
                    "The quota of %(tenant)s on %(flavour)s changed while the form was open; "
                    "it is now: %(current)s. Check the numbers and send again."
                )
                % {"tenant": tenant.slug, "flavour": flavour.name, "current": now.describe()},
                current=now,
            )
        if guaranteed is None:
            if current is None:
                raise ValidationFailed(
                    _("%(tenant)s has no quota of %(flavour)s yet: say how many GPUs to guarantee.")
                    % {"tenant": tenant.slug, "flavour": flavour.name},
                    field="guaranteed",
                )
            guaranteed = current.guaranteed
        _refuse_unchanged(current, guaranteed, borrow_limit, lend_limit)
        _refuse_what_cannot_fit(tenant, flavour, current, guaranteed, borrow_limit, lend_limit)
        pending = QuotaRequest.objects.filter(
            tenant=tenant,
            flavour=flavour,
            requested_by=actor,
            state=QuotaRequest.State.PENDING,
            guaranteed=guaranteed,
            borrow_limit=borrow_limit,
            lend_limit=lend_limit,
        ).first()
        if pending is not None:
            raise AlreadyRequested(
                _("This request was already sent (request %(id)s); it waits for a decision.")
                % {"id": pending.pk},
                existing=pending,
            )
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


def _refuse_unchanged(
    current: Quota | None, guaranteed: int, borrow_limit: int | None, lend_limit: int | None
) -> None:
    if (
        current is not None
        and guaranteed == current.guaranteed
        and borrow_limit in (None, current.borrow_limit)
        and lend_limit in (None, current.lend_limit)
    ):
        raise ValidationFailed(
            _("These are the current numbers: change at least one of them."), field="guaranteed"
        )


def _refuse_what_cannot_fit(
    tenant: Tenant,
    flavour: Flavour,
    current: Quota | None,
    guaranteed: int,
    borrow_limit: int | None,
    lend_limit: int | None,
) -> None:
    """Refused now, with what it could ask for, rather than pending for nothing (the
    approval checks again, against the quotas of that moment)."""
    kept_lend = lend_limit if lend_limit is not None else (current.lend_limit if current else None)
    if kept_lend is not None and kept_lend > guaranteed:
        raise ValidationFailed(
            _(
                "The lend limit %(lend)s exceeds guaranteed %(guaranteed)s: a tenant can lend "
                "only its own guarantee."
            )
            % {"lend": kept_lend, "guaranteed": guaranteed},
            field="lend_limit",
        )
    allowed = bool(current and current.overcommit_allowed)
    context = quota_context(tenant, flavour)
    violations = quota_violations(
        context, guaranteed=guaranteed, lend_limit=lend_limit, overcommit_allowed=allowed
    )
    largest = largest_guarantee(context, overcommit_allowed=allowed)
    hint = ""
    if largest is not None and guaranteed > largest:
        hint = " " + _("The most %(tenant)s can ask for now is %(largest)s %(flavour)s.") % {
            "tenant": tenant.slug,
            "largest": largest,
            "flavour": flavour.name,
        }
    _raise_violations(violations, context, guaranteed, hint)


def largest_ask(tenant: Tenant, flavour: Flavour) -> int | None:
    """The largest guarantee `tenant` could ask for on `flavour` now (None: no ceiling)."""
    current = Quota.objects.filter(tenant=tenant, flavour=flavour).first()
    return largest_guarantee(
        quota_context(tenant, flavour),
        overcommit_allowed=bool(current and current.overcommit_allowed),
    )


def _available_flavours(flavour: Flavour) -> list[str]:
    names = Flavour.objects.filter(cluster_id=flavour.cluster_id).offered()
    return list(names.values_list("name", flat=True)) or [_("(none: sync the inventory first)")]


# the state a decision leaves a request in, worded for the audit trail
DECIDED = {
    QuotaRequest.State.APPROVED.value: wording(gettext_noop("approved")),
    QuotaRequest.State.REJECTED.value: wording(gettext_noop("rejected")),
    QuotaRequest.State.CANCELLED.value: wording(gettext_noop("cancelled")),
}


def _decide(
    actor: Any, request: QuotaRequest, state: str, comment: str, source: str
) -> QuotaRequest:
    locked = QuotaRequest.objects.select_for_update().get(pk=request.pk)
    if locked.state != QuotaRequest.State.PENDING:
        raise Conflict(
            _("Quota request %(id)s is already %(state)s; it cannot be decided again.")
            % {"id": locked.pk, "state": locked.get_state_display().lower()}
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
        message=wording(gettext_noop("quota request %(state)s"), state=DECIDED[state]),
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
            _("Approving quota for %(tenant)s needs the admin role on its parent.")
            % {"tenant": request.tenant.slug}
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
            message=wording(gettext_noop("approved quota request %(id)s"), id=decided.pk),
        )
    return decided


def quota_request_reject(
    *, actor: Any, request: QuotaRequest, comment: str, source: str = "api"
) -> QuotaRequest:
    if not can_set_quota(actor, request.tenant):
        raise PermissionDenied(
            _("Rejecting quota for %(tenant)s needs the admin role on its parent.")
            % {"tenant": request.tenant.slug}
        )
    if not comment.strip():
        raise ValidationFailed(_("Tell the requester why: a comment is required."), field="comment")
    with transaction.atomic():
        return _decide(actor, request, QuotaRequest.State.REJECTED, comment.strip(), source)


def quota_request_cancel(*, actor: Any, request: QuotaRequest, source: str = "api") -> QuotaRequest:
    if request.requested_by_id != getattr(actor, "pk", None) and not can_set_quota(
        actor, request.tenant
    ):
        raise PermissionDenied(_("Only the requester or an approver may cancel a quota request."))
    with transaction.atomic():
        return _decide(actor, request, QuotaRequest.State.CANCELLED, "", source)


@dataclass(frozen=True)
class QuotaOffer:
    """What the reader of a workload that cannot run may do about its tenant's quota.

    ``ask`` is the guarantee the reader can ask for now (the workload's need, or less
    when the parent cannot give that much; None when nothing more can be asked or the
    reader may not ask); ``short`` what the workload still lacks beyond it; ``approvers``
    the admins above the tenant who can raise the parent's quota; ``askers`` the leads
    and admins of the tenant, named to a reader who may not ask."""

    flavour: Flavour
    need: int
    may_ask: bool
    ask: int | None
    short: int
    parent: Tenant | None
    approvers: list[str]
    askers: list[str]

    @property
    def approver_names(self) -> str:
        return ", ".join(self.approvers) or "—"

    @property
    def asker_names(self) -> str:
        return ", ".join(self.askers) or "—"


def quota_offer(user: Any, tenant: Tenant, flavour: Flavour, need: int) -> QuotaOffer:
    """The quota request ``user`` can make for ``tenant`` so that work needing ``need``
    GPUs of ``flavour`` runs (see QuotaOffer)."""
    may_ask = access.has_role(user, tenant, [Role.LEAD, Role.ADMIN])
    current = Quota.objects.filter(tenant=tenant, flavour=flavour).first()
    now = current.guaranteed if current else 0
    largest = largest_ask(tenant, flavour)
    reachable = need if largest is None else min(need, largest)
    ask = reachable if may_ask and reachable > now else None
    chain = [int(pk) for pk in tenant.path.strip("/").split("/") if pk]
    parent = Tenant.objects.filter(pk=chain[-2]).first() if len(chain) > 1 else None
    return QuotaOffer(
        flavour=flavour,
        need=need,
        may_ask=may_ask,
        ask=ask,
        short=max(0, need - max(reachable, now)),
        parent=parent,
        approvers=_names_with_role(chain[:-1], [Role.ADMIN]),
        askers=_names_with_role(chain, [Role.LEAD, Role.ADMIN]),
    )


def _names_with_role(tenant_ids: list[int], roles: list[str]) -> list[str]:
    """Who holds one of ``roles`` on one of ``tenant_ids`` (a role covers the subtree),
    by full name where one is set."""
    from tenants.models import Membership

    users = {
        m.user.get_full_name() or m.user.get_username()
        for m in Membership.objects.filter(tenant_id__in=tenant_ids, role__in=roles)
        .select_related("user")
        .order_by("user__username")
    }
    return sorted(users)
