"""Serving work through scheduling gates on the real control plane: Tidegate's webhook gates
the GPU pods a real Deployment's ReplicaSet (and a StatefulSet) creates, the real scheduler
keeps them pending, the queue releases them onto its flavour; scaled out, the extra pods are
created gated and grow into the tenant's idle GPUs; scaled in, the workload follows.

Kubernetes' quota admission counts gated pods: pods a ReplicaSet creates beyond the
namespace's `tidegate-gpu` limit are refused (403, FailedCreate). Tidegate therefore reads
the replicas the controller wants, lends first and raises the limit, and the controller's
next attempt creates the pods (docs/kubernetes.md, "Where the local test server and the
real one disagreed")."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_bridge.integrations.pods import group_uid
from scheduler_bridge.quotas.resource_quota import QUOTA_NAME
from scheduler_bridge.quotas.sync import quota_sync
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.jobs import jobs_sync
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.selectors import queue_holdings
from tests.conftest import Cast
from tests.kube_real.cluster import RealCluster

from .conftest import RealGpuCluster

pytestmark = pytest.mark.django_db
NAMESPACE = "speech-train"
GATE = "tidegate.io/admission"


def serving(kind: str, name: str, replicas: int, min_pods: int) -> dict[str, Any]:
    gpu = {"nvidia.com/gpu": "1"}
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {
                "labels": {"app": name, "tidegate.io/queue": "speech"},
                "annotations": {"tidegate.io/min-pods": str(min_pods)},
            },
            "spec": {
                "containers": [{"name": "server", "image": "vllm:1", "resources": {"limits": gpu}}]
            },
        },
    }
    if kind == "StatefulSet":
        spec |= {"serviceName": name, "podManagementPolicy": "Parallel"}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def _gated(pod: dict[str, Any]) -> bool:
    return any(g["name"] == GATE for g in pod["spec"].get("schedulingGates") or [])


def pods_of(real: RealCluster, app: str) -> list[dict[str, Any]]:
    return [
        p
        for p in real.objects("Pod", NAMESPACE)
        if p["metadata"].get("labels", {}).get("app") == app
        and not p["metadata"].get("deletionTimestamp")
    ]


def counts(real: RealCluster, app: str) -> tuple[int, int]:
    """(bound to a node, gated) pods of the app."""
    pods = pods_of(real, app)
    return sum(1 for p in pods if p["spec"].get("nodeName")), sum(1 for p in pods if _gated(p))


def cycle(gpu: RealGpuCluster) -> Any:
    jobs_sync(gpu.cluster, gpu.gateway)
    return admission_cycle(gpu.cluster, gpu.gateway)


def _scale(real: RealCluster, kind: str, name: str, replicas: int) -> None:
    real.edit_object(kind, NAMESPACE, name, lambda o: o["spec"].update(replicas=replicas))


def test_a_deployment_is_gated_released_and_grows_within_its_namespaces_quota(
    gpu_cluster: RealGpuCluster, cast: Cast, tidegate_webhook: str, priorities: Any
) -> None:
    """speech owns 4 H100s; its Deployment keeps 2 replicas at least and is scaled to 4."""
    real = gpu_cluster.real
    real.create_object(serving("Deployment", "serve", replicas=2, min_pods=2))

    # the ReplicaSet controller's pods are gated by the webhook; the scheduler leaves them
    gated = real.wait_for(
        lambda: (lambda p: p if len(p) == 2 else None)(pods_of(real, "serve")),
        "the ReplicaSet controller to create two pods",
    )
    assert all(_gated(p) for p in gated)
    real.wait_for(
        lambda: all(_reported_gated(real, p["metadata"]["name"]) for p in gated),
        "the scheduler to report the pods SchedulingGated",
    )
    assert counts(real, "serve") == (0, 2)

    cycle(gpu_cluster)
    replica_set = gated[0]["metadata"]["ownerReferences"][0]["name"]
    workload = Workload.objects.get(job_uid=group_uid(NAMESPACE, replica_set))
    assert (workload.kind, workload.state, workload.gpus) == ("PodGroup", "running", 2)
    real.wait_for(lambda: counts(real, "serve") == (2, 0), "the released pods to be bound")
    for pod in pods_of(real, "serve"):
        assert pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert pod["spec"]["nodeName"] in {"h100-1", "h100-2"}

    # an autoscaler asks for 4 replicas: 2 more pods, gated, grow into speech's idle GPUs
    _scale(real, "Deployment", "serve", 4)
    real.wait_for(lambda: counts(real, "serve") == (2, 2), "two more pods, gated")
    cycle(gpu_cluster)
    cycle(gpu_cluster)
    real.wait_for(lambda: counts(real, "serve") == (4, 0), "all four pods bound")
    workload.refresh_from_db()
    assert workload.pods_report() == [{"pod_set": "main", "current": 4, "min": 2, "max": 4}]

    # scaled back in to 2: the ReplicaSet controller deletes two, the workload follows
    _scale(real, "Deployment", "serve", 2)
    real.wait_for(lambda: counts(real, "serve") == (2, 0), "two pods left")
    cycle(gpu_cluster)
    workload.refresh_from_db()
    assert workload.pods_report()[0]["current"] == 2


def _reported_gated(real: RealCluster, name: str) -> bool:
    conditions = real.read("Pod", NAMESPACE, name)["status"].get("conditions") or []
    return any(
        c["type"] == "PodScheduled" and c.get("reason") == "SchedulingGated" for c in conditions
    )


def test_a_statefulsets_pods_are_gated_then_released_together(
    gpu_cluster: RealGpuCluster, cast: Cast, tidegate_webhook: str, priorities: Any
) -> None:
    real = gpu_cluster.real
    real.create_object(serving("StatefulSet", "infer", replicas=2, min_pods=2))
    real.wait_for(lambda: counts(real, "infer") == (0, 2), "both pods, gated")

    cycle(gpu_cluster)

    real.wait_for(lambda: counts(real, "infer") == (2, 0), "both pods released and bound")
    names = sorted(p["metadata"]["name"] for p in pods_of(real, "infer"))
    assert names == ["infer-0", "infer-1"]


def test_a_deployment_grows_past_its_guarantee_into_lent_gpus_under_its_namespaces_quota(
    gpu_cluster: RealGpuCluster, cast: Cast, tidegate_webhook: str, priorities: Any
) -> None:
    """speech owns 4 H100s and its namespace is held to them by `tidegate-gpu`; its
    Deployment asks for 6. Kubernetes refuses the ReplicaSet's 5th and 6th pods at
    creation (quota admission counts gated pods), Tidegate reads the 6 replicas wanted,
    lends 2 idle H100s, raises the limit by them, and the ReplicaSet's next attempt
    creates the pods, gated, to be released onto the lent GPUs."""
    real = gpu_cluster.real
    quota_sync(gpu_cluster.cluster, gpu_cluster.gateway, queue=queue_holdings(gpu_cluster.cluster))
    hard = real.read("ResourceQuota", NAMESPACE, QUOTA_NAME)["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == "4"

    real.create_object(serving("Deployment", "serve", replicas=6, min_pods=2))
    real.wait_for(lambda: counts(real, "serve") == (0, 4), "four pods, gated")
    refusal = real.wait_for(
        lambda: next(
            (
                e["message"]
                for e in real.objects("Event", NAMESPACE)
                if e["reason"] == "FailedCreate" and "exceeded quota" in e["message"]
            ),
            None,
        ),
        "the quota admission to refuse the ReplicaSet's fifth pod",
    )
    assert QUOTA_NAME in refusal

    def grown() -> bool:
        cycle(gpu_cluster)
        quota_sync(
            gpu_cluster.cluster, gpu_cluster.gateway, queue=queue_holdings(gpu_cluster.cluster)
        )
        return counts(real, "serve") == (6, 0)

    real.wait_for(grown, "six pods bound, two of them on lent GPUs")
    workload = Workload.objects.get(kind="PodGroup", namespace=NAMESPACE)
    assert workload.gpus == 6
    assert workload.borrowed_gpus == {"nvidia.com/gpu": 2}
    hard = real.read("ResourceQuota", NAMESPACE, QUOTA_NAME)["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == "6"
    for pod in pods_of(real, "serve"):
        assert pod["spec"]["nodeName"] in {"h100-1", "h100-2"}
