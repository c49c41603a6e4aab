"""The simulated gateway: the :class:`ClusterGateway` interface over a
:class:`SimulatedCluster` held in this Python process.

Clusters live in a module-level registry keyed by name, so every gateway built for the
same cluster name in one process sees the same state (state is per process; the demo
runs its tasks in process). Tests call :func:`reset` between cases.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from . import manifests
from .base import (
    DEVICE_CLASS_KIND,
    JOB_KIND,
    RESOURCE_CLAIM_KIND,
    RESOURCE_CLAIM_TEMPLATE_KIND,
    RESOURCE_SLICE_KIND,
    ApplyResult,
    ClusterGateway,
    JobInfo,
    JobRef,
    KindRef,
    NodeInfo,
    PodInfo,
    Toleration,
    changed,
)
from .errors import GatewayError, ObjectConflict, ObjectMissing
from .parsing import job_info, node_info, pod_info
from .patches import apply_merge_patch
from .reconcile import get_path, plan_apply
from .selectors import matches_label_selector
from .simulated_cluster import SimulatedCluster

__all__ = ["SimulatedCluster", "SimulatedGateway", "get_cluster", "register", "reset"]

_registry: dict[str, SimulatedCluster] = {}
_registry_lock = threading.Lock()


def register(cluster: SimulatedCluster) -> SimulatedCluster:
    """Make ``cluster`` the one returned for its name (replacing any earlier one)."""
    with _registry_lock:
        _registry[cluster.name] = cluster
    return cluster


def get_cluster(name: str, *, seed: int = 0) -> SimulatedCluster:
    """The cluster registered under ``name``; a fresh demo cluster the first time."""
    with _registry_lock:
        if name not in _registry:
            _registry[name] = SimulatedCluster.demo(seed, name=name)
        return _registry[name]


def reset() -> None:
    """Forget every simulated cluster (tests)."""
    with _registry_lock:
        _registry.clear()


DRA_KINDS = (
    RESOURCE_SLICE_KIND,
    DEVICE_CLASS_KIND,
    RESOURCE_CLAIM_TEMPLATE_KIND,
    RESOURCE_CLAIM_KIND,
)


class SimulatedGateway(ClusterGateway):
    """:class:`ClusterGateway` over an in-process cluster; same results and errors as
    the Kubernetes gateway for the same cluster state."""

    def __init__(self, cluster: SimulatedCluster) -> None:
        self.cluster = cluster

    @classmethod
    def for_cluster(cls, name: str = "demo", *, seed: int = 0) -> SimulatedGateway:
        return cls(get_cluster(name, seed=seed))

    # --- reads -----------------------------------------------------------------------

    def list_nodes(self) -> list[NodeInfo]:
        return [node_info(n) for n in self.cluster.objects("Node")]

    def list_gpu_pods(self) -> list[PodInfo]:
        return self._with_claimed_gpus([pod_info(p) for p in self.cluster.objects("Pod")])

    def list_claiming_pods(self) -> list[PodInfo]:
        return [p for p in map(pod_info, self.cluster.objects("Pod")) if p.has_claims]

    def list_namespaces(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.cluster.objects("Namespace")]

    def list_jobs(
        self, label_selector: str | None = None, *, namespace: str | None = None
    ) -> list[JobInfo]:
        jobs = self.cluster.objects("Job", namespace)
        return [
            job_info(j)
            for j in jobs
            if matches_label_selector(label_selector, j["metadata"].get("labels") or {})
        ]

    def serves(self, kind: KindRef) -> bool:
        return kind in (JOB_KIND, *DRA_KINDS)

    def list_objects(self, kind: KindRef, label_selector: str) -> list[dict[str, Any]]:
        if kind in DRA_KINDS:
            return [
                copy.deepcopy(o)
                for o in self.cluster.objects(kind.kind)
                if matches_label_selector(label_selector, o["metadata"].get("labels") or {})
            ]
        if kind != JOB_KIND:
            raise ObjectMissing(kind.kind, kind.plural)
        return [
            copy.deepcopy(j)
            for j in self.cluster.objects("Job")
            if matches_label_selector(label_selector, j["metadata"].get("labels") or {})
        ]

    def update_object(
        self,
        kind: KindRef,
        namespace: str,
        name: str,
        change: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> dict[str, Any]:
        if kind != JOB_KIND:
            raise ObjectMissing(kind.kind, name, namespace)
        live = self._job(namespace, name)
        desired = changed(kind, namespace, name, change, live)
        if desired == live:
            return live
        return self.cluster.store(desired)

    # --- applies ---------------------------------------------------------------------

    def apply_resource_quota(
        self,
        namespace: str,
        name: str,
        hard: Mapping[str, str],
        labels: Mapping[str, str],
        *,
        expect_existing: bool = False,
    ) -> ApplyResult:
        desired = manifests.resource_quota(namespace, hard, labels, name)
        return self._apply(desired, ("spec", "hard"), expect_existing, show_values=True)

    def apply_config_map(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, str],
        labels: Mapping[str, str],
        *,
        expect_existing: bool = False,
    ) -> ApplyResult:
        desired = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "data": dict(data),
        }
        return self._apply(desired, ("data",), expect_existing, show_values=False)

    def _apply(
        self,
        desired: dict[str, Any],
        content_path: tuple[str, ...],
        expect_existing: bool,
        *,
        show_values: bool,
    ) -> ApplyResult:
        meta = desired["metadata"]
        with self.cluster.locked():
            live = self.cluster.get_object(desired["kind"], meta["namespace"], meta["name"])
            plan = plan_apply(
                live,
                desired,
                content_path,
                expect_existing=expect_existing,
                show_values=show_values,
            )
            if not plan.write:
                return ApplyResult("unchanged")
            # Like server-side apply with force: Tidegate's labels and annotation are set,
            # other labels stay; the content map becomes exactly the desired one.
            merged = copy.deepcopy(live) if live else {"kind": desired["kind"], "metadata": {}}
            merged["metadata"].update({"name": meta["name"], "namespace": meta["namespace"]})
            for section in ("labels", "annotations"):
                values = {
                    **(merged["metadata"].get(section) or {}),
                    **plan.body["metadata"][section],
                }
                merged["metadata"][section] = values
            parent = merged
            for key in content_path[:-1]:
                parent = parent.setdefault(key, {})
            parent[content_path[-1]] = get_path(desired, content_path)
            self.cluster.store(merged)
            return ApplyResult("created" if plan.create else "updated", plan.drift)

    def delete_resource_quota(self, namespace: str, name: str) -> bool:
        return self.cluster.delete_object("ResourceQuota", namespace, name, counted=True)

    def resource_quota_limits(self, label_selector: str) -> dict[tuple[str, str], dict[str, str]]:
        return {
            (q["metadata"]["namespace"], q["metadata"]["name"]): dict(
                (q.get("spec") or {}).get("hard") or {}
            )
            for q in self.cluster.objects("ResourceQuota")
            if matches_label_selector(label_selector, q["metadata"].get("labels") or {})
        }

    # --- nodes -----------------------------------------------------------------------

    def set_node_labels(self, node: str, labels: Mapping[str, str | None]) -> bool:
        with self.cluster.locked():
            live = self.cluster.get_object("Node", None, node)
            if live is None:
                raise ObjectMissing("Node", node)
            current = live["metadata"].get("labels") or {}
            changes = {k: v for k, v in labels.items() if current.get(k) != v}
            if not changes:
                return False
            self.cluster.store(apply_merge_patch(live, manifests.node_label_patch(changes)))
            return True

    # --- jobs ------------------------------------------------------------------------

    def admit_job(
        self,
        namespace: str,
        name: str,
        node_selector: Mapping[str, str],
        tolerations: Sequence[Toleration],
        node_names: Sequence[str] | None = None,
    ) -> JobInfo:
        with self.cluster.locked():
            job = self._job(namespace, name)
            try:
                admitted = manifests.admitted_job(job, node_selector, tolerations, node_names)
            except ValueError as exc:  # an unreadable original-scheduling annotation
                raise GatewayError(str(exc)) from exc
            if not job["spec"].get("suspend"):
                if admitted != job:
                    raise ObjectConflict(
                        f"Job {namespace}/{name} is already running"
                        + (" with another placement" if job_info(job).admitted else "")
                        + "; suspend it before admitting it again",
                        retryable=False,
                    )
                return job_info(job)
            if _template_changes(job, admitted):
                job = self._clear_start_time(job)
                admitted["status"] = job["status"]
            return job_info(self.cluster.store(admitted))

    def record_job_event(
        self, job: JobRef, reason: str, message: str, *, warning: bool = False
    ) -> None:
        event = manifests.job_event(
            job.namespace,
            job.name,
            job.uid,
            reason,
            message,
            warning=warning,
            at=datetime.now(UTC),
            suffix=uuid.uuid4().hex[:16],
            kind=job.kind,
            api_version=job.api_version,
        )
        self.cluster.put_object(event)  # events are not writes the demo counts

    def suspend_job(self, namespace: str, name: str) -> JobInfo:
        with self.cluster.locked():
            job = self._job(namespace, name)
            if not job["spec"].get("suspend"):
                job["spec"]["suspend"] = True
                job = self.cluster.store(job)
            try:
                restored = manifests.restored_job(job)
            except ValueError as exc:
                raise GatewayError(str(exc)) from exc
            if restored != job:
                if _template_changes(job, restored):
                    job = self._clear_start_time(job)
                    restored["status"] = job["status"]
                job = self.cluster.store(restored)
            return job_info(job)

    def _clear_start_time(self, job: dict[str, Any]) -> dict[str, Any]:
        """The jobs/status write the Kubernetes gateway makes: a suspended Job's
        template may change only once ``status.startTime`` is cleared."""
        if not job.get("status", {}).get("startTime"):
            return job
        cleared = copy.deepcopy(job)
        del cleared["status"]["startTime"]
        return self.cluster.store(cleared)

    def _job(self, namespace: str, name: str) -> dict[str, Any]:
        job = self.cluster.get_object("Job", namespace, name)
        if job is None:
            raise ObjectMissing("Job", name, namespace)
        return job


def _template_changes(live: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    return (live.get("spec") or {}).get("template") != (desired.get("spec") or {}).get("template")
