"""Opening a gateway for a Cluster row."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def cluster_gateway(
    cluster: Cluster, gateway: ClusterGateway | None = None
) -> Iterator[ClusterGateway]:
    """``gateway`` as it is (its owner closes it), or a new gateway of ``cluster`` that
    is closed when the block ends, whatever happens inside it."""
    if gateway is not None:
        yield gateway
        return
    with gateway_for_cluster(cluster) as opened:
        yield opened
