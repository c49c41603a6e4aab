"""MIG layouts for a cluster: plan (dry run), then reconcile through MIG Manager.

Demand per profile is what the top-level MIG guarantees promise (children's guarantees
are carved out of their parents', so the top level is the whole promise) plus pending
queue work asking for MIG slices; whole-GPU guarantees are demand for GPUs left whole.
Reconciling writes Tidegate's mig-parted ConfigMap, labels each changed node with its
config, and on later runs follows `nvidia.com/mig.config.state` to success or failure.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from i18n.wording import gettext_noop, wording
from scheduler_bridge.gateways import ClusterGateway, GatewayError
from scheduler_bridge.gateways.manifests import (
    MIG_CONFIG_MAP_NAME,
    MIG_CONFIG_STATE_LABEL,
    MigDeviceGroup,
    managed_labels,
    mig_config_map,
    node_mig_config_labels,
)
from scheduler_bridge.inventory.catalogue import UnknownGpuProduct, product_by_name
from scheduler_bridge.inventory.connection import cluster_gateway
from scheduler_bridge.inventory.layouts import busy_gpu_flags, layout_from_json, layout_to_json
from scheduler_bridge.inventory.models import Cluster, Node
from scheduler_bridge.inventory.queue_holdings import AdmittedJobs
from scheduler_bridge.mig.layouts import MigLayout
from scheduler_bridge.mig.planner import GpuState, MigDemand, MigPlan, NodePin, plan_mig_layouts
from scheduler_bridge.mig.standard import standard_mig_configs
from scheduler_bridge.quotas.models import Quota
from tenants.audit import audit_record
from tenants.transactions import queue_after_commit

logger = logging.getLogger(__name__)

IN_FLIGHT_STATES = {"pending", "rebooting"}
CONFIG_PREFIX = "tidegate-"
# Kubernetes refuses objects above 1 MiB (etcd's request limit, "Request entity too
# large: limit is 3145728" for the request, 1 MiB for ConfigMap data per
# pkg/apis/core/validation/validation.go, MaxConfigMapSize / totalSize).
MAX_CONFIG_MAP_BYTES = 1024 * 1024


class MigConfigTooLarge(GatewayError):
    """The MIG ConfigMap would pass Kubernetes' size limit; nothing was written."""


@dataclass
class ReconcileResult:
    requested: int = 0
    succeeded: int = 0
    failed: int = 0
    in_flight: int = 0
    # nodes whose GPUs a DRA driver splits on claim (partitionable devices), laid out
    # at once without MIG Manager
    laid_out: int = 0
    plan: MigPlan | None = None
    failures: list[str] = field(default_factory=list)


def mig_demand(cluster: Cluster) -> MigDemand:
    """MIG instances and whole GPUs the cluster should offer (see the module doc)."""
    rows = (
        Quota.objects.filter(flavour__cluster=cluster, tenant__parent__isnull=True)
        .values("flavour__product", "flavour__mig_profile")
        .annotate(total=Sum("guaranteed"))
    )
    instances: dict[tuple[str, str], int] = defaultdict(int)
    whole: dict[str, int] = defaultdict(int)
    for row in rows:
        if row["flavour__mig_profile"]:
            instances[(row["flavour__product"], row["flavour__mig_profile"])] += row["total"]
        else:
            whole[row["flavour__product"]] += row["total"]
    for (product, profile), count in pending_mig_demand(cluster).items():
        instances[(product, profile)] += count
    return MigDemand(instances=dict(instances), whole_gpus=dict(whole))


def pending_mig_demand(cluster: Cluster) -> dict[tuple[str, str], int]:
    """MIG slices that pending queue work on `cluster` waits for, per (product, profile)."""
    del cluster
    return {}


def _plannable_nodes(cluster: Cluster) -> list[Node]:
    nodes = Node.objects.filter(cluster=cluster, present=True, mig_capable=True).order_by("name")
    return [n for n in nodes if not n.mig_failure_reported]


def _in_flight(node: Node) -> bool:
    """MIG Manager is applying (or has not yet answered) the node's requested config."""
    return bool(node.mig_requested_config) and (
        node.mig_config_state in IN_FLIGHT_STATES
        or (node.mig_request_open and not node.mig_config_state)
    )


def _gpu_states(nodes: list[Node]) -> tuple[list[GpuState], dict[str, NodePin]]:
    gpus: list[GpuState] = []
    pins: dict[str, NodePin] = {}
    for node in nodes:
        try:
            product = product_by_name(node.product)
        except UnknownGpuProduct:
            continue
        layouts = [layout_from_json(entry) for entry in node.gpu_layouts]
        requested = node.mig_requested_layouts or []
        if _in_flight(node) and len(requested) == len(layouts):
            # counted as what it is becoming, and left alone until MIG Manager answers
            layouts = [layout_from_json(entry) for entry in requested]
            pins[node.name] = NodePin(per_gpu=dict(enumerate(layouts)))
            gpus.extend(GpuState(node.name, i, product, x) for i, x in enumerate(layouts))
            continue
        # a GPU split on claim is busy exactly while claims hold part of it (inventory's
        # flags); the GPUs beside it on such a node keep their layout (no MIG Manager)
        held = node.partitionable_held
        kept: dict[int, MigLayout] = {}
        for index, (layout, guess) in enumerate(
            zip(layouts, busy_gpu_flags(layouts, node.busy), strict=True)
        ):
            if index < len(held):
                gpus.append(GpuState(node.name, index, product, layout, bool(held[index])))
                continue
            gpus.append(GpuState(node.name, index, product, layout, guess))
            if held:
                kept[index] = layout
        if node.pinned_layout is not None:
            kept = {i: layout_from_json(entry) for i, entry in enumerate(node.pinned_layout)}
        if kept:
            pins[node.name] = NodePin(per_gpu=kept)
    return gpus, pins


def mig_plan(cluster: Cluster) -> MigPlan:
    """The plan for `cluster` as of the last inventory sync; writes nothing (dry run)."""
    gpus, pins = _gpu_states(_plannable_nodes(cluster))
    return plan_mig_layouts(gpus, mig_demand(cluster), pins)


def config_name(layouts: list[Any]) -> str:
    """The config's name, from its content: nodes planned alike share one config, so
    the ConfigMap grows with the number of distinct layouts, not of nodes. Always a
    valid label value (``tidegate-`` and 16 hex digits, 25 characters)."""
    digest = hashlib.sha256(json.dumps(layouts, sort_keys=True).encode()).hexdigest()[:16]
    return f"{CONFIG_PREFIX}{digest}"


def device_groups(layouts: list[MigLayout]) -> list[MigDeviceGroup]:
    """mig-parted entries for one node: GPUs with equal profile counts grouped."""
    groups: dict[tuple[bool, tuple[tuple[str, int], ...]], list[int]] = {}
    for index, layout in enumerate(layouts):
        key = (layout.mig_enabled, tuple(sorted(layout.counts().items())))
        groups.setdefault(key, []).append(index)
    return [
        MigDeviceGroup(devices=tuple(indexes), mig_enabled=enabled, mig_devices=dict(counts))
        for (enabled, counts), indexes in groups.items()
    ]


def tidegate_configs(cluster: Cluster) -> dict[str, list[MigDeviceGroup]]:
    """Every mig-parted config Tidegate has asked for on `cluster` (one per distinct
    layout), after the operator's standard configs (mig/standard.py), which nodes
    Tidegate never planned keep using."""
    configs: dict[str, list[MigDeviceGroup]] = {
        name: list(groups) for name, groups in standard_mig_configs().items()
    }
    requested = (
        Node.objects.filter(cluster=cluster)
        .exclude(mig_requested_config="")
        .order_by("mig_requested_config")
        .values_list("mig_requested_config", "mig_requested_layouts")
        .distinct()
    )
    for name, stored in requested:
        layouts = [layout_from_json(entry) for entry in stored or []]
        configs[name] = device_groups(layouts)
    return configs


def has_requested_configs(cluster: Cluster) -> bool:
    """Whether Tidegate has ever asked for a layout on `cluster` (then it keeps the
    ConfigMap written; a cluster it never partitioned gets none)."""
    return Node.objects.filter(cluster=cluster).exclude(mig_requested_config="").exists()


def mig_config_manifest(cluster: Cluster) -> dict[str, Any]:
    """The ConfigMap, refused (MigConfigTooLarge) when it would pass the API server's
    1 MiB object limit."""
    manifest = mig_config_map(cluster.mig_config_namespace, tidegate_configs(cluster))
    size = len(json.dumps(manifest).encode())
    if size > MAX_CONFIG_MAP_BYTES:
        raise MigConfigTooLarge(
            f"The MIG ConfigMap of {cluster.name} would be {size:,} bytes; Kubernetes "
            f"stores at most {MAX_CONFIG_MAP_BYTES:,} in one object. Nodes are planned "
            "into too many distinct layouts: pin some nodes to a shared layout."
        )
    return manifest


def _follow_up(cluster: Cluster, result: ReconcileResult) -> None:
    """Check open requests: success closes them (inventory already adopted the layouts),
    failure is reported once and leaves the node alone until an admin pins it."""
    for node in Node.objects.filter(cluster=cluster, mig_request_open=True):
        if node.mig_config != node.mig_requested_config:
            continue
        if node.mig_config_state in IN_FLIGHT_STATES or not node.mig_config_state:
            # no state yet: MIG Manager has not answered the label change
            result.in_flight += 1
        elif node.mig_config_state == "success":
            node.mig_request_open = False
            node.save(update_fields=["mig_request_open"])
            result.succeeded += 1
        elif node.mig_config_state == "failed":
            result.failed += 1
            _report_failure(cluster, node)
            result.failures.append(node.name)


def _report_failure(cluster: Cluster, node: Node) -> None:
    message = wording(
        gettext_noop(
            "MIG Manager failed to apply %(config)s on %(cluster)s/%(node)s. The node keeps "
            "its previous layout; check the mig-manager pod's log on that node, then pin or "
            "fix the node and Tidegate will try again."
        ),
        config=node.mig_config,
        cluster=cluster.name,
        node=node.name,
    )
    with transaction.atomic():
        node.mig_failure_reported = True
        node.mig_request_open = False
        node.save(update_fields=["mig_failure_reported", "mig_request_open"])
        audit_record(
            actor=None,
            action="action",
            instance=node,
            before=None,
            after={"mig_config": node.mig_config, "state": "failed"},
            message=message,
        )
        queue_after_commit("scheduler_bridge.tasks.mig_failure_notify", node.pk, str(message))


def mig_reconcile(
    cluster: Cluster,
    gateway: ClusterGateway | None = None,
    *,
    admitted: AdmittedJobs,
) -> ReconcileResult:
    """Sync the inventory, follow up on earlier requests, plan, and request the changed
    layouts (``admitted`` as for inventory_sync).

    The ConfigMap is written before any node label points at a config in it, so MIG
    Manager never looks for a config that does not exist yet.
    """
    with cluster_gateway(cluster, gateway) as opened:
        return _mig_reconcile(cluster, opened, admitted)


def _mig_reconcile(
    cluster: Cluster, gateway: ClusterGateway, admitted: AdmittedJobs
) -> ReconcileResult:
    from scheduler_bridge.inventory.services import inventory_sync

    inventory_sync(cluster, gateway, admitted=admitted)
    result = ReconcileResult()
    _follow_up(cluster, result)
    plan = mig_plan(cluster)
    result.plan = plan
    changed = plan.nodes_to_reconfigure
    split_on_claim = set(
        Node.objects.filter(cluster=cluster, name__in=changed)
        .exclude(partitionable_held=[])
        .values_list("name", flat=True)
    )
    changed_nodes = [name for name in changed if name not in split_on_claim]
    with transaction.atomic():
        for name in changed:
            node = Node.objects.select_for_update().get(cluster=cluster, name=name)
            layouts = [layout_to_json(g.target) for g in plan.node(name)]
            node.mig_requested_layouts = layouts
            if name in split_on_claim:
                # a DRA driver splits these GPUs when a claim asks: the layout holds as
                # soon as inventory counts it, nothing to ask MIG Manager
                node.mig_requested_config = ""
                node.mig_request_open = False
            else:
                node.mig_requested_config = config_name(layouts)
                node.mig_request_open = True
            node.save(
                update_fields=["mig_requested_config", "mig_requested_layouts", "mig_request_open"]
            )
    if split_on_claim:
        inventory_sync(cluster, gateway, admitted=admitted)  # count what the new layouts offer now
        result.laid_out = len(split_on_claim)
    if has_requested_configs(cluster):
        # Idempotent: also restores the ConfigMap if somebody edited or deleted it.
        gateway.apply_config_map(
            cluster.mig_config_namespace,
            MIG_CONFIG_MAP_NAME,
            mig_config_manifest(cluster)["data"],
            managed_labels(),
        )
    for name in changed_nodes:
        node = Node.objects.get(cluster=cluster, name=name)
        # The state label goes with the change: a "success" seen later is MIG Manager's
        # answer to this request, never one left from an earlier config.
        gateway.set_node_labels(
            name,
            {**node_mig_config_labels(node.mig_requested_config), MIG_CONFIG_STATE_LABEL: None},
        )
        result.requested += 1
    Node.objects.filter(cluster=cluster, name__in=changed_nodes).update(
        mig_config_state="", last_seen_at=timezone.now()
    )
    return result
