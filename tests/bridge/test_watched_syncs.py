"""Inventory and quota sync as the workers run them: through the tasks, reading the
cluster's watched cache (TIDEGATE["WATCH_CACHE"] on), against the local API server."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from scheduler_bridge.gateways.watch_cache import drop_shared_caches
from scheduler_bridge.inventory.connection import cache_key, gateway_for_cluster
from scheduler_bridge.inventory.models import Node
from scheduler_bridge.tasks import inventory_sync, quota_sync
from tests.bridge.conftest import FakeCluster

pytestmark = pytest.mark.django_db


def eventually(check: Callable[[], Any], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s}s"
        time.sleep(0.02)


@pytest.fixture
def watched(settings: Any, fake_cluster: FakeCluster) -> Iterator[FakeCluster]:
    settings.TIDEGATE = {**settings.TIDEGATE, "WATCH_CACHE": True}
    yield fake_cluster
    drop_shared_caches(f"cluster-{fake_cluster.cluster.pk}:")


def _pods_seen(watched: FakeCluster) -> set[str]:
    with gateway_for_cluster(watched.cluster) as gateway:
        return {p.name for p in gateway.list_gpu_pods()}


def test_steady_syncs_read_the_watch_and_write_only_what_changed(watched: FakeCluster) -> None:
    api, cluster = watched.api, watched.cluster
    inventory_sync(cluster.pk)
    assert quota_sync(cluster.pk) == {
        "namespaces": 4,
        "writes": 4,
        "drift_repaired": 0,
        "missing": 0,
    }
    eventually(lambda: api.open_watches == 4)  # pods, nodes, Tidegate's quotas, DRA slices

    api.reset_counts()
    inventory_sync(cluster.pk)
    assert (quota_sync(cluster.pk) or {}).get("writes") == 0
    assert api.count() == 0  # nothing listed, nothing read, nothing written

    # vision holds 6 GPUs over two namespaces (3 and 3); a pod inside that changes no quota
    api.add_pod("vision-dev", "notebook", requests={"nvidia.com/gpu": 1}, node_name="h100-1")
    eventually(lambda: "notebook" in _pods_seen(watched))
    api.reset_counts()
    inventory_sync(cluster.pk)
    assert Node.objects.get(name="h100-1").busy == {"nvidia.com/gpu": 1}
    assert (quota_sync(cluster.pk) or {}).get("writes") == 0
    assert api.count() == 0

    # vision-dev uses all 3 of its GPUs now: vision's two namespaces share the 3 left
    # anew (dev 3 + 2, train 1); no other tenant's quota moves
    for name in ("notebook-2", "notebook-3"):
        api.add_pod("vision-dev", name, requests={"nvidia.com/gpu": 1}, node_name="h100-1")
    eventually(lambda: "notebook-3" in _pods_seen(watched))
    api.reset_counts()
    inventory_sync(cluster.pk)
    assert (quota_sync(cluster.pk) or {}).get("writes") == 2
    assert api.count() == 2
    limits = {
        ns: api.get_object("ResourceQuota", ns, "tidegate-gpu")["spec"]["hard"]  # type: ignore[index]
        for ns in ("vision-dev", "vision-train")
    }
    assert {ns: h["requests.nvidia.com/gpu"] for ns, h in limits.items()} == {
        "vision-dev": "5",
        "vision-train": "1",
    }


def test_changed_connection_settings_start_a_new_cache_and_stop_the_old(
    watched: FakeCluster,
) -> None:
    cluster = watched.cluster
    with gateway_for_cluster(cluster) as first:
        first.list_gpu_pods()
        old = first.cache  # type: ignore[attr-defined]
    key = cache_key(cluster)
    cluster.topology_label = "example.com/rack"  # not a connection setting
    assert cache_key(cluster) == key
    cluster.kube_context = ""  # the kubeconfig's current context from now on
    assert cache_key(cluster) != key
    with gateway_for_cluster(cluster) as second:
        assert {p.name for p in second.list_gpu_pods()} == set()
        assert second.cache is not old  # type: ignore[attr-defined]
    assert all(c._stopping.is_set() for c in old.collections.values())
