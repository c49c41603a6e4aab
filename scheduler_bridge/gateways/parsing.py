"""Kubernetes-shaped dicts (camelCase JSON) to the gateway dataclasses.

Both gateways hold or receive objects in Kubernetes' JSON shape, so one parser serves
both and the simulated cluster cannot drift from what the real one reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from scheduler_bridge.quantity import resource_amounts

from .base import ORIGINAL_SCHEDULING_ANNOTATION, JobInfo, NodeInfo, PodInfo, Taint, is_gpu_resource


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp (or datetime) as an aware UTC datetime."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        moment = value
    else:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def node_info(node: Mapping[str, Any]) -> NodeInfo:
    meta, spec, status = node.get("metadata", {}), node.get("spec", {}), node.get("status", {})
    taints = tuple(
        Taint(key=t.get("key", ""), effect=t.get("effect", ""), value=t.get("value") or "")
        for t in spec.get("taints") or []
    )
    return NodeInfo(
        name=meta["name"],
        labels=dict(meta.get("labels") or {}),
        allocatable=resource_amounts(status.get("allocatable")),
        capacity=resource_amounts(status.get("capacity")),
        unschedulable=bool(spec.get("unschedulable", False)),
        taints=taints,
    )


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


def _finished_at(statuses: Iterable[Mapping[str, Any]]) -> datetime | None:
    times = [
        parse_time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for s in statuses
    ]
    present = [t for t in times if t is not None]
    return max(present) if present else None


# Labels naming the workload object a pod belongs to, most specific first: a JobSet's
# pods are owned by its child Jobs, a RayJob's by the RayCluster it made. Sources: JobSet
# api/jobset/v1alpha2 (JobSetNameKey), Kubeflow training-operator v1 (JobNameLabel),
# KubeRay ray-operator/controllers/ray/utils/constant.go (RayOriginatedFromCRNameLabelKey,
# RayClusterLabelKey), LeaderWorkerSet api (SetNameLabelKey), Tidegate's own group label.
WORKLOAD_NAME_LABELS = (
    "jobset.sigs.k8s.io/jobset-name",
    "training.kubeflow.org/job-name",
    "ray.io/originated-from-cr-name",
    "ray.io/cluster",
    "tidegate.io/pod-group",
    "leaderworkerset.sigs.k8s.io/name",
)
QUEUE_LABEL = "tidegate.io/queue"
# The Job controller labels its pods with their Job's name (Kubernetes 1.27+, and the
# older unprefixed label): used when a pod's owner reference is missing (orphaned pods).
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")


def workload_name(meta: Mapping[str, Any]) -> str | None:
    """The name of the workload object (Job, JobSet, PyTorchJob, Ray cluster or job,
    pod group) a pod belongs to, as Tidegate names its workloads; None for a pod of no
    such object."""
    labels = meta.get("labels") or {}
    for key in WORKLOAD_NAME_LABELS:
        if labels.get(key):
            return str(labels[key])
    owners = meta.get("ownerReferences") or []
    job = next((o.get("name") for o in owners if o.get("kind") == "Job"), None)
    if job:
        return str(job)
    for key in JOB_NAME_LABELS:
        if labels.get(key):
            return str(labels[key])
    if QUEUE_LABEL in labels:  # a gated pod's group: its controller, else itself
        owner = next((o.get("name") for o in owners if o.get("controller")), None)
        return str(owner or meta.get("name"))
    return None


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    phase = status.get("phase") or "Pending"
    job_name = workload_name(meta)
    finished = None
    if phase in ("Succeeded", "Failed"):
        finished = _finished_at(status.get("containerStatuses") or [])
    return PodInfo(
        uid=meta.get("uid", ""),
        name=meta["name"],
        namespace=meta.get("namespace", ""),
        node_name=spec.get("nodeName") or None,
        phase=phase,
        gpu_requests=gpu_requests(spec),
        started_at=parse_time(status.get("startTime")),
        finished_at=finished,
        job_name=job_name,
        labels=dict(meta.get("labels") or {}),
        has_claims=names_claims(spec),
    )


def job_info(job: Mapping[str, Any]) -> JobInfo:
    meta, spec, status = job.get("metadata", {}), job.get("spec", {}), job.get("status", {})
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    conditions = {c.get("type"): c.get("status") == "True" for c in status.get("conditions") or []}
    failed = conditions.get("Failed", False)
    annotations = dict(meta.get("annotations") or {})
    completions = spec.get("completions")
    return JobInfo(
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        uid=meta.get("uid", ""),
        suspended=bool(spec.get("suspend", False)),
        labels=dict(meta.get("labels") or {}),
        annotations=annotations,
        node_selector=dict(pod_spec.get("nodeSelector") or {}),
        tolerations=tuple(dict(t) for t in pod_spec.get("tolerations") or []),
        requests_per_pod=gpu_requests(pod_spec),
        parallelism=int(spec.get("parallelism", 1)),
        completions=int(completions) if completions is not None else None,
        succeeded=int(status.get("succeeded") or 0),
        priority_class_name=pod_spec.get("priorityClassName"),
        created_at=parse_time(meta.get("creationTimestamp")),
        finished=failed or conditions.get("Complete", False),
        failed=failed,
        admitted=ORIGINAL_SCHEDULING_ANNOTATION in annotations,
        resource_version=str(meta.get("resourceVersion", "")),
    )
