"""Which workload object a pod belongs to, as Tidegate names its workloads.

Each integration names the label its controller puts on its pods
(``Integration.pod_name_label``); pod groups are named by Tidegate's own label or a
LeaderWorkerSet's; a Job's pods by their owner reference or the Job controller's label.
Pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler_bridge.gateways.base import QUEUE_LABEL

from . import INTEGRATIONS
from .base import Integration

# A pod group's own label (set in the pod template), and LeaderWorkerSet's
# (api: SetNameLabelKey): leader and workers of one set are one group.
POD_GROUP_LABEL = "tidegate.io/pod-group"
LEADER_WORKER_SET_LABEL = "leaderworkerset.sigs.k8s.io/name"


def _outermost_first(integrations: Sequence[Integration]) -> list[Integration]:
    """``integrations`` in their order, except that a kind comes before the kinds it
    makes (a RayJob's pods carry the label of the RayCluster it made too)."""
    ordered: list[Integration] = []
    for integration in integrations:
        made = [k for k, placed in enumerate(ordered) if placed.kind in integration.makes]
        ordered.insert(made[0] if made else len(ordered), integration)
    return ordered


# Labels naming the workload object a pod belongs to, most specific first.
WORKLOAD_NAME_LABELS: tuple[str, ...] = (
    *(i.pod_name_label for i in _outermost_first(INTEGRATIONS) if i.pod_name_label is not None),
    POD_GROUP_LABEL,
    LEADER_WORKER_SET_LABEL,
)
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
