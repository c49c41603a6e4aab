"""From the database to the engine's ClusterSnapshot (and back to numbers people read).

Engine ids are strings: tenants their slugs (unique, and readable in the reasons the
engine writes), workloads `str(workload.pk)`, flavours their names (unique per cluster). Free GPUs per node are the node's allocatable amount
minus what pods outside Tidegate's queue use there minus what admitted workloads hold.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from scheduler_bridge import admission as engine
from scheduler_bridge.admission.fairshare import LN2
from scheduler_bridge.gateways.base import is_gpu_resource
from scheduler_bridge.inventory.models import SHARE_UNITS_PER_GPU, Cluster, Flavour, Node
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.records import (
    parse_elastic_pods,
    parse_placements,
    without_placements,
)
from scheduler_bridge.workloads.runs import past_runs
from tenants.models import Tenant

DEFAULT_HALF_LIFE_S = 7 * 86_400.0


def epoch(moment: datetime | None) -> float:
    return moment.timestamp() if moment is not None else 0.0


def node_flavours(node: Node, flavours_by_key: dict[tuple[str, str], Flavour]) -> dict[str, int]:
    """Flavour name -> allocatable units of that flavour on `node`: GPUs or MIG devices;
    for a shared flavour, thousandths of its GPUs (the node's GPUs x 1000, whatever
    number of replicas or vGPUs the device plugin advertises for them). Devices published
    through DRA count too (the same GPUs offered both ways, once)."""
    found: dict[str, int] = {}
    for resource, amount in node.allocatable.items():
        if not is_gpu_resource(resource) or amount <= 0:
            continue
        flavour = flavours_by_key.get((node.product, resource))
        if flavour is None:
            continue
        if flavour.is_shared:
            found[flavour.name] = (node.gpu_count or int(amount)) * SHARE_UNITS_PER_GPU
        else:
            found[flavour.name] = found.get(flavour.name, 0) + int(amount)
    # what its drivers publish through DRA (devices; a shared one in thousandths)
    by_name = {f.name: f for f in flavours_by_key.values()} if node.dra_devices else {}
    for name, devices in node.dra_devices.items():
        flavour = by_name.get(name)
        if flavour is None or devices <= 0:
            continue
        units = devices * SHARE_UNITS_PER_GPU if flavour.is_shared else devices
        # the same GPUs offered both ways (device plugin and DRA) count once
        found[name] = max(found.get(name, 0), units)
    return found


def shared_busy(
    node: Node, shared: list[Flavour], capacity: dict[str, int], foreign: dict[str, int]
) -> dict[str, tuple[int, ...]]:
    """Thousandths of each GPU that pods outside Tidegate hold on `node`'s shared
    flavours. The device plugin reports them in its own units (replicas, vGPUs); they
    are counted as whole GPUs, the node's last ones, rounded up."""
    used: dict[str, tuple[int, ...]] = {}
    for flavour in shared:
        if not foreign.get(flavour.name) or flavour.name not in capacity:
            continue
        gpus = capacity[flavour.name] // SHARE_UNITS_PER_GPU
        advertised = max(1, int(node.allocatable.get(flavour.resource_name) or gpus))
        busy = min(gpus, -(-foreign[flavour.name] * gpus // advertised))
        used[flavour.name] = (0,) * (gpus - busy) + (SHARE_UNITS_PER_GPU,) * busy
    return used


def flavour_index(cluster: Cluster) -> dict[tuple[str, str], Flavour]:
    """(product, resource name) -> flavour; under the `single` MIG strategy several
    flavours share `nvidia.com/gpu`, and the node's product label then decides."""
    return {(f.product, f.resource_name): f for f in Flavour.objects.filter(cluster=cluster)}


def pod_sets_of(workload: Workload) -> tuple[engine.PodSet, ...]:
    return tuple(
        engine.PodSet(
            count=ps.count,
            gpus_per_pod=ps.gpus_per_pod,
            flavours=ps.flavours,
            name=ps.name,
            min_count=ps.min_count,
            per_flavour=ps.per_flavour,
        )
        for ps in workload.pod_set_records
    )


def pending_of(workload: Workload) -> engine.PendingWorkload:
    return engine.PendingWorkload(
        id=str(workload.pk),
        tenant_id=workload.tenant.slug,
        pod_sets=pod_sets_of(workload),
        priority=workload.priority,
        submitted_at=epoch(workload.submitted_at),
        gang=workload.gang,
        topology=engine.Topology(workload.topology),
        max_run_time_s=float(workload.max_run_time_s) if workload.max_run_time_s else None,
        preemptible=workload.preemptible,
        fills_idle=workload.fills_idle,
        held=tuple(
            engine.Placement(node=p.node, flavour=p.flavour, gpus=p.gpus, gpu=p.gpu)
            for p in parse_placements(workload.held_placements)
        ),
    )


def running_of(workload: Workload) -> engine.RunningWorkload:
    """The engine's view of admitted or running work: for elastic work its core (what
    it holds less its elastic pods, which elastic_running_parts adds)."""
    pods = workload.elastic_pod_records
    placements = without_placements(workload.placement_records, [p.placement for p in pods])
    request = pending_of(workload)
    return engine.RunningWorkload(
        id=str(workload.pk),
        tenant_id=workload.tenant.slug,
        placements=tuple(
            engine.Placement(node=p.node, flavour=p.flavour, gpus=p.gpus, gpu=p.gpu)
            for p in placements
        ),
        priority=workload.priority,
        admitted_at=epoch(workload.admitted_at),
        borrowed=workload.borrowed_gpus,
        preemptible=workload.preemptible,
        fills_idle=workload.fills_idle,
        max_run_time_s=float(workload.max_run_time_s) if workload.max_run_time_s else None,
        request=engine.core_of(request),
        # an announced preemption: its GPUs are being freed
        evicting=workload.preempt_at is not None,
    )


def elastic_running_parts(
    workload: Workload, core: engine.RunningWorkload
) -> tuple[tuple[engine.RunningWorkload, ...], tuple[engine.PendingWorkload, ...]]:
    """The elastic pods of running elastic work: those it runs, and one pending pod
    per pod it may still grow by (all on the flavour its core runs on)."""
    if workload.flavour is None:
        return (), ()
    request = pending_of(workload)
    flavours = {ps.name: workload.flavour.name for ps in request.pod_sets}
    pods = [
        engine.ElasticPod(
            pod.pod_set,
            pod.index,
            engine.Placement(node=pod.node, flavour=pod.flavour, gpus=pod.gpus),
            pod.started_at,
        )
        for pod in workload.elastic_pod_records
    ]
    return engine.elastic_parts(core, request, flavours, pods)


def decayed_usage(
    cluster: Cluster, now: datetime, half_life_s: float = DEFAULT_HALF_LIFE_S
) -> dict[str, float]:
    """Each tenant's GPU-equivalent hours on `cluster`, decayed with `half_life_s`.

    The exact integral of gpus x 2^(-(now - t) / half_life) over each run of each
    workload - runs that ended in preemption too; work that ended more than ten
    half-lives ago weighs under 0.1 % and is skipped.
    """
    horizon = now - timedelta(seconds=10 * half_life_s)
    rows = (
        Workload.objects.filter(cluster=cluster)
        .filter(Q(admitted_at__isnull=False) | Q(preemptions__gt=0))
        .exclude(finished_at__lt=horizon)
        .values(
            "tenant__slug",
            "admitted_at",
            "finished_at",
            "gpus",
            "flavour__gpu_equivalent",
            "past_runs",
            "elastic_pods",
        )
    )
    usage: dict[str, float] = defaultdict(float)

    def add(tenant: str, weight: float, admitted_at: datetime, ended_at: datetime | None) -> None:
        start = (now - admitted_at).total_seconds()
        end = max((now - (ended_at or now)).total_seconds(), 0.0)
        if start <= end:
            return
        seconds = (
            half_life_s
            / LN2
            * (math.pow(2, -end / half_life_s) - math.pow(2, -start / half_life_s))
        )
        usage[tenant] += weight * seconds / 3600.0

    for row in rows:
        tenant = row["tenant__slug"]
        for run in past_runs(row["past_runs"]):
            add(tenant, run.gpu_equivalent * run.gpus, run.admitted_at, run.ended_at)
        if row["admitted_at"] is not None:
            equivalent = float(row["flavour__gpu_equivalent"] or 1)
            core = row["gpus"]
            for pod in parse_elastic_pods(row["elastic_pods"]):  # each from its own start
                core -= pod.gpus
                started = datetime.fromtimestamp(pod.started_at, tz=row["admitted_at"].tzinfo)
                add(
                    tenant,
                    equivalent * pod.gpus,
                    max(started, row["admitted_at"]),
                    row["finished_at"],
                )
            add(tenant, equivalent * max(core, 0), row["admitted_at"], row["finished_at"])
    return dict(usage)


# Columns of an open workload the snapshot never reads (the largest are JSON)
SNAPSHOT_UNREAD = ("labels", "annotations", "reason", "reason_args", "job_events", "past_runs")


def build_snapshot(cluster: Cluster, now: datetime | None = None) -> engine.ClusterSnapshot:
    """Everything one admission cycle of `cluster` looks at, read in a few queries."""
    now = now or timezone.now()
    flavours = list(Flavour.objects.filter(cluster=cluster))
    by_key = {(f.product, f.resource_name): f for f in flavours}
    shared = [f for f in flavours if f.is_shared]
    units = {f.name: SHARE_UNITS_PER_GPU if f.is_shared else 1 for f in flavours}
    open_workloads = list(
        Workload.objects.filter(cluster=cluster, state__in=Workload.OPEN_STATES)
        .select_related("tenant", "flavour")
        # what the engine never looks at: not decoded for every open workload each cycle
        .defer(*SNAPSHOT_UNREAD)
        .order_by("pk")
    )
    running = [w for w in open_workloads if w.state in Workload.ACTIVE_STATES]
    held: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for workload in running:
        for placement in workload.placement_records:
            held[placement.node][placement.flavour] += placement.gpus
    nodes = []
    for node in Node.objects.filter(cluster=cluster, present=True, unschedulable=False).order_by(
        "name"
    ):
        capacity = node_flavours(node, by_key)
        if not capacity:
            continue
        foreign = _as_flavours(node, node.busy_foreign or {}, by_key)
        free = {
            name: max(0, total - foreign.get(name, 0) - held[node.name].get(name, 0))
            for name, total in capacity.items()
        }
        nodes.append(
            engine.Node(
                name=node.name,
                capacity=capacity,
                free=free,
                domain=node.topology_domain or None,
                device_used=shared_busy(node, shared, capacity, foreign),
            )
        )
    tenants = tuple(
        engine.Tenant(id=slug, parent_id=parent, weight=float(weight))
        for slug, parent, weight in Tenant.objects.order_by("path").values_list(
            "slug", "parent__slug", "weight"
        )
    )
    quotas = tuple(
        engine.Quota(
            tenant_id=q.tenant.slug,
            flavour=q.flavour.name,
            # quotas are in GPUs; a shared flavour's unit is a thousandth of one
            guaranteed=q.guaranteed * units[q.flavour.name],
            borrow_limit=None if q.borrow_limit is None else q.borrow_limit * units[q.flavour.name],
            lend_limit=None if q.lend_limit is None else q.lend_limit * units[q.flavour.name],
        )
        for q in Quota.objects.filter(flavour__cluster=cluster).select_related("flavour", "tenant")
    )
    running_parts: list[engine.RunningWorkload] = []
    pending_parts: list[engine.PendingWorkload] = []
    for workload in running:
        core = running_of(workload)
        running_parts.append(core)
        if workload.elastic:
            pods, growth = elastic_running_parts(workload, core)
            running_parts.extend(pods)
            pending_parts.extend(growth)
    pending_parts.extend(
        engine.core_of(pending_of(w)) for w in open_workloads if w.state == Workload.State.PENDING
    )
    return engine.ClusterSnapshot(
        now=now.timestamp(),
        tenants=tenants,
        flavours=tuple(
            engine.Flavour(f.name, f.unit_equivalent, shared=f.is_shared) for f in flavours
        ),
        quotas=quotas,
        nodes=tuple(nodes),
        running=tuple(running_parts),
        pending=tuple(pending_parts),
        usage_history=decayed_usage(cluster, now),
        usage_half_life_s=DEFAULT_HALF_LIFE_S,
    )


def _as_flavours(
    node: Node, by_resource: dict[str, Any], by_key: dict[tuple[str, str], Flavour]
) -> dict[str, int]:
    found: dict[str, int] = {}
    for resource, amount in by_resource.items():
        flavour = by_key.get((node.product, resource))
        if flavour is not None:
            found[flavour.name] = found.get(flavour.name, 0) + int(amount)
    return found
