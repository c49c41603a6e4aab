"""A spent hard budget that suspends running work (``Budget.on_exhausted == "suspend"``).

Budget evaluation calls :func:`budget_suspend_preemptible` when such a budget is spent. The
subtree's running work that may be preempted goes through the workload life cycle as any
preemption does (``lifecycle.announce_preemption`` when it asked for a grace to save a
checkpoint, else ``lifecycle.preempt``): it goes back to the queue, the reconciler
suspends its Job, and the budget gate keeps it there until money is back. Work that may
not be preempted runs on.

Per cluster, the work is found and changed under the cluster's admission lock (as a cycle
does), so two evaluations at once suspend it once: the second finds it already pending
(or announced) and does nothing, and only the one that suspended sends the notice.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from billing.models import Budget
from i18n.wording import Wording, gettext_noop, ngettext, wording
from scheduler_bridge.followups import queue_admission_cycle, queue_quota_sync
from scheduler_bridge.workloads import lifecycle
from scheduler_bridge.workloads.locks import hold_admission_lock
from scheduler_bridge.workloads.models import Workload
from tenants.audit import audit_record, audit_save_many
from tenants.transactions import queue_after_commit


@dataclass(frozen=True)
class Spent:
    """A budget as evaluated: what its period has spent of what it allows."""

    period_name: str
    spent: Decimal
    amount: Decimal
    currency: str


def suspension_reason(budget: Budget, spent: Spent) -> Wording:
    """What each suspended workload says (inside "preempted: ...")."""
    return wording(
        gettext_noop(
            "the %(tenant)s budget for %(period)s is spent (%(spent)s of %(amount)s "
            "%(currency)s) and suspends preemptible work"
        ),
        tenant=budget.tenant.slug,
        period=spent.period_name,
        spent=str(spent.spent),
        amount=str(spent.amount),
        currency=spent.currency,
    )


def _suspendable(budget: Budget) -> QuerySet[Workload]:
    """Running (or admitted) work of the budget's subtree that may be preempted and was not
    told yet."""
    return (
        Workload.objects.filter(
            tenant__path__startswith=budget.tenant.path,
            state__in=Workload.ACTIVE_STATES,
            preemptible=True,
            preempt_at__isnull=True,
        )
        .filter(Q(priority_class__isnull=True) | Q(priority_class__preemptible=True))
        .order_by("pk")
    )


def budget_suspend_preemptible(*, budget: Budget, spent: Spent) -> list[int]:
    """Suspend the preemptible running work of ``budget``'s subtree, cluster by cluster
    (each in one transaction under its admission lock), leave one audit record for the
    budget and queue one notice to the leads. Returns the ids of the workloads this call
    suspended or told to stop after their grace (none when another call did it first)."""
    reason = suspension_reason(budget, spent)
    clusters = sorted(set(_suspendable(budget).values_list("cluster_id", flat=True)))
    suspended: list[int] = []
    for cluster_id in clusters:
        suspended += _suspend_on(cluster_id, budget, reason)
    if not suspended:
        return []
    with transaction.atomic():
        audit_record(
            actor=None,
            action="action",
            instance=budget,
            before=None,
            after={
                "on_exhausted": budget.on_exhausted,
                "period": spent.period_name,
                "spent": str(spent.spent),
                "amount": str(spent.amount),
                "suspended": suspended,
            },
            source="system",
            message=ngettext(
                "%(tenant)s budget for %(period)s spent (%(spent)s of %(amount)s %(currency)s):"
                " %(count)s running workload suspended",
                "%(tenant)s budget for %(period)s spent (%(spent)s of %(amount)s %(currency)s):"
                " %(count)s running workloads suspended",
                len(suspended),
                tenant=budget.tenant.slug,
                period=spent.period_name,
                spent=str(spent.spent),
                amount=str(spent.amount),
                currency=spent.currency,
            ),
        )
        queue_after_commit(
            "billing.tasks.budget_suspension_notify",
            budget.pk,
            spent.period_name,
            str(spent.spent),
            str(spent.amount),
            tuple(suspended),
        )
    return suspended


def _suspend_on(cluster_id: int, budget: Budget, reason: Wording) -> list[int]:
    with transaction.atomic():
        hold_admission_lock(cluster_id)
        # Read after the lock: a concurrent evaluation's suspensions are committed by now.
        victims = list(
            _suspendable(budget)
            .filter(cluster_id=cluster_id)
            .select_for_update(of=("self",))
            .select_related("flavour", "priority_class", "tenant")
        )
        if not victims:
            return []
        now = timezone.now()
        events = []
        borrowed = False
        for workload in victims:
            borrowed = borrowed or bool(workload.borrowed)
            grace = lifecycle.grace_of(workload)
            if workload.state == Workload.State.RUNNING and grace > 0:
                event = lifecycle.announce_preemption(
                    workload, now=now, by="budget", message=reason, grace_s=grace
                )
            else:
                event = lifecycle.preempt(workload, now=now, by="budget", message=reason)
            events.append(event)
            workload.save()
        audit_save_many(events)
        queue_admission_cycle(cluster_id)  # decides, then reconciles: the Jobs are suspended
        if borrowed:
            queue_quota_sync(cluster_id)
    return [w.pk for w in victims]
