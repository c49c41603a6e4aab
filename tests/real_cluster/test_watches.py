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
