"""Workload integrations: one adapter per kind of Kubernetes workload object.

Pure Python (no Django, no network): each adapter reads its kind's JSON into what the
queue needs and builds the object as it must be once admitted, stopped, restored or
scaled (base.py says how). The sync and the reconciler (workloads/jobs.py,
workloads/reconcile.py) reach the objects through the cluster gateway with
:mod:`.access`.

Kinds: batch/v1 Job, JobSet, Kubeflow PyTorchJob, KubeRay RayCluster and RayJob.
"""

from __future__ import annotations

from .base import (
    MIN_PODS_ANNOTATION,
    Integration,
    IntegrationError,
    ObjectRead,
    PodSetRead,
)
from .job import JobIntegration
from .jobset import JobSetIntegration
from .pytorchjob import PyTorchJobIntegration
from .ray import RayClusterIntegration, RayJobIntegration

INTEGRATIONS: tuple[Integration, ...] = (
    JobIntegration(),
    JobSetIntegration(),
    PyTorchJobIntegration(),
    RayClusterIntegration(),
    RayJobIntegration(),
)
BY_KIND: dict[str, Integration] = {i.kind: i for i in INTEGRATIONS}
# Kinds whose pods are held by their owner's own suspend: the admission webhook never
# gates them, and the pod groups leave them out.
SUSPENDED_AS_A_WHOLE = frozenset(k for i in INTEGRATIONS for k in i.pod_owner_kinds)


def integration_for(kind: str) -> Integration:
    """The adapter of ``kind`` (an empty kind is a batch/v1 Job, as workloads queued
    before other kinds were integrated are). KeyError for a kind without one."""
    return BY_KIND[kind or "Job"]


__all__ = [
    "BY_KIND",
    "INTEGRATIONS",
    "SUSPENDED_AS_A_WHOLE",
    "MIN_PODS_ANNOTATION",
    "Integration",
    "IntegrationError",
    "ObjectRead",
    "PodSetRead",
    "integration_for",
]
