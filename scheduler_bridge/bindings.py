"""The bridge's part in namespace bindings (registered in apps.py): a binding must name
a cluster Tidegate manages and not its MIG ConfigMap namespace; a change to a cluster's
bindings syncs its ResourceQuotas after commit (an unbound namespace loses its quota)."""

from __future__ import annotations

from scheduler_bridge.followups import queue_quota_sync
from scheduler_bridge.inventory.models import Cluster


def binding_check(cluster_name: str, namespace: str) -> dict[str, str] | None:
    cluster = Cluster.objects.filter(name=cluster_name).first()
    if cluster is None:
        known = ", ".join(Cluster.objects.order_by("name").values_list("name", flat=True))
        return {
            "cluster_name": (
                f"Cluster {cluster_name} does not exist"
                + (f"; Tidegate manages: {known}." if known else "; register it first.")
            )
        }
    if namespace == cluster.mig_config_namespace:
        return {
            "namespace": (
                f"{namespace} holds cluster {cluster_name}'s MIG configuration (the GPU "
                "operator's namespace) and cannot be bound to a tenant."
            )
        }
    return None


def sync_quotas_of(cluster_name: str) -> None:
    cluster_id = Cluster.objects.filter(name=cluster_name).values_list("pk", flat=True).first()
    if cluster_id is not None:
        queue_quota_sync(cluster_id)
