"""KubeRay RayCluster and RayJob (``ray.io/v1``): a head pod set and one pod set per
worker group, of ``replicas`` times ``numOfHosts`` pods.

Both are suspended through ``spec.suspend`` (KubeRay deletes the cluster's pods; a
RayJob must have ``shutdownAfterJobFinishes`` for it, which its webhook checks). A
RayCluster worker group may change ``replicas`` between ``minReplicas`` and
``maxReplicas`` while it runs (the Ray autoscaler does the same), so ``minReplicas`` is
its core and Tidegate grows and shrinks ``replicas``; a RayJob's cluster is not
changed once submitted. A RayCluster never finishes on its own; a RayJob finishes with
``status.jobDeploymentStatus`` ``Complete`` (``Failed`` when it failed).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from i18n.wording import gettext_noop, wording

from .base import (
    Integration,
    IntegrationError,
    KindRef,
    PodSetRead,
    SuspendedBySpec,
    child,
    whole,
)

HEAD = "head"


def _cluster_templates(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    head = spec.get("headGroupSpec")
    if isinstance(head, dict):
        yield HEAD, head.setdefault("template", {})
    for group in _worker_groups(spec):
        yield _group_name(group), group.setdefault("template", {})


def _cluster_counts(spec: Mapping[str, Any]) -> dict[str, int]:
    found = {HEAD: 1} if isinstance(spec.get("headGroupSpec"), Mapping) else {}
    for group in _worker_groups(spec):
        replicas = whole(group.get("replicas"), whole(group.get("minReplicas"), 0))
        if group.get("suspend") is True:
            replicas = 0
        found[_group_name(group)] = replicas * max(whole(group.get("numOfHosts"), 1), 1)
    return found


def _worker_groups(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    groups = spec.get("workerGroupSpecs")
    return [g for g in groups if isinstance(g, dict)] if isinstance(groups, list) else []


def _group_name(group: Mapping[str, Any]) -> str:
    return str(group.get("groupName") or "workers")


class RayClusterIntegration(SuspendedBySpec, Integration):
    ref = KindRef("ray.io", "v1", "RayCluster", "rayclusters")
    # KubeRay ray-operator/controllers/ray/utils/constant.go (RayClusterLabelKey)
    pod_name_label = "ray.io/cluster"

    def templates(self, obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        return _cluster_templates(obj.setdefault("spec", {}))

    def counts(self, obj: Mapping[str, Any]) -> dict[str, int]:
        return _cluster_counts(child(obj, "spec") or {})

    def min_counts(self, obj: Mapping[str, Any]) -> dict[str, int]:
        found = {}
        for group in _worker_groups(child(obj, "spec") or {}):
            minimum, hosts = group.get("minReplicas"), max(whole(group.get("numOfHosts"), 1), 1)
            maximum = group.get("maxReplicas")
            replicas = whole(group.get("replicas"), 0)
            if isinstance(maximum, int) and maximum < replicas:
                raise IntegrationError(
                    wording(
                        gettext_noop(
                            "worker group %(group)s asks for %(replicas)s replicas, above its "
                            "maxReplicas %(maximum)s"
                        ),
                        group=repr(_group_name(group)),
                        replicas=replicas,
                        maximum=maximum,
                    )
                )
            if isinstance(minimum, int) and minimum > 0:
                found[_group_name(group)] = minimum * hosts
        return found

    def outcome(self, obj: Mapping[str, Any]) -> tuple[bool, bool]:
        return False, False

    def set_count(self, obj: dict[str, Any], pod_set: str, count: int) -> None:
        for group in _worker_groups(obj.setdefault("spec", {})):
            if _group_name(group) == pod_set:
                hosts = max(whole(group.get("numOfHosts"), 1), 1)
                group["replicas"] = count // hosts
                return
        super().set_count(obj, pod_set, count)


class RayJobIntegration(SuspendedBySpec, Integration):
    ref = KindRef("ray.io", "v1", "RayJob", "rayjobs")
    # KubeRay (RayOriginatedFromCRNameLabelKey); its pods are owned by the cluster it makes
    pod_name_label = "ray.io/originated-from-cr-name"
    makes = ("RayCluster",)

    def templates(self, obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        spec = obj.setdefault("spec", {})
        cluster = spec.get("rayClusterSpec")
        if isinstance(cluster, dict):
            yield from _cluster_templates(cluster)
        submitter = spec.get("submitterPodTemplate")
        if isinstance(submitter, dict):
            yield "submitter", submitter

    def counts(self, obj: Mapping[str, Any]) -> dict[str, int]:
        found = _cluster_counts(child(obj, "spec", "rayClusterSpec") or {})
        if isinstance(child(obj, "spec", "submitterPodTemplate"), Mapping):
            found["submitter"] = 1
        return found

    def pod_sets(self, obj: dict[str, Any]) -> tuple[PodSetRead, ...]:
        if not isinstance(child(obj, "spec", "rayClusterSpec"), Mapping):
            raise IntegrationError(
                wording(
                    gettext_noop(
                        "the RayJob has no spec.rayClusterSpec (it runs on an existing "
                        "cluster through clusterSelector); queue that RayCluster instead"
                    )
                )
            )
        return super().pod_sets(obj)

    def outcome(self, obj: Mapping[str, Any]) -> tuple[bool, bool]:
        status = child(obj, "status", "jobDeploymentStatus")
        return status in ("Complete", "Failed"), status == "Failed"
