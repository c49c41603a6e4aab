"""Kubernetes-shaped dicts (camelCase JSON) to the gateway dataclasses.

Both gateways hold or receive objects in Kubernetes' JSON shape, so one parser serves
both and the simulated cluster cannot drift from what the real one reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from scheduler_bridge.integrations.naming import workload_name
from scheduler_bridge.quantity import resource_amounts

from .base import ORIGINAL_SCHEDULING_ANNOTATION, JobInfo, NodeInfo, PodInfo, Taint
from .pod_resources import gpu_requests, names_claims


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


def _finished_at(statuses: Iterable[Mapping[str, Any]]) -> datetime | None:
    times = [
        parse_time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for s in statuses
    ]
    present = [t for t in times if t is not None]
    return max(present) if present else None


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
