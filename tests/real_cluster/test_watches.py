"""Tidegate's watched cache of a cluster against a real API server: it follows pods through
an API server restart (the watch breaks and resumes) and through etcd compacting the history
it would resume from (the server answers 410 Gone; the cache lists again)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler_bridge.gateways.kubernetes import KubernetesGateway, RetryPolicy
from scheduler_bridge.gateways.watch_cache import drop_shared_caches
from tests.kube_real.cluster import GATEWAY_USER, RUNS_UNTIL_FINISHED, RealCluster

_keys = itertools.count()
NAMESPACE = "watched"


def gpu_pod(name: str) -> dict[str, Any]:
    gpu = {"nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "annotations": dict(RUNS_UNTIL_FINISHED),
        },
        "spec": {
            "nodeName": "watched-1",
            "restartPolicy": "Never",
            "containers": [
                {"name": "c", "image": "i", "resources": {"requests": gpu, "limits": gpu}}
            ],
        },
    }


@pytest.fixture
def cached(real_cluster: RealCluster) -> Iterator[KubernetesGateway]:
    real_cluster.add_namespace(NAMESPACE)
    real_cluster.add_node("watched-1", allocatable={"nvidia.com/gpu": "8"})
    real_cluster.create_object(gpu_pod("train-0"))
    key = f"real-{next(_keys)}:watch"
    gateway = KubernetesGateway.from_kubeconfig(
        str(real_cluster.plane.gateway_kubeconfig),
        "tidegate",
        retry=RetryPolicy(attempts=10, base_delay=0.5, max_delay=2.0),
        cache_key=key,
        watch_timeout_s=30,
    )
    with gateway:
        yield gateway
    drop_shared_caches(key)


def pod_names(gateway: KubernetesGateway) -> list[str]:
    return sorted(p.name for p in gateway.list_gpu_pods() if p.namespace == NAMESPACE)


def pod_lists(real: RealCluster) -> int:
    return sum(
        1
        for e in real.audit_events(GATEWAY_USER)
        if e.get("verb") == "list" and e.get("objectRef", {}).get("resource") == "pods"
    )


def test_the_cache_follows_pods_through_an_api_server_restart_and_a_compaction(
    real_cluster: RealCluster, cached: KubernetesGateway
) -> None:
    real = real_cluster
    assert pod_names(cached) == ["train-0"]
    real.create_object(gpu_pod("train-1"))
    real.wait_for(lambda: pod_names(cached) == ["train-0", "train-1"], "the watch to see train-1")
    lists = pod_lists(real)

    # the API server restarts: the watch breaks, resumes, and misses nothing after
    real.plane.restart_apiserver()
    real.create_object(gpu_pod("train-2"))
    real.delete_pod_now(NAMESPACE, "train-0")
    real.wait_for(
        lambda: pod_names(cached) == ["train-1", "train-2"],
        "the cache to follow pods after the restart",
        60,
    )

    # etcd compacts the history the cache would resume from, and the server restarts: the
    # resume is 410 Gone, and the cache lists again
    before = pod_lists(real)
    real.plane.components["kube-apiserver"].stop()
    real.plane.compact_etcd()
    real.plane.restart_apiserver()
    real.create_object(gpu_pod("train-3"))
    real.wait_for(
        lambda: pod_names(cached) == ["train-1", "train-2", "train-3"],
        "the cache to follow pods after the compaction",
        60,
    )
    assert pod_lists(real) > before >= lists


def test_a_paged_lists_continue_token_survives_an_etcd_compaction(
    real_cluster: RealCluster,
) -> None:
    """Kubernetes 1.37 pages a list from its watch cache's snapshot, so compacting etcd
    past the first page's revision changes nothing: the next page is the snapshot's,
    without the object created since. (Servers paging straight from etcd answer 410
    Gone instead; the gateway's relist on that answer is tested with the local server's
    `forget_history`.)"""
    real = real_cluster
    real.add_namespace(NAMESPACE)
    for index in range(5):
        real.create_object(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"page-{index}", "namespace": NAMESPACE},
                "data": {"k": "v"},
            }
        )
    path = real.path("ConfigMap", NAMESPACE)
    first = real.request("GET", path, params={"limit": 2}).json()
    token = first["metadata"]["continue"]
    real.create_object(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "page-after", "namespace": NAMESPACE},
            "data": {"k": "v"},
        }
    )
    compacted = real.plane.compact_etcd()
    assert compacted > int(first["metadata"]["resourceVersion"])

    rest = real.request("GET", path, params={"limit": 10, "continue": token})

    assert rest.status_code == 200, rest.text
    names = [c["metadata"]["name"] for c in first["items"] + rest.json()["items"]]
    # (the namespace's own kube-root-ca.crt is listed first)
    assert names == ["kube-root-ca.crt"] + [f"page-{index}" for index in range(5)]
    assert rest.json()["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
