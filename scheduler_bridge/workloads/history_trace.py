"""A cluster's own history as a replay trace (``manage.py replay --format history`` and the
what-if page): the workloads that ran and finished in the last days, the cluster's
products as the inventory has them, and today's quotas.

A workload's run time is its last run (start to finish); a preempted run that started
again from scratch is not counted twice. Tenants are replayed flat, each beside the others
under the cluster (departments lend through their teams' guarantees).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.replay.cluster import Product, QuotaPlan, ReplayCluster
from scheduler_bridge.replay.trace import TraceJob
from scheduler_bridge.workloads.models import Workload

RAN_STATES = (Workload.State.FINISHED, Workload.State.FAILED, Workload.State.TIMED_OUT)


@dataclass(frozen=True)
class HistoryTrace:
    jobs: list[TraceJob]
    cluster: ReplayCluster
    quotas: QuotaPlan  # today's guarantees of the tenants that ran work, and their weights
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
    tenants = {job.tenant for job in jobs}
    guaranteed: dict[tuple[str, str], int] = {}
    weights: dict[str, float] = {}
    for quota in Quota.objects.filter(
        flavour_id__in=list(flavours), tenant__slug__in=tenants
    ).select_related("tenant", "flavour"):
        guaranteed[(quota.tenant.slug, quota.flavour.name)] = quota.guaranteed
        weights[quota.tenant.slug] = float(quota.tenant.weight)
    return HistoryTrace(
        jobs=jobs,
        cluster=ReplayCluster(products),
        quotas=QuotaPlan(guaranteed, weights),
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
