"""A cluster's own history as a replay trace (``manage.py replay --format history`` and the
what-if page): the workloads that ran and finished in the last days, the cluster's
products as the inventory has them, and today's quotas.

A workload's run time is its last run (start to finish); a preempted run that started
again from scratch is not counted twice. The tenant tree is kept: the tenants that ran
work, every tenant above them and their quotas (guarantees, borrow and lend limits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.replay.cluster import Product, QuotaPlan, ReplayCluster
from scheduler_bridge.replay.trace import TraceJob
from scheduler_bridge.workloads.models import Workload
from tenants.models import Tenant

RAN_STATES = (Workload.State.FINISHED, Workload.State.FAILED, Workload.State.TIMED_OUT)


@dataclass(frozen=True)
class RecordedJob:
    """A job a cluster ran that the database keeps no workload of (a simulated cluster's
    seeded history): as TraceJob, plus when it first started."""

    job: TraceJob
    first_start: float


# Sources of recorded history beyond the workload table (the demo cluster's seeded month,
# registered by scheduler_bridge.demo.clock): (cluster, since, until) -> its jobs, or
# None for a cluster the source does not know.
HistorySource = Callable[[Cluster, datetime, datetime], list[RecordedJob] | None]
HISTORY_SOURCES: list[HistorySource] = []


def register_history_source(source: HistorySource) -> None:
    if source not in HISTORY_SOURCES:
        HISTORY_SOURCES.append(source)


@dataclass(frozen=True)
class HistoryTrace:
    jobs: list[TraceJob]
    cluster: ReplayCluster
    quotas: QuotaPlan  # today's quotas of the tenants that ran work and those above them
    since: datetime
    until: datetime
    # what the database recorded: job id -> seconds from submit to first start
    recorded_waits: dict[str, float]


def history_trace(*, cluster: Cluster, days: int = 30, now: datetime | None = None) -> HistoryTrace:
    """The finished workloads of ``cluster`` submitted in the last ``days``."""
    until = now or timezone.now()
    since = until - timedelta(days=days)
    flavours = {
        f.pk: f for f in Flavour.objects.filter(cluster=cluster, capacity__gt=0).order_by("name")
    }
    products = tuple(
        Product(f.name, f.capacity, _gpus_per_node(cluster, f), float(f.gpu_equivalent))
        for f in flavours.values()
    )
    rows = (
        Workload.objects.filter(
            cluster=cluster,
            state__in=RAN_STATES,
            submitted_at__gte=since,
            submitted_at__lt=until,
            finished_at__isnull=False,
            flavour_id__in=list(flavours),
        )
        .filter(Q(started_at__isnull=False) | Q(admitted_at__isnull=False))
        .select_related("tenant")
        .order_by("submitted_at", "pk")
    )
    jobs: list[TraceJob] = []
    waits: dict[str, float] = {}
    for workload in rows:
        began = workload.started_at or workload.admitted_at
        assert began is not None and workload.finished_at is not None
        run_time = (workload.finished_at - began).total_seconds()
        if run_time <= 0 or workload.gpus <= 0:
            continue
        job_id = f"w{workload.pk}"
        first = workload.admitted_at or began
        waits[job_id] = (first - workload.submitted_at).total_seconds()
        jobs.append(
            TraceJob(
                id=job_id,
                tenant=workload.tenant.slug,
                submitted_at=workload.submitted_at.timestamp(),
                run_time_s=run_time,
                gpus=workload.gpus,
                flavor=flavours[workload.flavour_id].name if workload.flavour_id else None,
                priority=workload.priority,
                checkpoint_s=workload.checkpoint_interval_s or None,
            )
        )
    for source in HISTORY_SOURCES:
        for recorded in source(cluster, since, until) or ():
            jobs.append(recorded.job)
            waits[recorded.job.id] = recorded.first_start - recorded.job.submitted_at
    jobs.sort(key=lambda job: (job.submitted_at, job.id))
    parents: dict[str, str | None] = {}
    pending = {job.tenant for job in jobs}
    while pending:
        found = Tenant.objects.filter(slug__in=pending).select_related("parent")
        pending = set()
        for tenant in found:
            parent = tenant.parent.slug if tenant.parent else None
            parents[tenant.slug] = parent
            if parent is not None and parent not in parents:
                pending.add(parent)
    guaranteed: dict[tuple[str, str], int] = {}
    borrow: dict[tuple[str, str], int] = {}
    lend: dict[tuple[str, str], int] = {}
    weights: dict[str, float] = {}
    for quota in Quota.objects.filter(
        flavour_id__in=list(flavours), tenant__slug__in=list(parents)
    ).select_related("tenant", "flavour"):
        key = (quota.tenant.slug, quota.flavour.name)
        guaranteed[key] = quota.guaranteed
        if quota.borrow_limit is not None:
            borrow[key] = quota.borrow_limit
        if quota.lend_limit is not None:
            lend[key] = quota.lend_limit
    for slug, weight in Tenant.objects.filter(slug__in=list(parents)).values_list("slug", "weight"):
        weights[slug] = float(weight)
    plan = QuotaPlan(guaranteed, weights, parents, borrow, lend)
    return HistoryTrace(
        jobs=jobs,
        cluster=ReplayCluster(products),
        quotas=plan,
        since=since,
        until=until,
        recorded_waits=waits,
    )


def _gpus_per_node(cluster: Cluster, flavour: Flavour) -> int:
    """The most devices of ``flavour`` one of its nodes offers (8 when no node says)."""
    most = 0
    selector = flavour.node_selector or {}
    for labels, allocatable in Node.objects.filter(cluster=cluster, present=True).values_list(
        "labels", "allocatable"
    ):
        if any((labels or {}).get(key) != value for key, value in selector.items()):
            continue
        try:
            most = max(most, int(allocatable.get(flavour.resource_name, 0)))
        except (TypeError, ValueError):
            continue
    return most or 8
