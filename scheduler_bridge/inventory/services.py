"""Inventory sync: nodes, their GPUs and MIG state, and the flavours found on them."""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Count
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from i18n.said import say_when_read
from i18n.wording import chain, gettext_noop, wording
from scheduler_bridge.dra.allocation import claim_allocation
from scheduler_bridge.dra.flavours import DeviceFlavour, devices_by_node, gpus_by_node
from scheduler_bridge.dra.objects import counter_sets_of_slices, devices_of_slices
from scheduler_bridge.dra.partitions import (
    PartitionableGpu,
    layout_devices,
    most_of,
    partition_layout,
    partitionable_gpus,
)
from scheduler_bridge.followups import queue_admission_cycle, queue_inventory_sync
from scheduler_bridge.gateways import ClusterGateway, GatewayConfigError, GatewayError, NodeInfo
from scheduler_bridge.gateways.base import GPU_RESOURCE, PodInfo, Taint
from scheduler_bridge.gateways.tolerations import (
    normalised,
    scheduling_taints,
    toleration_problems,
    untolerated,
)
from scheduler_bridge.history import record_capacities
from scheduler_bridge.inventory.catalogue import (
    GpuProduct,
    UnknownGpuProduct,
    flavour_name,
    mig_profile_name_from_resource,
    product_and_profile_from_gfd_label,
    product_by_name,
    profile_by_name,
    sharing_of_node,
)
from scheduler_bridge.inventory.connection import cluster_gateway
from scheduler_bridge.inventory.layouts import (
    StoredLayout,
    derive_gpu_layouts,
    layout_from_json,
    layout_to_json,
)
from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.inventory.queue_holdings import AdmittedJobs
from scheduler_bridge.mig.layouts import counts_realisable, layout_from_counts
from scheduler_bridge.rows import RememberedRows, update_rows
from tenants import access
from tenants.audit import audit_record, snapshot
from tenants.errors import Conflict, PermissionDenied, ValidationFailed

logger = logging.getLogger(__name__)

PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
MEMORY_LABEL = "nvidia.com/gpu.memory"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"


@dataclass(frozen=True)
class FlavourSpec:
    name: str
    product: str
    resource_name: str
    mig_profile: str
    gpu_equivalent: Decimal
    node_selector: tuple[tuple[str, str], ...]


@dataclass
class InventoryResult:
    nodes: int = 0
    gpus: int = 0
    flavours: int = 0
    removed_nodes: int = 0


def flavours_of_node(node: NodeInfo) -> dict[FlavourSpec, int]:
    """The flavours a node offers and how many of each (its allocatable amount)."""
    label = node.labels.get(PRODUCT_LABEL)
    if not label:
        return {}
    shape = tuple(sorted(node.allocatable.items()))
    return dict(_flavours_of_shape(label, node.labels.get(MEMORY_LABEL), shape))


@functools.lru_cache(maxsize=1024)
def _flavours_of_shape(
    label: str, memory_label: str | None, allocatable: tuple[tuple[str, int], ...]
) -> tuple[tuple[FlavourSpec, int], ...]:
    # Thousands of nodes share a handful of shapes: each is worked out once.
    memory = _int(memory_label)
    product, single_profile = product_and_profile_from_gfd_label(label, memory)
    selector = ((PRODUCT_LABEL, label),)
    found: dict[FlavourSpec, int] = {}
    for resource, amount in allocatable:
        if amount <= 0:
            continue
        profile_name: str | None = None
        if resource == GPU_RESOURCE:
            # Under the `single` strategy MIG devices appear as nvidia.com/gpu.
            profile_name = single_profile.name if single_profile else None
        else:
            profile_name = mig_profile_name_from_resource(resource)
            if profile_name is None:
                continue
            if product.mig_capable:
                profile_name = profile_by_name(product, profile_name).name
        spec = FlavourSpec(
            name=flavour_name(product, profile_name),
            product=product.name,
            resource_name=resource,
            mig_profile=profile_name or "",
            gpu_equivalent=_equivalent(product, profile_name),
            node_selector=selector,
        )
        found[spec] = found.get(spec, 0) + amount
    return tuple(found.items())


@dataclass(frozen=True)
class NodeDra:
    """What DRA publishes for one node: devices per flavour, its GPUs as the MIG planner
    reads them (None: whole; else MIG devices per profile), and the layouts of its
    partitionable GPUs (the first GPUs of the node)."""

    flavours: dict[FlavourSpec, int] = field(default_factory=dict)
    gpus: list[dict[str, int] | None] = field(default_factory=list)
    partitioned: list[StoredLayout] = field(default_factory=list)
    # per partitionable GPU, whether claims hold any part of it now
    held: list[bool] = field(default_factory=list)
    # whole GPUs published as such (not partitionable), of any driver
    whole: int = 0
    # per flavour its partitionable GPUs serve, the most devices the node could offer if
    # they were laid out for it (every profile counted as if alone): how far teams may be
    # guaranteed it and what work can ever get (Node.dra_most, Flavour.most_capacity)
    most: dict[FlavourSpec, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DraNodes:
    """What DRA publishes per node (see NodeDra)."""

    flavours: dict[str, dict[FlavourSpec, int]]
    gpus: dict[str, list[dict[str, int] | None]]
    # per node, the flavours whose GPUs it publishes for several claims at once
    # (consumable capacity): shared, in thousandths, as Flavour.Sharing.DRA
    shared: dict[str, set[str]] = field(default_factory=dict)
    # per node, its GPUs split when a claim asks (partitionable devices)
    partitionable: dict[str, list[PartitionableGpu]] = field(default_factory=dict)

    def of_node(self, info: NodeInfo, requested: list[StoredLayout] | None) -> NodeDra:
        """``info``'s devices, its partitionable GPUs laid out as the MIG planner last
        chose (``requested``, the node's mig_requested_layouts) where that still holds."""
        flavours = dict(self.flavours.get(info.name, {}))
        whole = sum(n for spec, n in flavours.items() if not spec.mig_profile)
        layouts: list[StoredLayout] = []
        held: list[bool] = []
        most: dict[FlavourSpec, int] = {}
        selector = _product_selector(info)
        for index, gpu in enumerate(self.partitionable.get(info.name, [])):
            chosen = (
                layout_from_json(requested[index])
                if requested is not None and index < len(requested)
                else None
            )
            product = _catalogue_product(gpu.product)
            layout = partition_layout(gpu, product, chosen)
            # (held partitions no known layout describes: counted as held, shown whole)
            layouts.append(layout_to_json(layout) if layout is not None else None)
            held.append(any(gpu.in_use.values()))
            for flavour, count in layout_devices(gpu, layout).items():
                spec = _dra_spec(flavour, selector)
                flavours[spec] = flavours.get(spec, 0) + count
            for profile, flavour in gpu.flavours.items():
                spec = _dra_spec(flavour, selector)
                most[spec] = most.get(spec, 0) + most_of(gpu, product, profile)
        for spec in most:  # beside the same flavour's other devices on the node
            most[spec] += self.flavours.get(info.name, {}).get(spec, 0)
        return NodeDra(flavours, self.gpus.get(info.name, []), layouts, held, whole, most)


def _product_selector(info: NodeInfo) -> tuple[tuple[str, str], ...]:
    """The node selector of the flavours a node's DRA devices count as: its GPU Feature
    Discovery product label where it has one (nodes only DRA describes have none)."""
    label = info.labels.get(PRODUCT_LABEL)
    return ((PRODUCT_LABEL, label),) if label else ()


def _catalogue_product(name: str) -> GpuProduct | None:
    try:
        return product_by_name(name)
    except UnknownGpuProduct:
        return None


def _dra_flavours(
    resource_slices: list[dict[str, Any]],
    infos: list[NodeInfo],
    mapped: Mapping[str, str] | None = None,
    allocated: Collection[tuple[str, str, str]] = (),
) -> tuple[DraNodes, str]:
    """Per node, what its drivers publish through DRA (docs/dra.md), and a note naming
    slices that could not be read (they are left out, the rest still counts).
    ``allocated``: the devices claims hold (what partitionable GPUs are split into now)."""
    devices, unreadable = devices_of_slices(resource_slices)
    by_name = {info.name: info for info in infos}
    found: dict[str, dict[FlavourSpec, int]] = {}
    shared: dict[str, set[str]] = {}
    for node, flavours in devices_by_node(devices, mapped).items():
        info = by_name.get(node)
        selector = _product_selector(info) if info is not None else ()
        on_node = found.setdefault(node, {})
        for flavour, count in flavours.items():
            spec = _dra_spec(flavour, selector)
            on_node[spec] = on_node.get(spec, 0) + count
            if flavour.shared:
                shared.setdefault(node, set()).add(flavour.name)
    note = "; DRA slices left out: " + "; ".join(unreadable) if unreadable else ""
    partitionable = partitionable_gpus(
        devices, allocated, mapped, counter_sets_of_slices(resource_slices)
    )
    return DraNodes(found, gpus_by_node(devices), shared, partitionable), note


def _allocated(claims: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """The devices claims hold, (driver, pool, device) each."""
    return {key for claim in claims for key in claim_allocation(claim).devices}


def _has_partitions(resource_slices: list[dict[str, Any]]) -> bool:
    """Some slice publishes devices drawing on shared counters (partitionable GPUs)."""
    return any(
        device.get("consumesCounters")
        for resource_slice in resource_slices
        for device in (resource_slice.get("spec") or {}).get("devices") or []
    )


def _dra_layouts(product_name: str, gpus: list[dict[str, int] | None]) -> list[StoredLayout]:
    """Per-GPU layouts of GPUs only DRA describes: a GPU split into MIG devices gets a
    legal layout of those profiles (placements derived, as for extended resources), a
    whole GPU none."""
    product = _catalogue_product(product_name)
    layouts: list[StoredLayout] = []
    for counts in gpus:
        if counts is None or product is None or not counts_realisable(product, counts):
            layouts.append(None)
        else:
            layouts.append(layout_to_json(layout_from_counts(product, counts)))
    return layouts


def _dra_spec(flavour: DeviceFlavour, selector: tuple[tuple[str, str], ...]) -> FlavourSpec:
    """The flavour a DRA device counts as, with the extended resource the same GPUs have
    (one Flavour row, one quota, whichever way they are asked for)."""
    profile = flavour.mig_profile or None
    product = _catalogue_product(flavour.product)
    return FlavourSpec(
        name=flavour.name,
        product=flavour.product,
        resource_name=flavour.resource_name,
        mig_profile=flavour.mig_profile,
        gpu_equivalent=_equivalent(product, profile),
        node_selector=selector,
    )


def _equivalent(product: GpuProduct | None, profile_name: str | None) -> Decimal:
    """Whole-GPU equivalents of one device: a MIG device counts its compute slices."""
    equivalent = (
        Decimal(profile_by_name(product, profile_name).compute_slices) / Decimal(7)
        if profile_name and product is not None and product.mig_capable
        else Decimal(1)
    )
    return equivalent.quantize(Decimal("0.0001"))


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _busy_by_node(
    pods: list[PodInfo], queue_jobs: Collection[tuple[str, str]]
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """GPU resources requested by live pods per node: all of them, and those of pods
    outside the admission queue (not of ``queue_jobs``, (namespace, job name) pairs)."""
    busy: dict[str, dict[str, int]] = defaultdict(dict)
    foreign: dict[str, dict[str, int]] = defaultdict(dict)
    for pod in pods:
        if not pod.node_name or pod.phase not in ("Pending", "Running"):
            continue
        outside = not (pod.job_name and (pod.namespace, pod.job_name) in queue_jobs)
        on_node, foreign_on_node = busy[pod.node_name], foreign[pod.node_name]
        for resource, amount in pod.gpu_requests.items():
            on_node[resource] = on_node.get(resource, 0) + amount
            if outside:
                foreign_on_node[resource] = foreign_on_node.get(resource, 0) + amount
    return (
        {node: amounts for node, amounts in busy.items() if amounts},
        {node: amounts for node, amounts in foreign.items() if amounts},
    )


def _node_layouts(
    requested: dict[str, Any] | None, info: NodeInfo, product: GpuProduct, count: int
) -> list:
    """The node's per-GPU layouts: what Tidegate asked MIG Manager for once the node
    reports that config applied, else what its allocatable resources show."""
    config = info.labels.get(MIG_CONFIG_LABEL, "")
    state = info.labels.get(MIG_STATE_LABEL, "")
    if (
        requested is not None
        and requested["mig_requested_layouts"] is not None
        and requested["mig_requested_config"] == config
        and state == "success"
    ):
        return list(requested["mig_requested_layouts"])
    gpu_resources = tuple(sorted((k, v) for k, v in info.allocatable.items() if "nvidia.com/" in k))
    # A copy of the shared derivation (None for a whole GPU, else [profile, start] pairs).
    return [
        None if gpu is None else [list(instance) for instance in gpu]
        for gpu in _derived(product, count, gpu_resources)
    ]


@functools.lru_cache(maxsize=1024)
def _derived(product: GpuProduct, count: int, gpu_resources: tuple[tuple[str, int], ...]) -> tuple:
    # Thousands of nodes share a handful of shapes: derive each shape once.
    layouts = derive_gpu_layouts(product, count, dict(gpu_resources))
    return tuple(layout_to_json(layout) for layout in layouts)


# What inventory writes on a Node row from what the cluster says (column -> SQL type).
_NODE_FIELDS = {
    "labels": "jsonb",
    "allocatable": "jsonb",
    "product": "varchar",
    "gpu_count": "integer",
    "gpu_memory_mib": "integer",
    "mig_capable": "boolean",
    "mig_strategy": "varchar",
    "mig_config": "varchar",
    "mig_config_state": "varchar",
    "gpu_layouts": "jsonb",
    "busy": "jsonb",
    "busy_foreign": "jsonb",
    "topology_domain": "varchar",
    "unschedulable": "boolean",
    "present": "boolean",
    "dra_devices": "jsonb",
    "partitionable_held": "jsonb",
    "dra_most": "jsonb",
}


# What inventory reads of a Node row: its own fields and what the MIG planner asked for.
_REMEMBERED_COLUMNS = ["name", "mig_requested_layouts", "mig_requested_config", *_NODE_FIELDS]


def _as_rows(nodes: list[Node]) -> list[dict[str, Any]]:
    """Created nodes as the rows RememberedRows keeps (the primary keys are known on
    PostgreSQL, where rows are remembered)."""
    columns = ["id", *_REMEMBERED_COLUMNS]
    return [{c: getattr(n, c) for c in columns} for n in nodes if n.pk is not None]


# Per cluster, its Node rows as this process last read or wrote them (see RememberedRows).
_REMEMBERED_NODES: dict[int, RememberedRows] = {}


def _remembered_nodes(cluster_pk: int) -> RememberedRows:
    remembered = _REMEMBERED_NODES.get(cluster_pk)
    if remembered is None:
        remembered = _REMEMBERED_NODES[cluster_pk] = RememberedRows(Node, _REMEMBERED_COLUMNS)
    return remembered


def _observed(
    info: NodeInfo,
    stored: dict[str, Any] | None,
    cluster: Cluster,
    busy: tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]],
    dra: NodeDra,
) -> dict[str, Any]:
    """A Node row's inventory fields (:data:`_NODE_FIELDS`) as the cluster reports them;
    ``dra``: what its drivers publish through DRA."""
    label = info.labels.get(PRODUCT_LABEL)
    memory = _int(info.labels.get(MEMORY_LABEL))
    count = _int(info.labels.get(COUNT_LABEL)) or 0
    product = product_and_profile_from_gfd_label(label, memory)[0] if label else None
    product_name = product.name if product else ""
    layouts = _node_layouts(stored, info, product, count) if product else []
    mig_capable = info.labels.get(MIG_CAPABLE_LABEL) == "true"
    split = len(dra.partitioned)
    published = {**dra.most, **dra.flavours}
    if not label and published:  # no GPU Feature Discovery labels: DRA says what it has
        product_name = min(spec.product for spec in published)
        catalogued = _catalogue_product(product_name)
        mig_capable = bool(catalogued and catalogued.mig_capable)
        # its GPUs split on claim first, then those published whole or split already (a
        # mapped driver's GPUs are whole devices the NVIDIA reading does not list)
        layouts = [*dra.partitioned, *_dra_layouts(product_name, dra.gpus)]
        count = split + (len(dra.gpus) or dra.whole)
    elif split:
        # the labels count every GPU: the first ones are split on claim, laid out as
        # inventory chose
        layouts = [*dra.partitioned, *layouts[split:]]
    return {
        "labels": dict(info.labels),
        "allocatable": dict(info.allocatable),
        "dra_devices": {
            spec.name: n for spec, n in sorted(dra.flavours.items(), key=lambda kv: kv[0].name) if n
        },
        "partitionable_held": dra.held,
        "dra_most": {
            spec.name: n for spec, n in sorted(dra.most.items(), key=lambda kv: kv[0].name)
        },
        "product": product_name,
        "gpu_count": count,
        "gpu_memory_mib": memory,
        "mig_capable": mig_capable,
        "mig_strategy": info.labels.get(MIG_STRATEGY_LABEL, ""),
        "mig_config": info.labels.get(MIG_CONFIG_LABEL, ""),
        "mig_config_state": info.labels.get(MIG_STATE_LABEL, ""),
        "gpu_layouts": layouts,
        "busy": busy[0].get(info.name, {}),
        "busy_foreign": busy[1].get(info.name, {}),
        "topology_domain": info.labels.get(cluster.topology_label, ""),
        "unschedulable": info.unschedulable,
        "present": True,
    }


def inventory_sync(
    cluster: Cluster,
    gateway: ClusterGateway | None = None,
    *,
    admitted: AdmittedJobs,
) -> InventoryResult:
    """Read nodes and GPU pods from the cluster and store them; derive its flavours.
    ``admitted(cluster)`` reads the (namespace, name) of the objects the queue admitted
    (workloads.selectors.admitted_jobs), after the pods are listed: their pods are not
    counted as foreign.

    Records the outcome on the cluster (status, message, time). Raises GatewayConfigError
    for settings that cannot work and ClusterUnreachable after bounded retries; the
    cluster's status says so either way, and other clusters are unaffected.
    """
    try:
        with cluster_gateway(cluster, gateway) as reader:
            infos = reader.list_nodes()
            pods = reader.list_gpu_pods()
            resource_slices = reader.list_resource_slices()
            claims = (
                reader.list_resource_claims() or []
                if resource_slices and _has_partitions(resource_slices)
                else []
            )
    except GatewayError as error:
        _mark_cluster(cluster, Cluster.Status.ERROR, str(error))
        raise
    now = timezone.now()
    result = InventoryResult()
    busy = _busy_by_node(pods, admitted(cluster))
    dra, dra_note = (
        _dra_flavours(resource_slices, infos, cluster.dra_flavours, _allocated(claims))
        if resource_slices
        else (DraNodes({}, {}), "")
    )
    flavour_totals: dict[FlavourSpec, int] = {}
    # per flavour, the most its nodes could offer (GPUs split on claim laid out for it)
    most_totals: dict[str, int] = defaultdict(int)
    flavours_on_node: dict[str, set[str]] = {}
    # per whole-GPU flavour, how its nodes' labels say they share their GPUs
    sharing_seen: dict[str, set[str]] = defaultdict(set)
    with transaction.atomic():
        # Rows, not model instances: thousands of nodes are compared on every sync.
        remembered = _remembered_nodes(cluster.pk)
        existing = {
            row["name"]: row
            for row in remembered.read(Node.objects.select_for_update().filter(cluster=cluster))
        }
        created: list[Node] = []
        changed: list[dict[str, Any]] = []
        columns: set[str] = set()
        for info in infos:
            stored = existing.get(info.name)
            node_dra = dra.of_node(info, stored["mig_requested_layouts"] if stored else None)
            observed = _observed(info, stored, cluster, busy, node_dra)
            if stored is None:
                created.append(Node(cluster=cluster, name=info.name, last_seen_at=now, **observed))
            else:
                delta = {k for k, v in observed.items() if stored[k] != v}
                if delta:
                    columns |= delta
                    changed.append({"id": stored["id"], **observed})
            result.nodes += 1
            result.gpus += observed["gpu_count"]
            offered = flavours_of_node(info)
            # the same GPUs offered both ways (device plugin and DRA) count once
            names = {spec.name for spec in offered}
            offered.update((s, n) for s, n in node_dra.flavours.items() if s.name not in names)
            # (a flavour its GPUs split on claim could serve is known while they offer none)
            offered.update((s, 0) for s in node_dra.most if s not in offered)
            shared_through_dra = dra.shared.get(info.name, set())
            for spec, amount in offered.items():
                flavour_totals[spec] = flavour_totals.get(spec, 0) + amount
                most_totals[spec.name] += max(amount, node_dra.most.get(spec, 0))
                flavours_on_node.setdefault(info.name, set()).add(spec.name)
                if not spec.mig_profile:
                    sharing_seen[spec.name].add(
                        Flavour.Sharing.DRA
                        if spec.name in shared_through_dra and spec.name not in names
                        else sharing_of_node(info.labels)
                    )
        # Only what changed is written (a steady cluster of thousands of nodes costs a
        # few statements, not a save per node); the sighting time moves for all at once.
        Node.objects.bulk_create(created, batch_size=500)
        remembered.wrote(_as_rows(created))
        update_rows(Node, changed, {c: t for c, t in _NODE_FIELDS.items() if c in columns})
        remembered.wrote(changed)
        seen = {i.name for i in infos}
        gone = [n["id"] for name, n in existing.items() if name not in seen and n["present"]]
        # A node that left was last seen by the sync before this one; present nodes are
        # seen by every sync (Cluster.last_synced_at), not rewritten for it.
        result.removed_nodes = Node.objects.filter(pk__in=gone).update(
            present=False, last_seen_at=cluster.last_synced_at or now
        )
        result.flavours, untolerated_note = _store_flavours(
            cluster, flavour_totals, most_totals, _node_taints(infos, flavours_on_node)
        )
        sharing_note = _adopt_sharing(cluster, sharing_seen, new_since=now)
        _mark_cluster(
            cluster,
            Cluster.Status.OK,
            f"{result.nodes} nodes, {result.gpus} GPUs"
            + untolerated_note
            + sharing_note
            + dra_note,
        )
        # Capacity may have changed: waiting work may fit now (or admitted work not).
        queue_admission_cycle(cluster.pk)
    return result


def _node_taints(
    infos: list[NodeInfo], flavour_names: dict[str, set[str]]
) -> dict[str, list[dict[str, str]]]:
    """Per flavour, the scheduling taints of the nodes offering it (node-condition taints
    left out): shown beside the flavour's tolerations, never tolerated on their own."""
    found: dict[str, list[Taint]] = defaultdict(list)
    for info in infos:
        for name in flavour_names.get(info.name, set()):
            found[name].extend(info.taints)
    return {name: scheduling_taints(taints) for name, taints in found.items()}


def _store_flavours(
    cluster: Cluster,
    totals: dict[FlavourSpec, int],
    most: dict[str, int],
    taints: dict[str, list[dict[str, str]]],
) -> tuple[int, str]:
    """Save the flavours offered now (their tolerations are left as the admin set
    them); returns how many, and a note naming flavours whose tolerations leave a taint
    of their nodes out (admitted pods would not schedule there)."""
    by_name: dict[str, tuple[FlavourSpec, int]] = {}
    for spec, amount in totals.items():
        known = by_name.get(spec.name)
        by_name[spec.name] = (spec, amount + (known[1] if known else 0))
    seen = set()
    left_out: list[str] = []
    for name, (spec, amount) in sorted(by_name.items()):
        flavour, _ = Flavour.objects.update_or_create(
            cluster=cluster,
            name=name,
            defaults={
                "product": spec.product,
                "resource_name": spec.resource_name,
                "mig_profile": spec.mig_profile,
                "gpu_equivalent": spec.gpu_equivalent,
                "capacity": amount,
                "most_capacity": max(amount, most.get(name, 0)),
                "node_selector": dict(spec.node_selector),
                "node_taints": taints.get(name, []),
            },
        )
        missing = untolerated(flavour.node_taints, flavour.tolerations)
        if missing:
            keys = ", ".join(sorted({t["key"] for t in missing}))
            left_out.append(f"{name} ({keys})")
        seen.add(name)
    # Flavours no node offers any more keep their quotas (history) but have no capacity.
    gone = (
        Flavour.objects.filter(cluster=cluster)
        .exclude(name__in=seen)
        .exclude(capacity=0, most_capacity=0)
    )
    gone_ids = list(gone.values_list("pk", flat=True))
    if gone_ids:
        Flavour.objects.filter(pk__in=gone_ids).update(capacity=0, most_capacity=0)
        record_capacities((pk, 0) for pk in gone_ids)
    note = (
        "; nodes of " + "; ".join(left_out) + " carry taints the flavour does not tolerate: "
        "set its tolerations (PATCH /api/flavours/{id}/) or its pods will not schedule there"
        if left_out
        else ""
    )
    return len(seen), note


def _adopt_sharing(cluster: Cluster, seen: dict[str, set[str]], *, new_since: datetime) -> str:
    """A flavour first seen in this sync takes the sharing its nodes' labels agree on.
    For an older one a note says where the labels disagree with it: sharing changes its
    units, so an administrator changes it (PATCH /api/v1/flavours/{id}/), and labels
    that say nothing leave an administrator's choice (HAMi without its label, fractions)
    alone."""
    disagree: list[str] = []
    for flavour in Flavour.objects.filter(cluster=cluster, name__in=list(seen), mig_profile=""):
        found = seen[flavour.name]
        if len(found) > 1:
            said = ", ".join(sorted(s or "not shared" for s in found))
            disagree.append(f"{flavour.name} (its nodes differ: {said})")
            continue
        (detected,) = found
        if not detected or detected == flavour.sharing:
            continue
        if flavour.created_at < new_since:
            was = flavour.sharing or "not shared"
            disagree.append(f"{flavour.name} (nodes say {detected}, the flavour {was})")
            continue
        flavour.sharing = detected
        flavour.save(update_fields=["sharing", "updated_at"])
    if not disagree:
        return ""
    return (
        "; the nodes' sharing labels disagree with flavours "
        + "; ".join(disagree)
        + ": set sharing (PATCH /api/v1/flavours/{id}/) once their work has finished"
    )


def _mark_cluster(cluster: Cluster, status: str, message: str) -> None:
    cluster.status = status
    cluster.status_message = message[:2000]
    cluster.last_synced_at = timezone.now()
    Cluster.objects.filter(pk=cluster.pk).update(
        status=status, status_message=cluster.status_message, last_synced_at=cluster.last_synced_at
    )


def node_layouts(node: Node) -> list:
    """The node's per-GPU layouts as MigLayout objects."""
    return [layout_from_json(entry) for entry in node.gpu_layouts]


__all__ = [
    "GatewayConfigError",
    "InventoryResult",
    "flavour_name",
    "flavours_of_node",
    "inventory_sync",
    "logger",
    "node_layouts",
]


def cluster_save(*, actor: Any, cluster: Cluster, source: str = "api") -> Cluster:
    """Create or change a cluster's connection settings (platform admins, checked by the
    caller), audited in the same transaction; its nodes and quotas are synced after
    commit, so a wrong setting shows up in the cluster's status within seconds."""
    with transaction.atomic():
        before = snapshot(Cluster.objects.get(pk=cluster.pk)) if cluster.pk else None
        cluster.save()
        audit_record(
            actor=actor,
            action="update" if before else "create",
            instance=cluster,
            before=before,
            after=snapshot(cluster),
            source=source,
        )
        queue_inventory_sync(cluster.pk)
    return cluster


def cluster_delete(*, actor: Any, cluster: Cluster, source: str = "api") -> None:
    """Remove a cluster Tidegate no longer manages. Conflict while quotas or workloads
    still refer to it (their history and bills need it): remove those first."""
    # (through the reverse relations of Workload.cluster and Quota.flavour: workloads and
    # quotas sit above the inventory)
    workloads = cluster.workloads.count()
    quotas = cluster.flavours.aggregate(quotas=Count("quotas"))["quotas"]
    if workloads or quotas:
        raise Conflict(
            f"Cluster {cluster.name} still has {quotas} quota(s) and {workloads} workload(s); "
            "remove its quotas first, and keep the cluster while its workloads' history is "
            "needed for billing."
        )
    with transaction.atomic():
        audit_record(
            actor=actor,
            action="delete",
            instance=cluster,
            before=snapshot(cluster),
            after=None,
            source=source,
        )
        cluster.delete()


def flavour_set_tolerations(
    *, actor: Any, flavour: Flavour, tolerations: Any, source: str = "api"
) -> Flavour:
    """Set the tolerations admission gives the pods it admits to ``flavour`` (platform
    admins only), audited; work admitted from now on gets them. Refused, naming each
    bad entry, when a toleration is malformed, has no key, or names a node-condition
    taint."""
    if not access.is_platform_admin(actor):
        raise PermissionDenied(_("Only platform administrators set a flavour's tolerations."))
    problems = toleration_problems(tolerations)
    if problems:
        raise ValidationFailed(
            say_when_read(chain(gettext_noop("%(first)s; %(rest)s"), problems)),
            field_errors={"tolerations": [say_when_read(p) for p in problems]},
        )
    with transaction.atomic():
        locked = Flavour.objects.select_for_update().get(pk=flavour.pk)
        before = snapshot(locked)
        locked.tolerations = normalised(tolerations)
        locked.save(update_fields=["tolerations", "updated_at"])
        audit_record(
            actor=actor,
            action="update",
            instance=locked,
            before=before,
            after=snapshot(locked),
            source=source,
            message=wording(gettext_noop("tolerations set")),
        )
    return locked


def flavour_set_sharing(
    *, actor: Any, flavour: Flavour, sharing: str, source: str = "api"
) -> Flavour:
    """Say how pods share the GPUs of ``flavour`` (platform admins only), audited. Its
    unit changes with it (a thousandth of a GPU when shared), so it is refused while
    work that is not finished asks for it or holds it: change it when the flavour is idle."""
    if not access.is_platform_admin(actor):
        raise PermissionDenied(_("Only platform administrators say how a flavour is shared."))
    if sharing not in Flavour.Sharing.values:
        raise ValidationFailed(
            wording(
                gettext_noop("sharing must be one of: %(choices)s"),
                choices=", ".join(repr(v) for v in Flavour.Sharing.values),
            ),
            field_errors={"sharing": ["unknown sharing"]},
        )
    if flavour.is_mig and sharing:
        raise ValidationFailed(
            wording(gettext_noop("a MIG flavour is already split by MIG; it cannot be shared too")),
            field_errors={"sharing": ["a MIG flavour cannot be shared"]},
        )
    with transaction.atomic():
        locked = (
            Flavour.objects.select_for_update(of=("self",))
            .select_related("cluster")
            .get(pk=flavour.pk)
        )
        if locked.sharing == sharing:
            return locked
        # (the cluster's workloads through Workload.cluster's reverse relation: workloads
        # sit above the inventory)
        workloads = locked.cluster.workloads
        open_work = workloads.filter(state__in=workloads.model.OPEN_STATES).values_list(
            "flavour_id", "pod_sets"
        )
        count = sum(
            1
            for held, pod_sets in open_work
            if held == locked.pk
            or any(locked.name in (ps.get("flavours") or ()) for ps in pod_sets or ())
        )
        if count:
            message = wording(
                gettext_noop(
                    "%(count)s unfinished workloads ask for or hold %(flavour)s; its unit "
                    "changes with sharing, so change it when they have finished or been "
                    "cancelled"
                ),
                count=count,
                flavour=locked.name,
            )
            raise ValidationFailed(message, field_errors={"sharing": [say_when_read(message)]})
        before = snapshot(locked)
        locked.sharing = sharing
        locked.save(update_fields=["sharing", "updated_at"])
        audit_record(
            actor=actor,
            action="update",
            instance=locked,
            before=before,
            after=snapshot(locked),
            source=source,
            message=wording(gettext_noop("sharing set to %(sharing)s"), sharing=sharing or "none"),
        )
    return locked
