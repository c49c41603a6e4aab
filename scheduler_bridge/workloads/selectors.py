"""Reads about queue-admitted work that other parts of the bridge need."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import QuerySet

from scheduler_bridge.dra.demand import device_class_quota_key
from scheduler_bridge.inventory.models import SHARE_UNITS_PER_GPU, Cluster, Flavour, Node
from scheduler_bridge.inventory.queue_holdings import AdmittedJob, QueueHoldings
from scheduler_bridge.inventory.sharing import as_device_units
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.records import parse_elastic_pods, parse_placements
from tenants import access


def admitted_jobs(cluster: Cluster) -> set[tuple[str, str]]:
    """(namespace, object name) of every workload object the queue admitted on
    ``cluster``: the inventory sync tells their pods from others by it."""
    rows = Workload.objects.filter(
        cluster=cluster, source=Workload.Source.JOB, state__in=Workload.ACTIVE_STATES
    ).values_list("namespace", "job_name")
    return set(rows)


def queue_holdings(cluster: Cluster) -> QueueHoldings:
    """What the queue admitted and lends on ``cluster``, as its ResourceQuotas count it
    (the quota sync's input)."""
    admitted = Workload.objects.filter(
        cluster=cluster, source=Workload.Source.JOB, state__in=Workload.ACTIVE_STATES
    ).select_related("flavour")
    jobs = []
    for workload in admitted:
        claimed: dict[str, int] = defaultdict(int)
        through_claims = _claimed_by_pods(workload, claimed) if workload.flavour else 0
        jobs.append(
            AdmittedJob(
                namespace=workload.namespace,
                job_name=workload.job_name,
                resource=workload.flavour.resource_name if workload.flavour else None,
                gpus_as_resource=workload.gpus - through_claims,
                claimed=dict(claimed),
            )
        )
    return QueueHoldings(admitted=tuple(jobs), lent=borrowed_by_tenant(cluster))


def _claimed_by_pods(workload: Workload, claimed: dict[str, int]) -> int:
    """Add to ``claimed`` what Kubernetes will charge the claims of the admitted
    ``workload``'s pods, per device-class key; return the GPUs its pods hold through
    claims (not under its extended resource). Most work asks for none: its stored pod
    sets are then not read."""
    if not any("claim_devices" in ps or "shared_claim" in ps for ps in workload.pod_sets):
        return 0
    through_claims = 0
    pods = workload.pod_counts()
    admitted_on = workload.flavour.name if workload.flavour else None
    for pod_set in workload.pod_set_records:
        if not pod_set.asks_through_claims:
            continue
        through_claims += pods.get(pod_set.name, 0) * pod_set.per_pod_on(admitted_on)
        # (a shared claim is counted by the quota sync, as the object it is)
        for name, devices in pod_set.claim_devices:
            claimed[device_class_quota_key(name)] += pods.get(pod_set.name, 0) * devices
    return through_claims


def borrowed_by_tenant(cluster: Cluster) -> dict[int, dict[int, int]]:
    """GPUs the admission queue currently lends each tenant on `cluster`, per flavour
    id: what admitted workloads borrowed above their tenant's guarantee, in units of
    the flavour's resource."""
    lent: dict[int, dict[int, int]] = defaultdict(dict)
    rows = Workload.objects.filter(
        cluster=cluster, state__in=Workload.ACTIVE_STATES, flavour__isnull=False
    ).values_list("tenant_id", "borrowed", "flavour_id")
    shared = {f.pk: f for f in Flavour.objects.filter(cluster=cluster).exclude(sharing="")}
    for tenant_id, borrowed, flavour_id in rows:
        for amount in (borrowed or {}).values():
            # a shared flavour borrows thousandths of a GPU; quotas count the device
            # plugin's units of its resource (replicas, vGPUs)
            flavour = shared.get(flavour_id)
            units = as_device_units(flavour, int(amount)) if flavour else int(amount)
            lent[tenant_id][flavour_id] = lent[tenant_id].get(flavour_id, 0) + units
    return dict(lent)


def holdings_by_tenant_and_flavour(
    flavour_ids: list[int] | None = None,
) -> dict[tuple[int, int], tuple[int | float, int | float]]:
    """(tenant id, flavour id) -> (core GPUs, elastic GPUs) that admitted and running
    work holds now (of ``flavour_ids`` only, when given): elastic GPUs are those of pods
    above elastic pod sets' cores (the first taken back by a reclaim), core GPUs all the
    rest. On a shared flavour, GPUs to the thousandth (2.01 for 2,010 thousandths)."""
    held: dict[tuple[int, int], tuple[int, int]] = {}
    active = Workload.objects.filter(state__in=Workload.ACTIVE_STATES, flavour__isnull=False)
    if flavour_ids is not None:
        active = active.filter(flavour_id__in=flavour_ids)
    rows = active.values_list("tenant_id", "flavour_id", "gpus", "elastic_pods", "flavour__sharing")
    shared: set[int] = set()
    for tenant_id, flavour_id, gpus, pods, sharing in rows:
        elastic = sum(p.gpus for p in parse_elastic_pods(pods))
        core, more = held.get((tenant_id, flavour_id), (0, 0))
        held[(tenant_id, flavour_id)] = (core + gpus - elastic, more + elastic)
        if sharing:
            shared.add(flavour_id)
    return {
        key: (round(core / SHARE_UNITS_PER_GPU, 3), round(more / SHARE_UNITS_PER_GPU, 3))
        if key[1] in shared
        else (core, more)
        for key, (core, more) in held.items()
    }


def held_by_node(cluster: Cluster) -> dict[str, dict[str, int]]:
    """node -> flavour -> GPUs that admitted and running work holds there now (what the
    queue gave it: placements, elastic pods included)."""
    held: dict[str, dict[str, int]] = defaultdict(dict)
    rows = Workload.objects.filter(cluster=cluster, state__in=Workload.ACTIVE_STATES)
    for raw in rows.values_list("placements", flat=True):
        for placement in parse_placements(raw):
            on_node = held[placement.node]
            on_node[placement.flavour] = on_node.get(placement.flavour, 0) + placement.gpus
    return dict(held)


def workloads_visible_to(user: Any) -> QuerySet[Workload]:
    return Workload.objects.filter(access.tenant_filter(user)).select_related(
        "tenant", "cluster", "flavour", "priority_class", "submitted_by"
    )


def shared_gpu_context(nodes: list[Node]) -> dict[str, Any]:
    """What the node API needs to show each GPU of a shared flavour: the (cluster,
    product) pairs that are shared, and what admitted shares hold per (cluster, node)
    and GPU index. Two queries, for the nodes of one page."""
    clusters = {node.cluster_id for node in nodes}
    if not clusters:
        return {"shared_products": set(), "shared_held": {}}
    shared = set(
        Flavour.objects.filter(cluster_id__in=clusters)
        .exclude(sharing="")
        .values_list("cluster_id", "product")
    )
    held: dict[tuple[int, str], dict[int, int]] = {}
    if shared:
        names = {node.name for node in nodes}
        rows = Workload.objects.filter(
            cluster_id__in=clusters, state__in=Workload.ACTIVE_STATES
        ).values_list("cluster_id", "placements")
        for cluster_id, placements in rows:
            for p in parse_placements(placements):
                if p.gpu is not None and p.node in names:
                    gpus = held.setdefault((cluster_id, p.node), {})
                    gpus[p.gpu] = gpus.get(p.gpu, 0) + p.gpus
    return {"shared_products": shared, "shared_held": held}
