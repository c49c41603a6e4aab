"""Opening a gateway for a Cluster row."""

from __future__ import annotations

from scheduler_bridge.gateways import ClusterGateway, gateway_for
from scheduler_bridge.inventory.models import Cluster


def gateway_for_cluster(cluster: Cluster) -> ClusterGateway:
    """The gateway of `cluster`; raises GatewayConfigError for unusable settings.

    A simulated cluster is the in-process demo cluster of that name; the namespaces bound
    to it exist there by construction, as they would in a real cluster.
    """
    gateway = gateway_for(cluster.gateway, **cluster.connection())
    if cluster.gateway == Cluster.Gateway.SIMULATED:
        from scheduler_bridge.gateways.simulated import SimulatedGateway
        from tenants.models import NamespaceBinding

        assert isinstance(gateway, SimulatedGateway)
        existing = set(gateway.list_namespaces())
        bound = NamespaceBinding.objects.filter(cluster_name=cluster.name)
        for namespace in bound.values_list("namespace", flat=True):
            if namespace not in existing:
                gateway.cluster.add_namespace(namespace)
    return gateway
