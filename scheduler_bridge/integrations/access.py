"""Reaching one kind's objects on a cluster through its gateway.

Jobs keep the gateway's own Job calls (they clear a Job's ``startTime`` before a new
placement and know the watch cache); every other kind is read and replaced as JSON
(:meth:`~scheduler_bridge.gateways.ClusterGateway.update_object`), each change built
by the kind's adapter from the object as read, so a concurrent write is a conflict
that is retried from a fresh read, never a lost update.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler_bridge.gateways import ClusterGateway, ObjectMissing, Toleration
from scheduler_bridge.gateways.base import POD_KIND, REPLICA_SET_KIND, STATEFUL_SET_KIND

from .base import PREEMPT_AT_ANNOTATION, Integration, ObjectRead
from .job import JobIntegration
from .pods import PodGroup, pod_groups

# The last reads of each kind's listed objects, by (uid, resourceVersion): an object the
# API server has not changed since (same version) is not read again. Per process; each
# listing keeps only what it saw, so it never outgrows one listing.
_reads: dict[tuple[str, str], dict[tuple[str, str], ObjectRead]] = {}


def list_queued(
    gateway: ClusterGateway, integration: Integration, label_selector: str
) -> list[ObjectRead] | None:
    """The kind's objects that carry ``label_selector``, read; None when the cluster
    does not serve the kind (its CRD is not installed)."""
    if not gateway.serves(integration.ref):
        return None
    try:
        objects = gateway.list_objects(integration.ref, label_selector)
    except ObjectMissing:
        return None
    known = _reads.get((integration.kind, label_selector), {})
    kept: dict[tuple[str, str], ObjectRead] = {}
    found = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        version = meta.get("resourceVersion")
        if not version:  # nothing says whether it changed: read it
            found.append(integration.read(obj))
            continue
        key = (str(meta.get("uid") or ""), str(version))
        read = known.get(key) or integration.read(obj)
        kept[key] = read
        found.append(read)
    _reads[(integration.kind, label_selector)] = kept
    return found


def queued_pod_groups(gateway: ClusterGateway, label_selector: str) -> list[PodGroup]:
    """The groups of gated pods carrying ``label_selector``, each asking for the
    replicas its ReplicaSets and StatefulSets want (where the cluster serves them)."""
    controllers: list[dict[str, Any]] = []
    for kind in (REPLICA_SET_KIND, STATEFUL_SET_KIND):
        if gateway.serves(kind):
            try:
                controllers += gateway.list_objects(kind, label_selector)
            except ObjectMissing:
                continue
    return pod_groups(gateway.list_objects(POD_KIND, label_selector), controllers)


def start(
    gateway: ClusterGateway,
    integration: Integration,
    namespace: str,
    name: str,
    node_selector: Mapping[str, str],
    tolerations: Sequence[Toleration],
    node_names: Sequence[str] | None = None,
    counts: Mapping[str, int] | None = None,
) -> None:
    """Resume a suspended object on the chosen flavour (and nodes). Nothing is written
    when it already runs that way; GatewayError when it runs another way."""
    if isinstance(integration, JobIntegration):
        if counts:  # while it is suspended, so it never starts with more pods
            scale(gateway, integration, namespace, name, counts)
        gateway.admit_job(namespace, name, node_selector, tolerations, node_names)
        return

    def admission(obj: dict[str, Any]) -> dict[str, Any]:
        desired = integration.admitted(obj, node_selector, tolerations, node_names, counts)
        if not integration.is_suspended(obj) and desired != obj:
            running = (
                "running with another placement" if integration.read(obj).admitted else "running"
            )
            raise ValueError(f"it is already {running}; suspend it before admitting it again")
        return desired

    gateway.update_object(integration.ref, namespace, name, admission)


def stop(gateway: ClusterGateway, integration: Integration, namespace: str, name: str) -> None:
    """Suspend the object (its controller deletes its pods), then put its pod
    templates back as their owner wrote them and drop an announced preemption time.
    Idempotent."""
    if isinstance(integration, JobIntegration):
        gateway.suspend_job(namespace, name)
    else:
        gateway.update_object(integration.ref, namespace, name, integration.stopped)
        if not integration.restore_with_stop:
            gateway.update_object(integration.ref, namespace, name, integration.restored)
    gateway.update_object(
        integration.ref,
        namespace,
        name,
        lambda obj: with_annotation(obj, PREEMPT_AT_ANNOTATION, None),
    )


def announce_preemption(
    gateway: ClusterGateway, integration: Integration, namespace: str, name: str, at: str
) -> None:
    """Put the time its preemption was announced for on the object
    (``tidegate.io/preempt-at``), for its code to watch and save a checkpoint."""
    gateway.update_object(
        integration.ref,
        namespace,
        name,
        lambda obj: with_annotation(obj, PREEMPT_AT_ANNOTATION, at),
    )


def with_annotation(obj: dict[str, Any], key: str, value: str | None) -> dict[str, Any]:
    """``obj`` with annotation ``key`` set to ``value`` (None: removed)."""
    meta = obj.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    if value is None:
        if key not in annotations:
            return obj
        annotations.pop(key)
    else:
        annotations[key] = value
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    return obj


def scale(
    gateway: ClusterGateway,
    integration: Integration,
    namespace: str,
    name: str,
    counts: Mapping[str, int],
) -> None:
    """Set the pod counts of the object's elastic pod sets."""
    gateway.update_object(
        integration.ref, namespace, name, lambda obj: integration.scaled(obj, counts)
    )
