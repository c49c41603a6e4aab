"""Quota enforcement on the real control plane: Tidegate's `tidegate-gpu` ResourceQuota is
written by server-side apply, the real quota admission refuses a pod created outside the
queue beyond it (403), a hand edit is repaired, and unbinding the namespace removes it."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_bridge.quotas.sync import quota_sync
from scheduler_bridge.workloads.selectors import queue_holdings
from tenants.models import AuditEvent, NamespaceBinding
from tenants.services import binding_delete
from tests.conftest import Cast
from tests.kube_real.cluster import RUNS_UNTIL_FINISHED

from .conftest import RealGpuCluster

pytestmark = pytest.mark.django_db
QUOTA = "tidegate-gpu"


def _pod(name: str, gpus: int) -> dict[str, Any]:
    amounts = {"nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "vision-train",
            "annotations": dict(RUNS_UNTIL_FINISHED),
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "c",
                    "image": "registry.example/train:1",
                    "resources": {"requests": amounts, "limits": amounts},
                }
            ],
        },
    }


def _limit(real: Any, namespace: str) -> str:
    limit: str = real.read("ResourceQuota", namespace, QUOTA)["spec"]["hard"][
        "requests.nvidia.com/gpu"
    ]
    return limit


def test_the_quota_is_applied_enforced_repaired_and_removed(
    gpu_cluster: RealGpuCluster, cast: Cast
) -> None:
    real = gpu_cluster.real
    quota_sync(gpu_cluster.cluster, gpu_cluster.gateway, queue=queue_holdings(gpu_cluster.cluster))

    quota = real.read("ResourceQuota", "vision-train", QUOTA)
    managers = {m["manager"]: m["operation"] for m in quota["metadata"]["managedFields"]}
    assert managers.get("tidegate") == "Apply"  # server-side apply, Tidegate's field manager
    hard = quota["spec"]["hard"]
    limit = int(hard["requests.nvidia.com/gpu"])
    # vision's 8 H100s split over its two namespaces; every GPU resource of the cluster named
    assert limit + int(_limit(real, "vision-dev")) == 8
    assert "requests.nvidia.com/mig-1g.5gb" in hard
    real.wait_for(
        lambda: real.read("ResourceQuota", "vision-train", QUOTA).get("status", {}).get("hard"),
        "the quota controller to publish the quota's status",
    )

    # a pod created outside the queue within the limit runs; one beyond it is refused
    real.create_object(_pod("inside", limit))
    answer = real.request("POST", real.path("Pod", "vision-train"), json=_pod("outside", 1))
    assert answer.status_code == 403
    message = answer.json()["message"]
    assert "exceeded quota: tidegate-gpu" in message and "requests.nvidia.com/gpu" in message

    # a hand edit is restored and audited
    real.edit_object(
        "ResourceQuota",
        "vision-train",
        QUOTA,
        lambda q: q["spec"]["hard"].update({"requests.nvidia.com/gpu": "99"}),
    )
    repaired = quota_sync(
        gpu_cluster.cluster, gpu_cluster.gateway, queue=queue_holdings(gpu_cluster.cluster)
    )
    assert repaired.drift_repaired == 1
    # restored to the split of vision's 8: the pod inside uses `limit`, the rest is shared
    train = int(_limit(real, "vision-train"))
    assert train != 99 and train >= limit and train + int(_limit(real, "vision-dev")) == 8
    assert AuditEvent.objects.filter(message__contains="restored ResourceQuota").exists()

    # unbinding the namespace removes Tidegate's quota from it
    binding = NamespaceBinding.objects.get(namespace="vision-train")
    binding_delete(actor=cast.platform_admin, binding=binding)
    quota_sync(gpu_cluster.cluster, gpu_cluster.gateway, queue=queue_holdings(gpu_cluster.cluster))
    assert real.get_object("ResourceQuota", "vision-train", QUOTA) is None
    assert real.get_object("ResourceQuota", "vision-dev", QUOTA) is not None
