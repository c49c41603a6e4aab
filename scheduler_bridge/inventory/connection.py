"""Opening a gateway for a Cluster row."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings

from scheduler_bridge.gateways import ClusterGateway, gateway_for
from scheduler_bridge.inventory.models import Cluster


def cache_key(cluster: Cluster) -> str:
    """The key of the cluster's watched cache in this process: its id, then a digest of
    its connection settings, so changed settings start a new cache and stop the old."""
    digest = hashlib.sha256(json.dumps(cluster.connection(), sort_keys=True).encode())
    return f"cluster-{cluster.pk}:{digest.hexdigest()[:16]}"


def gateway_for_cluster(cluster: Cluster) -> ClusterGateway:
    """The gateway of `cluster`; raises GatewayConfigError for unusable settings.

    A Kubernetes cluster's pods, nodes and Tidegate's quotas are read from this
    process's watched cache (``TIDEGATE["WATCH_CACHE"]``, on by default). A simulated
    cluster is the in-process demo cluster of that name; the namespaces bound to it
    exist there by construction, as they would in a real cluster.
    """
    connection = cluster.connection()
    if cluster.gateway == Cluster.Gateway.KUBERNETES and settings.TIDEGATE["WATCH_CACHE"]:
        connection["cache_key"] = cache_key(cluster)
    gateway = gateway_for(cluster.gateway, **connection)
    gateway.dra_flavours = dict(cluster.dra_flavours or {})
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
        gateway.dra_flavours = dict(cluster.dra_flavours or {})
        yield gateway
        return
    with gateway_for_cluster(cluster) as opened:
        yield opened
