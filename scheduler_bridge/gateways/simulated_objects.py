"""Kubernetes-shaped objects for seeding the simulated cluster: namespaces, GPU nodes
with GPU Feature Discovery labels, GPU pods and queue-managed Jobs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from . import manifests
from .base import Toleration
from .mig_layout import PRODUCTS

DURATION_ANNOTATION = "sim.tidegate.io/duration-seconds"


def stamp(moment: datetime) -> str:
    """RFC 3339 in UTC, to the second, as the API server writes timestamps."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def namespace(name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta = {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}}
    return {"kind": "Namespace", "metadata": meta, "status": {"phase": "Active"}}


def gpu_node(
    name: str,
    *,
    product: str = "NVIDIA-H100-80GB-HBM3",
    gpus: int = 8,
    mig_config: str = "all-disabled",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A GPU node with the GPU Feature Discovery labels of docs/gpu-labels.md
    (mixed MIG strategy), ``mig.config`` set to ``mig_config`` and all GPUs whole
    (the cluster applies the MIG layout when the node is added)."""
    _, memory = PRODUCTS.get(product, ("", 0))
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": str(memory),
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "mixed",
        manifests.MIG_CONFIG_LABEL: mig_config,
        manifests.MIG_CONFIG_STATE_LABEL: "success",
        **(labels or {}),
    }
    base = {"cpu": "128", "memory": "2113714Mi", "pods": "110", "ephemeral-storage": "3Ti"}
    node: dict[str, Any] = {
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "capacity": dict(base),
            "allocatable": dict(base),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    if taints:
        node["spec"]["taints"] = [dict(t) for t in taints]
    return node


def pod(
    namespace: str,
    name: str,
    *,
    requests: Mapping[str, int],
    node_name: str | None = None,
    phase: str = "Running",
    labels: Mapping[str, str] | None = None,
    started: datetime,
) -> dict[str, Any]:
    """A standalone pod (not owned by a Job) holding ``requests`` GPU resources."""
    amounts = {k: str(v) for k, v in requests.items()}
    pod: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "nodeName": node_name,
            "restartPolicy": "Never",
            "containers": [_container(amounts)],
        },
        "status": {"phase": phase, "startTime": stamp(started)},
    }
    if node_name is None:
        del pod["spec"]["nodeName"]
    return pod


def job(
    namespace: str,
    name: str,
    *,
    requests: Mapping[str, int],
    parallelism: int = 1,
    suspended: bool = True,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Toleration] = (),
    duration_seconds: float | None = None,
    priority_class_name: str | None = None,
) -> dict[str, Any]:
    """A Job whose pods each request ``requests``; suspended by default, the way a
    queue-managed Job is submitted."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [_container({k: str(v) for k, v in requests.items()})],
    }
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        pod_spec["tolerations"] = [dict(t) for t in tolerations]
    if priority_class_name:
        pod_spec["priorityClassName"] = priority_class_name
    notes = dict(annotations or {})
    if duration_seconds is not None:
        notes[DURATION_ANNOTATION] = str(duration_seconds)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if notes:
        meta["annotations"] = notes
    job = {
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "suspend": suspended,
            "template": {"spec": pod_spec},
        },
        "status": {},
    }
    return job


def _container(requests: Mapping[str, str]) -> dict[str, Any]:
    # Extended resources must have requests == limits; give both, as users do.
    resources = {"requests": dict(requests), "limits": dict(requests)} if requests else {}
    return {"name": "main", "image": "registry.example/train:latest", "resources": resources}
