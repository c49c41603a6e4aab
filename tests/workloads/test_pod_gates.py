"""Serving work through pod scheduling gates, against the local API server: the
admission webhook gates the GPU pods a Deployment's ReplicaSet creates, the queue
releases them onto a flavour (gate removed, node selector added: the only changes
Kubernetes allows on a gated pod), an autoscaler scaling the Deployment out has its
extra pods grow into lent GPUs, and a reclaim takes them back by deleting pods (the
ReplicaSet creates them again, gated) while the minimum replicas keep running.

The ReplicaSet controller and the HPA are played by the test (``scale_to``): pods are
created and deleted through the API, with the webhook in the path, as they would be."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_bridge.integrations.pods import group_uid
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.jobs import jobs_sync
from scheduler_bridge.workloads.models import Workload
from tests.bridge.conftest import FakeCluster
from tests.conftest import Cast
from tests.kube_fake.schema import assert_valid_kubernetes
from tests.workloads.test_admission_webhook import webhook_url

pytestmark = pytest.mark.django_db
__all__ = ["webhook_url"]

NAMESPACE = "speech-train"
GATE = "tidegate.io/admission"


class ReplicaSet:
    """The ReplicaSet controller of Deployment ``serve``: keeps ``replicas`` pods."""

    def __init__(self, fake: FakeCluster, *, gpus: int = 1, min_pods: int = 2) -> None:
        self.fake, self.gpus, self.min_pods = fake, gpus, min_pods
        self.created = 0
        self.uid = "rs-serve-uid"

    def pods(self) -> list[dict[str, Any]]:
        return [
            p
            for p in self.fake.api.objects("Pod", NAMESPACE)
            if (p["metadata"].get("labels") or {}).get("app") == "serve"
        ]

    def scale_to(self, replicas: int) -> None:
        pods = self.pods()
        while len(pods) < replicas:
            self.created += 1
            self.fake.api.create_object(self._pod(f"serve-7d9f-{self.created:03d}"))
            pods = self.pods()
        # scale-in removes unscheduled (gated) pods first, then the newest
        # (ReplicaSet controller, getPodsToDelete / ActivePodsWithRanks)
        doomed = sorted(pods, key=lambda p: (not _gated(p), p["metadata"]["name"]), reverse=True)
        for pod in sorted(doomed[: len(pods) - replicas], key=lambda p: p["metadata"]["name"]):
            self.fake.api.delete_object("Pod", NAMESPACE, pod["metadata"]["name"])

    def heal(self, replicas: int) -> None:
        """Pods the queue deleted are created again (gated)."""
        self.scale_to(replicas)

    def _pod(self, name: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": {"app": "serve", "tidegate.io/queue": "speech"},
                "annotations": {"tidegate.io/min-pods": str(self.min_pods)},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": "serve-7d9f",
                        "uid": self.uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "containers": [
                    {
                        "name": "server",
                        "image": "vllm:1",
                        "resources": {"limits": {"nvidia.com/gpu": str(self.gpus)}},
                    }
                ]
            },
        }


def _gated(pod: dict[str, Any]) -> bool:
    return any(g["name"] == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def counts(rs: ReplicaSet) -> tuple[int, int]:
    """(released, gated) pods of the Deployment."""
    pods = rs.pods()
    gated = sum(1 for p in pods if _gated(p))
    return len(pods) - gated, gated


def cycle(fake: FakeCluster) -> Any:
    jobs_sync(fake.cluster, fake.gateway)
    return admission_cycle(fake.cluster, fake.gateway)


def test_an_autoscaled_deployment_scales_out_into_lent_gpus_and_back_to_its_minimum(
    fake_cluster: FakeCluster, cast: Cast, webhook_url: str
) -> None:
    from scheduler_bridge.quotas.models import Quota

    Quota.objects.filter(tenant=cast.team_a, flavour=fake_cluster.h100).update(guaranteed=8)
    fake_cluster.api.register_mutating_webhook(webhook_url, "tidegate.io/queue")
    rs = ReplicaSet(fake_cluster)
    rs.scale_to(2)
    first = rs.pods()[0]
    assert _gated(first)
    scheduled = {c["type"]: c for c in first["status"]["conditions"]}["PodScheduled"]
    assert (scheduled["status"], scheduled["reason"]) == ("False", "SchedulingGated")

    cycle(fake_cluster)  # the minimum replicas: admitted and released
    workload = Workload.objects.get(job_uid=group_uid(NAMESPACE, "serve-7d9f"))
    assert (workload.kind, workload.state, workload.gpus) == ("PodGroup", "running", 2)
    assert counts(rs) == (2, 0)
    released = rs.pods()[0]
    assert released["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert_valid_kubernetes(released)

    # the HPA asks for 6 replicas: 4 more pods, gated, grow into GPUs vision lends
    rs.scale_to(6)
    assert counts(rs) == (2, 4)
    cycle(fake_cluster)  # the pod set follows the new count
    cycle(fake_cluster)  # and grows
    workload.refresh_from_db()
    assert workload.pods_report() == [{"pod_set": "main", "current": 6, "min": 2, "max": 6}]
    assert counts(rs) == (6, 0)

    # vision reclaims 8 of its guarantee, 2 more than its organisation has free: two
    # elastic pods go, nothing is preempted
    from tests.integrations import objects

    fake_cluster.api.create_object(
        objects.batch_job("vision-train", "owner", "vision", parallelism=2, gpus=4)
    )
    outcome = cycle(fake_cluster)
    workload.refresh_from_db()
    assert outcome.preempted == [] and outcome.resized == [workload.pk]
    assert workload.pods_report()[0]["current"] == 4
    assert counts(rs) == (4, 0)  # 2 pods deleted, the newest
    rs.heal(6)  # the ReplicaSet creates them again: gated, they wait
    assert counts(rs) == (4, 2)
    cycle(fake_cluster)
    assert Workload.objects.get(job_name="owner").state == "running"
    assert counts(rs) == (4, 2)  # no lent GPUs left: they keep waiting

    # the HPA scales back in to 2: the gated pods go first, the workload follows
    rs.scale_to(2)
    cycle(fake_cluster)
    workload.refresh_from_db()
    assert workload.pods_report() == [{"pod_set": "main", "current": 2, "min": 2, "max": 2}]
    assert counts(rs) == (2, 0)

    # the Deployment is deleted: its workload ends
    rs.scale_to(0)
    jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    workload.refresh_from_db()
    assert (workload.state, workload.reason) == ("finished", "its pods are gone")


def test_gated_pods_are_only_ever_released_never_gated_again(
    fake_cluster: FakeCluster, cast: Cast, webhook_url: str
) -> None:
    """The local API server holds Tidegate to Kubernetes' rules for gated pods."""
    from kubernetes import client as k8s

    fake_cluster.api.register_mutating_webhook(webhook_url, "tidegate.io/queue")
    rs = ReplicaSet(fake_cluster)
    rs.scale_to(1)
    name = rs.pods()[0]["metadata"]["name"]
    core = k8s.CoreV1Api(fake_cluster.gateway._api)
    with pytest.raises(k8s.ApiException) as refused:  # a selector may only be added...
        core.patch_namespaced_pod(
            name,
            NAMESPACE,
            {
                "spec": {
                    "containers": [
                        {
                            "name": "server",
                            "image": "vllm:1",
                            "resources": {"limits": {"nvidia.com/gpu": "2"}},
                        }
                    ]
                }
            },
        )
    assert refused.value.status == 422
    cycle(fake_cluster)
    assert counts(rs) == (1, 0)
    with pytest.raises(k8s.ApiException) as regated:
        core.patch_namespaced_pod(name, NAMESPACE, {"spec": {"schedulingGates": [{"name": GATE}]}})
    assert regated.value.status == 422
    assert "only deletion is allowed" in (regated.value.body or "")


def test_a_gated_pod_without_a_gpu_request_is_refused_with_the_reason(
    fake_cluster: FakeCluster, cast: Cast
) -> None:
    fake_cluster.api.create_object(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "cpu-only",
                "namespace": NAMESPACE,
                "labels": {"tidegate.io/queue": "speech"},
            },
            "spec": {
                "schedulingGates": [{"name": GATE}],
                "containers": [{"name": "c", "image": "i"}],
            },
        }
    )
    result = jobs_sync(fake_cluster.cluster, fake_cluster.gateway)
    (refused,) = Workload.objects.filter(pk__in=result.rejected)
    assert "carries Tidegate's scheduling gate but requests no GPU" in refused.reason


def test_a_serving_group_with_a_grace_is_told_at_once_and_keeps_its_gpus_until_it_ends(
    fake_cluster: FakeCluster, cast: Cast, webhook_url: str
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from tests.integrations import objects

    fake_cluster.api.register_mutating_webhook(webhook_url, "tidegate.io/queue")
    rs = ReplicaSet(fake_cluster, gpus=4, min_pods=2)
    original = rs._pod

    def with_grace(name: str) -> dict[str, Any]:
        pod = original(name)
        pod["metadata"]["annotations"]["tidegate.io/preemption-grace-seconds"] = "120"
        return pod

    rs._pod = with_grace  # type: ignore[method-assign]
    rs.scale_to(2)
    cycle(fake_cluster)
    workload = Workload.objects.get(job_uid=group_uid(NAMESPACE, "serve-7d9f"))
    assert (workload.state, workload.gpus, counts(rs)) == ("running", 8, (2, 0))
    fake_cluster.api.create_object(objects.batch_job("vision-train", "owner", "vision", gpus=3))
    outcome = cycle(fake_cluster)
    workload.refresh_from_db()
    assert outcome.announced == [workload.pk] and workload.gpus == 8  # still held
    assert counts(rs) == (0, 0)  # both pods told to stop now...
    graces = [g for (kind, _, _), g in fake_cluster.api.delete_grace.items() if kind == "Pod"]
    assert len(graces) == 2 and all(g is not None and 110 <= g <= 120 for g in graces)
    rs.heal(2)  # ...and come back gated: they wait
    Workload.objects.filter(pk=workload.pk).update(preempt_at=timezone.now() - timedelta(seconds=1))
    cycle(fake_cluster)
    workload.refresh_from_db()
    assert (workload.state, workload.gpus, counts(rs)) == ("pending", 0, (0, 2))


def lws_pod(name: str, owner: str) -> dict[str, Any]:
    """A pod of LeaderWorkerSet ``llm`` as its StatefulSets create it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {
                "tidegate.io/queue": "speech",
                "leaderworkerset.sigs.k8s.io/name": "llm",
                "leaderworkerset.sigs.k8s.io/group-index": "0",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": owner,
                    "uid": f"uid-{owner}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm:1",
                    "resources": {"limits": {"nvidia.com/gpu": "2"}},
                }
            ]
        },
    }


def test_a_leaderworkerset_is_one_gang_admitted_together_and_preempted_together(
    fake_cluster: FakeCluster, cast: Cast, webhook_url: str
) -> None:
    from tests.integrations import objects

    fake_cluster.api.register_mutating_webhook(webhook_url, "tidegate.io/queue")
    # the leader StatefulSet's pod and the group's worker StatefulSet's three pods
    names = [("llm-0", "llm"), ("llm-0-1", "llm-0"), ("llm-0-2", "llm-0"), ("llm-0-3", "llm-0")]
    for name, owner in names:
        fake_cluster.api.create_object(lws_pod(name, owner))
    pods = fake_cluster.api.objects("Pod", NAMESPACE)
    assert all(_gated(p) for p in pods)
    cycle(fake_cluster)
    workload = Workload.objects.get(job_uid=group_uid(NAMESPACE, "llm"))
    assert (workload.name, workload.state, workload.gpus) == ("llm", "running", 8)
    assert not any(_gated(p) for p in fake_cluster.api.objects("Pod", NAMESPACE))
    # vision reclaims: the borrower's whole group stops, nothing of it runs on
    fake_cluster.api.create_object(objects.batch_job("vision-train", "owner", "vision", gpus=3))
    outcome = cycle(fake_cluster)
    assert outcome.preempted == [workload.pk]
    assert fake_cluster.api.objects("Pod", NAMESPACE) == []
    for name, owner in names:  # its StatefulSets create the pods again: gated, they wait
        fake_cluster.api.create_object(lws_pod(name, owner))
    cycle(fake_cluster)
    workload.refresh_from_db()
    assert workload.state == "pending"
    assert all(_gated(p) for p in fake_cluster.api.objects("Pod", NAMESPACE))
