"""What-if runs: who may run them, checking a request, creating a run (its task is queued
after commit), executing it with progress, and failing runs whose worker stopped.

A run replays the cluster's own history (scheduler_bridge.workloads.history_trace); the
replays themselves are ``billing.whatif.runs`` (pure). docs/what-if.md says what each
figure means and how the savings search is bounded.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from billing.charging import charges
from billing.models import WhatIfRun
from billing.whatif import runs
from billing.whatif.records import (
    HistoryWindow,
    Proposal,
    RunSettings,
    SavingsResult,
    WhatIfParams,
    WhatIfResult,
)
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.replay.policies import POLICIES, ReplayInputError, ReplayOptions
from scheduler_bridge.workloads.cycle import engine_config
from scheduler_bridge.workloads.history_trace import (
    HISTORY_SOURCES,
    RAN_STATES,
    HistoryTrace,
    history_trace,
)
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.snapshot import DEFAULT_HALF_LIFE_S
from tenants import access
from tenants.errors import ValidationFailed
from tenants.models import Tenant
from tenants.transactions import queue_after_commit

logger = logging.getLogger(__name__)

MAX_DAYS = 365
MAX_RECLAIM_WAIT_S = 86_400.0  # a proposed reclaim wait longer than a day is a typo
MAX_ATTEMPTS = 3  # a run whose worker died this often is failed, not started again
# No progress for longer than the task's hard time limit: no worker is running it.
STALLED_AFTER = timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT + 60)


def can_run_what_if(user: Any) -> bool:
    """What-if runs are for platform admins: they see every tenant's history."""
    return access.is_platform_admin(user)


def whatif_runs_visible_to(user: Any) -> QuerySet[WhatIfRun]:
    if not can_run_what_if(user):
        return WhatIfRun.objects.none()
    return WhatIfRun.objects.select_related("cluster", "requested_by")


def history_tenants(*, cluster: Cluster, days: int, now: datetime | None = None) -> list[str]:
    """Slugs of the tenants with finished work on ``cluster`` submitted in the last
    ``days`` (the tenants a replay of that history knows)."""
    until = now or timezone.now()
    since = until - timedelta(days=days)
    found = set(
        Workload.objects.filter(
            cluster=cluster,
            state__in=RAN_STATES,
            submitted_at__gte=since,
            submitted_at__lt=until,
            finished_at__isnull=False,
        ).values_list("tenant__slug", flat=True)
    )
    for source in HISTORY_SOURCES:  # history kept beyond the workload table (the demo's)
        found |= {recorded.job.tenant for recorded in source(cluster, since, until) or ()}
    return sorted(found)


def today_guarantees(*, cluster: Cluster, tenants: list[str]) -> dict[tuple[str, str], int]:
    """Today's guarantees of ``tenants`` on the cluster's flavours with capacity."""
    return {
        (slug, flavour): guaranteed
        for slug, flavour, guaranteed in Quota.objects.filter(
            flavour__cluster=cluster, flavour__capacity__gt=0, tenant__slug__in=tenants
        ).values_list("tenant__slug", "flavour__name", "guaranteed")
    }


def tenant_weights(tenants: list[str]) -> dict[str, float]:
    """Today's fair-share weights of ``tenants``."""
    return {
        slug: float(weight)
        for slug, weight in Tenant.objects.filter(slug__in=tenants).values_list("slug", "weight")
    }


def whatif_request_check(*, cluster: Cluster, kind: str, days: int, proposal: Proposal) -> None:
    """Raise ValidationFailed (field errors) when the request cannot run: days out of
    range, an unknown policy, no history, a tenant that ran no work in the window, a
    flavour the cluster lacks, negative numbers, or guarantees of a flavour adding up to
    more than its capacity (today's guarantees count where the proposal says nothing)."""
    if kind not in WhatIfRun.Kind.values:
        raise ValidationFailed(_("Choose whatif or savings."), field="kind")
    if not 1 <= days <= MAX_DAYS:
        raise ValidationFailed(
            _("Give a number of days from 1 to %(most)s."), params={"most": MAX_DAYS}, field="days"
        )
    if proposal.policy not in POLICIES:
        raise ValidationFailed(
            _("Unknown policy %(policy)s; use one of %(policies)s."),
            params={"policy": proposal.policy, "policies": ", ".join(POLICIES)},
            field="policy",
        )
    tenants = history_tenants(cluster=cluster, days=days)
    if not tenants:
        raise ValidationFailed(
            _(
                "Cluster %(cluster)s has no finished workloads submitted in the last %(days)s "
                "days, so there is no history to replay; choose more days."
            ),
            params={"cluster": cluster.name, "days": days},
            field="days",
        )
    errors: dict[str, list[Any]] = {}
    flavours = dict(
        Flavour.objects.filter(cluster=cluster, capacity__gt=0).values_list("name", "capacity")
    )
    known = ", ".join(tenants)
    for entry in proposal.quotas:
        if entry.tenant not in tenants:
            errors.setdefault("quotas", []).append(
                _(
                    "%(tenant)s ran no work on %(cluster)s in the last %(days)s days; the "
                    "history's tenants are %(known)s."
                )
                % {"tenant": entry.tenant, "cluster": cluster.name, "days": days, "known": known}
            )
        if entry.flavour not in flavours:
            errors.setdefault("quotas", []).append(
                _("%(flavour)s is not a flavour of %(cluster)s; its flavours are %(known)s.")
                % {
                    "flavour": entry.flavour,
                    "cluster": cluster.name,
                    "known": ", ".join(sorted(flavours)),
                }
            )
        if entry.guaranteed < 0:
            errors.setdefault("quotas", []).append(
                _("The guarantee of %(tenant)s on %(flavour)s must be 0 or more GPUs.")
                % {"tenant": entry.tenant, "flavour": entry.flavour}
            )
    for tenant, weight in proposal.weights.items():
        if tenant not in tenants:
            errors.setdefault("weights", []).append(
                _("%(tenant)s ran no work in this history; the history's tenants are %(known)s.")
                % {"tenant": tenant, "known": known}
            )
        elif not 0 < weight < 1e6:
            errors.setdefault("weights", []).append(
                _("The weight of %(tenant)s must be a number above 0, e.g. 1 or 2.")
                % {"tenant": tenant}
            )
    if proposal.reclaim_min_run_s is not None and proposal.reclaim_min_run_s < 0:
        errors.setdefault("reclaim_min_run_s", []).append(_("Give 0 or more seconds."))
    if (
        proposal.reclaim_wait_s is not None
        and not 0 <= proposal.reclaim_wait_s <= MAX_RECLAIM_WAIT_S
    ):
        errors.setdefault("reclaim_wait_s", []).append(
            _("Give 0 to %(most)s seconds (a day).") % {"most": int(MAX_RECLAIM_WAIT_S)}
        )
    if not errors:
        guaranteed = today_guarantees(cluster=cluster, tenants=tenants)
        guaranteed |= {(e.tenant, e.flavour): e.guaranteed for e in proposal.quotas}
        for flavour, capacity in sorted(flavours.items()):
            total = sum(g for (_t, f), g in guaranteed.items() if f == flavour)
            if total > capacity:
                errors.setdefault("quotas", []).append(
                    _(
                        "The guarantees of %(flavour)s add up to %(total)s GPUs, more than its "
                        "capacity of %(capacity)s; lower some."
                    )
                    % {"flavour": flavour, "total": total, "capacity": capacity}
                )
    if errors:
        first = next(iter(errors.values()))[0]
        raise ValidationFailed(first, field_errors=errors)


def whatif_run_create(
    *, actor: Any, cluster: Cluster, kind: str, days: int, proposal: Proposal
) -> WhatIfRun:
    """Check the request (ValidationFailed) and keep a queued run; its task is queued
    after commit (in eager settings it has run when this returns)."""
    whatif_request_check(cluster=cluster, kind=kind, days=days, proposal=proposal)
    with transaction.atomic():
        run = WhatIfRun.objects.create(
            kind=kind,
            cluster=cluster,
            params=WhatIfParams(days=days, proposal=proposal).as_json(),
            requested_by=actor if getattr(actor, "pk", None) else None,
        )
        queue_after_commit("billing.tasks.whatif_run", run.pk)
    run.refresh_from_db()
    return run


def whatif_run_repeat(*, actor: Any, run: WhatIfRun) -> WhatIfRun:
    """A new run of the same kind, cluster and params (checked again: today's history)."""
    params = run.params_record()
    return whatif_run_create(
        actor=actor, cluster=run.cluster, kind=run.kind, days=params.days, proposal=params.proposal
    )


def whatif_run_execute(*, run_id: int) -> WhatIfRun | None:
    """Run it: claim it (a queued run, or a running one whose worker died and whose task
    was delivered again: it starts over), replay, keep the result or the error. Returns
    None when there is nothing to do (done, failed or gone). Never raises for bad
    inputs: they become the run's error."""
    claimed = WhatIfRun.objects.filter(
        pk=run_id, status__in=(WhatIfRun.Status.QUEUED, WhatIfRun.Status.RUNNING)
    ).update(
        status=WhatIfRun.Status.RUNNING,
        attempts=F("attempts") + 1,
        progress=0,
        message="",
        started_at=timezone.now(),
        updated_at=timezone.now(),
    )
    if not claimed:
        return None
    run = WhatIfRun.objects.select_related("cluster").get(pk=run_id)
    if run.attempts > MAX_ATTEMPTS:
        whatif_run_fail(
            run_id=run.pk,
            attempt=run.attempts,
            error=f"The run stopped {MAX_ATTEMPTS} times without finishing (its worker died); "
            "try fewer days.",
        )
        return _reloaded(run)
    params = run.params_record()

    def progress(message: str, percent: int) -> None:
        WhatIfRun.objects.filter(
            pk=run.pk, status=WhatIfRun.Status.RUNNING, attempts=run.attempts
        ).update(
            progress=max(0, min(100, percent)), message=message[:200], updated_at=timezone.now()
        )

    try:
        trace = history_trace(cluster=run.cluster, days=params.days)
        if not trace.jobs:
            raise ReplayInputError(
                f"cluster {run.cluster.name} has no finished workloads submitted in the last "
                f"{params.days} days; choose more days"
            )
        if run.kind == WhatIfRun.Kind.SAVINGS:
            result: dict[str, Any] = _savings(trace, run.cluster, params, progress).as_json()
        else:
            result = _what_if(trace, params, progress).as_json()
    except ReplayInputError as error:
        whatif_run_fail(
            run_id=run.pk, attempt=run.attempts, error=f"The replay cannot run: {error}"
        )
        return _reloaded(run)
    except Exception as error:  # kept on the run for the admin; the task does not retry
        logger.exception("what-if run %s failed", run.pk)
        whatif_run_fail(run_id=run.pk, attempt=run.attempts, error=f"The replay failed: {error!r}")
        return _reloaded(run)
    WhatIfRun.objects.filter(
        pk=run.pk, status=WhatIfRun.Status.RUNNING, attempts=run.attempts
    ).update(
        status=WhatIfRun.Status.DONE,
        progress=100,
        message="done",
        result=result,
        finished_at=timezone.now(),
        updated_at=timezone.now(),
    )
    return _reloaded(run)


def whatif_run_fail(*, run_id: int, attempt: int | None, error: str) -> bool:
    """Mark a running (or queued) run failed with ``error``; ``attempt`` (when given) must
    still be the run's, so a stale worker never fails a newer attempt."""
    open_runs = WhatIfRun.objects.filter(
        pk=run_id, status__in=(WhatIfRun.Status.QUEUED, WhatIfRun.Status.RUNNING)
    )
    if attempt is not None:
        open_runs = open_runs.filter(attempts=attempt)
    now = timezone.now()
    return bool(
        open_runs.update(
            status=WhatIfRun.Status.FAILED, error=error, finished_at=now, updated_at=now
        )
    )


def whatif_runs_fail_stalled(*, now: datetime | None = None) -> int:
    """Fail running runs without progress for longer than the task's time limit: their
    worker is gone and no task will finish them (run them again)."""
    moment = now or timezone.now()
    return WhatIfRun.objects.filter(
        status=WhatIfRun.Status.RUNNING, updated_at__lt=moment - STALLED_AFTER
    ).update(
        status=WhatIfRun.Status.FAILED,
        error="The worker running it stopped and no other took it over; run it again.",
        finished_at=moment,
        updated_at=moment,
    )


def today_options() -> ReplayOptions:
    """The replay options of the queue as it runs today: its usage half-life and the
    engine's settings (the same EngineConfig the queue's cycles use)."""
    config = engine_config()
    return ReplayOptions(
        half_life_h=DEFAULT_HALF_LIFE_S / 3600,
        reclaim_min_run_s=float(config.reclaim_min_run_s),
        reclaim_wait_s=float(config.reclaim_wait_s),
        share_packing=config.share_packing,
        priority_preemption=config.priority_preemption,
    )


def _window(trace: HistoryTrace) -> HistoryWindow:
    return HistoryWindow(
        since=trace.since.isoformat(),
        until=trace.until.isoformat(),
        jobs=len(trace.jobs),
        tenants=len({job.tenant for job in trace.jobs}),
        capacity_gpus=trace.cluster.whole_gpus,
    )


def _what_if(trace: HistoryTrace, params: WhatIfParams, progress: runs.Progress) -> WhatIfResult:
    proposal = params.proposal
    options = today_options()
    proposed_options = options
    if proposal.reclaim_min_run_s is not None:
        proposed_options = replace(options, reclaim_min_run_s=proposal.reclaim_min_run_s)
    if proposal.reclaim_wait_s is not None:
        proposed_options = replace(proposed_options, reclaim_wait_s=proposal.reclaim_wait_s)
    proposed = runs.proposed_plan(trace.quotas, proposal)
    today_run, proposed_run = runs.what_if(
        trace.jobs,
        trace.cluster,
        trace.quotas,
        proposed,
        policy=proposal.policy,
        today_options=options,
        proposed_options=proposed_options,
        progress=progress,
    )
    return WhatIfResult(
        history=_window(trace),
        today=today_run.figures,
        proposed=proposed_run.figures,
        today_quotas=runs.quota_entries(trace.quotas),
        proposed_quotas=runs.quota_entries(proposed),
        today_settings=RunSettings.of(options),
        proposed_settings=RunSettings.of(proposed_options),
    )


def _savings(
    trace: HistoryTrace, cluster: Cluster, params: WhatIfParams, progress: runs.Progress
) -> SavingsResult:
    search = runs.savings_search(
        trace.jobs,
        trace.cluster,
        trace.quotas,
        policy=params.proposal.policy,
        options=today_options(),
        progress=progress,
    )
    products: tuple[Any, ...] = ()
    totals: dict[str, str] = {}
    if search.needed is not None:
        flavours = {
            f.name: f for f in charges.load_flavours().values() if f.cluster_id == cluster.pk
        }
        priced, sums = runs.price_extra(
            runs.extra_per_flavour(trace.cluster, search.needed),
            flavours,
            charges.load_cards(),
            timezone.now(),
        )
        products, totals = priced, {currency: str(amount) for currency, amount in sums.items()}
    return SavingsResult(
        history=_window(trace),
        policy=params.proposal.policy,
        target=search.target.figures,
        static_today=search.static_today.figures,
        capacity_gpus=search.capacity,
        max_capacity_gpus=search.maximum,
        step_gpus=search.step,
        needed_gpus=search.needed,
        extra_gpus=None if search.needed is None else search.needed - search.capacity,
        points=search.points,
        products=products,
        monthly_by_currency=totals,
    )


def _reloaded(run: WhatIfRun) -> WhatIfRun:
    run.refresh_from_db()
    return run
