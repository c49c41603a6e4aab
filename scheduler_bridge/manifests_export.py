"""Every object Tidegate would write to a cluster, as plain Kubernetes documents."""

from __future__ import annotations

from typing import Any

from scheduler_bridge.gateways.base import MANAGED_BY_LABEL, TENANT_LABEL
from scheduler_bridge.gateways.manifests import (
    node_label_patch,
    node_mig_config_labels,
    resource_quota,
)
from scheduler_bridge.inventory.connection import gateway_for_cluster
from scheduler_bridge.inventory.models import Cluster, Node
from scheduler_bridge.mig.services import has_requested_configs, mig_config_manifest
from scheduler_bridge.quotas.resource_quota import QUOTA_NAME
from scheduler_bridge.quotas.sync import desired_quotas, gpu_device_classes, used_by_namespace
from scheduler_bridge.workloads.selectors import queue_holdings
from tenants.models import NamespaceBinding


def cluster_manifests(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """Relative file path -> document. Reads current usage from the cluster (the quota
    rule depends on it); raises GatewayError when the cluster cannot be read."""
    bindings = list(
        NamespaceBinding.objects.filter(cluster_name=cluster.name).select_related("tenant")
    )
    queue = queue_holdings(cluster)
    with gateway_for_cluster(cluster) as gateway:
        used = used_by_namespace(cluster, gateway, queue)
        device_classes = gpu_device_classes(cluster, gateway)
    desired = desired_quotas(
        cluster, bindings, used, device_classes=device_classes, lent=queue.lent
    )
    files: dict[str, dict[str, Any]] = {}
    for binding in sorted(bindings, key=lambda b: b.namespace):
        labels = {MANAGED_BY_LABEL: "tidegate", TENANT_LABEL: binding.tenant.slug}
        files[f"resourcequotas/{binding.namespace}.yaml"] = resource_quota(
            binding.namespace, desired[binding.namespace], labels, QUOTA_NAME
        )
    if has_requested_configs(cluster):
        files["mig/configmap.yaml"] = mig_config_manifest(cluster)
        for node in Node.objects.filter(cluster=cluster).exclude(mig_requested_config=""):
            patch = node_label_patch(node_mig_config_labels(node.mig_requested_config))
            files[f"nodes/{node.name}.patch.yaml"] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node.name, **patch["metadata"]},
            }
    return files
