"""What a pod asks for: its GPU and MIG resources, and whether it names ResourceClaims.

Read from a pod spec in Kubernetes' JSON shape, by the gateways (which pods hold GPUs),
the admission webhook (which pods to gate) and the workload integrations (what each pod
set asks for). Pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler_bridge.quantity import resource_amounts

from .base import is_gpu_resource


def _container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    # An extended resource given only as a limit is requested at that limit.
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {k: v for k, v in resource_amounts(merged).items() if is_gpu_resource(k)}


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for key, amount in more.items():
        total[key] = total.get(key, 0) + amount


def names_claims(pod_spec: Mapping[str, Any]) -> bool:
    """The pod names ResourceClaims (its own from templates, or shared ones): DRA devices,
    GPUs among them perhaps, come to it that way (docs/dra.md)."""
    return bool(pod_spec.get("resourceClaims"))


def may_hold_gpus(pod_spec: Mapping[str, Any]) -> bool:
    """The pod asks for GPUs as resources, or names claims that may hold some."""
    return bool(gpu_requests(pod_spec)) or names_claims(pod_spec)


def gpu_requests(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """GPU and MIG resources a pod holds: the sum over its containers (and restartable
    sidecar init containers), or the largest plain init container if that is more,
    because init containers run one at a time before the rest."""
    running: dict[str, int] = {}
    for container in pod_spec.get("containers") or []:
        _add(running, _container_requests(container))
    init_peak: dict[str, int] = {}
    for container in pod_spec.get("initContainers") or []:
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(running, requests)
            continue
        for key, amount in requests.items():
            init_peak[key] = max(init_peak.get(key, 0), amount)
    for key, amount in init_peak.items():
        running[key] = max(running.get(key, 0), amount)
    return {k: v for k, v in sorted(running.items()) if v > 0}
