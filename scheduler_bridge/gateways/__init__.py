"""Cluster gateways: one interface for everything Tidegate does to a cluster.

Pure Python (no Django). Build one with :func:`gateway_for` from a Cluster's settings.
"""

from __future__ import annotations

from typing import Any

from .base import (
    JOB_KIND,
    ApplyResult,
    ClusterGateway,
    JobInfo,
    JobRef,
    KindRef,
    NodeInfo,
    PodInfo,
    Taint,
    Toleration,
)
from .errors import (
    ClusterUnreachable,
    GatewayConfigError,
    GatewayError,
    NamespaceMissing,
    ObjectConflict,
    ObjectMissing,
)

__all__ = [
    "JOB_KIND",
    "POD_KIND",
    "ApplyResult",
    "ClusterGateway",
    "ClusterUnreachable",
    "GatewayConfigError",
    "GatewayError",
    "JobInfo",
    "JobRef",
    "KindRef",
    "NamespaceMissing",
    "NodeInfo",
    "ObjectConflict",
    "ObjectMissing",
    "PodInfo",
    "Taint",
    "Toleration",
    "gateway_for",
]

GATEWAY_KINDS = ("kubernetes", "simulated")


def gateway_for(kind: str, **connection: Any) -> ClusterGateway:
    """A gateway of ``kind`` connected as ``connection`` says.

    ``kubernetes``: ``kubeconfig`` (path) with optional ``context``, or
    ``kubeconfig_env`` (an environment variable holding the path) with optional
    ``context``, or ``in_cluster=True``; plus optional ``retry`` (RetryPolicy),
    ``connect_timeout`` and ``read_timeout`` (seconds), and ``cache_key`` (read pods,
    nodes and Tidegate's quotas from this process's watched cache of that key).
    ``simulated``: ``name`` of the in-process cluster (default ``demo``) and ``seed``.

    Raises GatewayConfigError for an unknown kind or unusable connection settings.
    """
    if kind == "simulated":
        from .simulated import SimulatedGateway

        unknown = set(connection) - {"name", "seed"}
        if unknown:
            raise GatewayConfigError(f"simulated gateway got unknown settings: {sorted(unknown)}")
        return SimulatedGateway.for_cluster(
            connection.get("name", "demo"), seed=connection.get("seed", 0)
        )
    if kind == "kubernetes":
        # Imported here: loading the official client costs time the simulated path
        # (the demo, replay) does not need to pay.
        from .kubernetes import KubernetesGateway

        settings = dict(connection)
        kubeconfig = settings.pop("kubeconfig", None)
        variable = settings.pop("kubeconfig_env", None)
        context = settings.pop("context", None)
        in_cluster = settings.pop("in_cluster", False)
        if sum(map(bool, (kubeconfig, variable, in_cluster))) != 1:
            raise GatewayConfigError(
                "a kubernetes cluster needs exactly one of: a kubeconfig path, an environment "
                "variable naming one, or in-cluster credentials"
            )
        try:
            if kubeconfig:
                return KubernetesGateway.from_kubeconfig(kubeconfig, context, **settings)
            if variable:
                return KubernetesGateway.from_environment(variable, context, **settings)
            return KubernetesGateway.in_cluster(**settings)
        except TypeError as exc:  # misspelt setting
            raise GatewayConfigError(f"kubernetes gateway settings: {exc}") from exc
    raise GatewayConfigError(
        f"unknown cluster kind {kind!r}; expected one of {', '.join(GATEWAY_KINDS)}"
    )
