"""The watched cache of a cluster: list once, then follow a watch (bookmarks, resuming,
listing again after 410 Gone), keeping GPU pods, nodes and Tidegate's quotas only; and
the local API server's watch as the official client's own Watch reads it."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch

from scheduler_bridge.gateways.kubernetes import KubernetesGateway
from scheduler_bridge.gateways.kubernetes_cache import QUOTA_SELECTOR, quota
from scheduler_bridge.gateways.watch_cache import drop_shared_caches
from tests.gateways.conftest import kubernetes_gateway
from tests.kube_fake import FakeKubeApi

GPU = {"nvidia.com/gpu": 1}
_keys = itertools.count()


def eventually(check: Callable[[], Any], timeout_s: float = 5.0) -> Any:
    """``check()`` once it is truthy; fails after ``timeout_s`` (watches are async)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            assert result, f"not within {timeout_s}s"
            return result
        time.sleep(0.02)


@pytest.fixture
def cached(kube_api: FakeKubeApi, tmp_path: Path) -> Iterator[KubernetesGateway]:
    """A gateway reading pods, nodes and quotas from a watched cache of its own."""
    kube_api.add_namespace("vision-train")
    kube_api.add_node("h100-1", allocatable={"cpu": "64", "nvidia.com/gpu": "8"})
    kube_api.add_pod("vision-train", "train-0", requests=GPU, node_name="h100-1")
    key = f"test-{next(_keys)}:watch"
    gateway = kubernetes_gateway(kube_api, tmp_path, cache_key=key, watch_timeout_s=30)
    with gateway:
        yield gateway
    drop_shared_caches(key)


def pod_names(gateway: KubernetesGateway) -> list[str]:
    return [p.name for p in gateway.list_gpu_pods()]


def test_pods_are_listed_once_then_followed_by_one_watch(
    kube_api: FakeKubeApi, cached: KubernetesGateway
) -> None:
    assert pod_names(cached) == ["train-0"]
    eventually(lambda: kube_api.open_watches == 1)
    kube_api.reset_counts()
    kube_api.add_pod("vision-train", "train-1", requests=GPU, node_name="h100-1")
    eventually(lambda: pod_names(cached) == ["train-0", "train-1"])
    kube_api.edit_object(
        "Pod", "vision-train", "train-0", lambda p: p["status"].update(phase="Succeeded")
    )
    eventually(lambda: [p.phase for p in cached.list_gpu_pods()] == ["Succeeded", "Running"])
    kube_api.delete_object("Pod", "vision-train", "train-1")
    eventually(lambda: pod_names(cached) == ["train-0"])
    for _ in range(5):
        cached.list_gpu_pods()
    assert kube_api.count() == 0  # every read above came from the watch already open


def test_pods_without_a_gpu_are_not_kept(kube_api: FakeKubeApi, cached: KubernetesGateway) -> None:
    for i in range(20):
        kube_api.add_pod("vision-train", f"web-{i}", requests={"cpu": "1"}, node_name="h100-1")
    kube_api.add_pod("vision-train", "train-1", requests=GPU, node_name="h100-1")
    eventually(lambda: pod_names(cached) == ["train-0", "train-1"])
    assert cached.cache is not None
    assert len(cached.cache["pods"].values()) == 2


def test_a_quiet_watch_is_moved_on_by_bookmarks_and_resumes_without_listing(
    kube_api: FakeKubeApi, cached: KubernetesGateway
) -> None:
    kube_api.bookmark_interval_s = 0.1
    cached.list_gpu_pods()
    assert cached.cache is not None
    health = cached.cache["pods"].health
    # Changes elsewhere move the store on; the pod watch hears of it only by bookmarks.
    for i in range(5):
        kube_api.add_namespace(f"quiet-{i}")
    eventually(lambda: health.bookmarks >= 2)
    kube_api.drop_watches(lambda api: api.store.forget_history())
    kube_api.add_pod("vision-train", "train-1", requests=GPU, node_name="h100-1")
    eventually(lambda: pod_names(cached) == ["train-0", "train-1"])
    assert (health.lists, health.expired) == (1, 0)
    assert health.watches >= 2


def test_a_watch_too_old_for_the_servers_history_lists_again(
    kube_api: FakeKubeApi, cached: KubernetesGateway
) -> None:
    assert pod_names(cached) == ["train-0"]

    def change_and_compact(api: FakeKubeApi) -> None:
        api.add_pod("vision-train", "train-1", requests=GPU, node_name="h100-1")
        api.delete_object("Pod", "vision-train", "train-0")
        api.store.forget_history()

    kube_api.drop_watches(change_and_compact)
    eventually(lambda: pod_names(cached) == ["train-1"])
    assert cached.cache is not None
    health = cached.cache["pods"].health
    assert (health.lists, health.expired) == (2, 1)


def test_a_dropped_watch_resumes_from_where_it_was_and_misses_nothing(
    kube_api: FakeKubeApi, cached: KubernetesGateway
) -> None:
    assert pod_names(cached) == ["train-0"]
    kube_api.drop_watches(
        lambda api: api.add_pod("vision-train", "train-1", requests=GPU, node_name="h100-1")
    )
    eventually(lambda: pod_names(cached) == ["train-0", "train-1"])
    assert cached.cache is not None
    assert cached.cache["pods"].health.lists == 1


def test_nodes_come_from_the_cache_and_tidegates_label_writes_are_read_back_at_once(
    kube_api: FakeKubeApi, cached: KubernetesGateway
) -> None:
    assert [n.name for n in cached.list_nodes()] == ["h100-1"]
    kube_api.delay(0.5, r"^/api/v1/nodes$", method="GET")  # the watch's events come late
    assert cached.set_node_labels("h100-1", {"nvidia.com/mig.config": "all-1g.10gb"})
    assert cached.list_nodes()[0].labels["nvidia.com/mig.config"] == "all-1g.10gb"


def test_quota_sync_against_the_cache_sends_nothing_when_nothing_changed(
    kube_api: FakeKubeApi, cached: KubernetesGateway
) -> None:
    labels = {"app.kubernetes.io/managed-by": "tidegate", "tidegate.io/tenant": "vision"}
    hard = {"requests.nvidia.com/gpu": "8"}
    assert cached.apply_resource_quota("vision-train", "tidegate-gpu", hard, labels).created
    # read back from the cache at once (Tidegate's own write), before its watch event
    assert cached.list_resource_quotas(QUOTA_SELECTOR) == [("vision-train", "tidegate-gpu")]
    eventually(lambda: kube_api.open_watches >= 1)
    kube_api.reset_counts()
    again = cached.apply_resource_quota("vision-train", "tidegate-gpu", hard, labels)
    assert again.unchanged
    assert kube_api.count() == 0


def test_a_quota_edited_by_hand_is_repaired_from_what_the_watch_saw(
    kube_api: FakeKubeApi, cached: KubernetesGateway
) -> None:
    labels = {"app.kubernetes.io/managed-by": "tidegate", "tidegate.io/tenant": "vision"}
    hard = {"requests.nvidia.com/gpu": "8"}
    cached.apply_resource_quota("vision-train", "tidegate-gpu", hard, labels)
    kube_api.edit_object(
        "ResourceQuota",
        "vision-train",
        "tidegate-gpu",
        lambda q: q["spec"]["hard"].update({"requests.nvidia.com/gpu": "80"}),
    )
    collection = cached.cache["resourcequotas"] if cached.cache else None
    assert collection is not None
    eventually(
        lambda: (
            (collection.get("vision-train/tidegate-gpu") or {})["spec"]["hard"]
            == {"requests.nvidia.com/gpu": "80"}
        )
    )
    repaired = cached.apply_resource_quota(
        "vision-train", "tidegate-gpu", hard, labels, expect_existing=True
    )
    assert repaired.updated and repaired.drift_repaired
    stored = kube_api.get_object("ResourceQuota", "vision-train", "tidegate-gpu")
    assert stored is not None and stored["spec"]["hard"] == hard


def test_a_quota_that_loses_tidegates_label_leaves_the_cache(
    kube_api: FakeKubeApi, cached: KubernetesGateway
) -> None:
    labels = {"app.kubernetes.io/managed-by": "tidegate", "tidegate.io/tenant": "vision"}
    cached.apply_resource_quota(
        "vision-train", "tidegate-gpu", {"requests.nvidia.com/gpu": "8"}, labels
    )
    kube_api.edit_object(
        "ResourceQuota",
        "vision-train",
        "tidegate-gpu",
        lambda q: q["metadata"]["labels"].pop("app.kubernetes.io/managed-by"),
    )
    # the label-selected watch sees an object that stops matching as DELETED
    eventually(lambda: cached.list_resource_quotas(QUOTA_SELECTOR) == [])


def test_reads_list_directly_while_the_cache_is_out_of_touch(
    kube_api: FakeKubeApi, cached: KubernetesGateway
) -> None:
    cached.list_gpu_pods()
    assert cached.cache is not None
    collection = cached.cache["pods"]
    collection.stale_after_s = 0.0  # as if the server had not answered for too long
    kube_api.reset_counts()
    time.sleep(0.01)
    assert pod_names(cached) == ["train-0"]
    assert kube_api.count("list") == 1


def test_the_cached_quota_keeps_only_what_an_apply_compares() -> None:
    live = {
        "metadata": {
            "name": "tidegate-gpu",
            "namespace": "vision-train",
            "labels": {"app.kubernetes.io/managed-by": "tidegate"},
            "annotations": {"tidegate.io/last-applied": "{}", "big": "x" * 10_000},
            "resourceVersion": "7",
            "managedFields": [{"manager": "tidegate"}],
        },
        "spec": {"hard": {"requests.nvidia.com/gpu": "8"}},
        "status": {"used": {"requests.nvidia.com/gpu": "3"}},
    }
    kept = quota(live)
    assert kept["metadata"]["annotations"] == {"tidegate.io/last-applied": "{}"}
    assert "status" not in kept and "managedFields" not in kept["metadata"]


# --- the local API server's watch, read by the official client's Watch -------------


def _core(api: FakeKubeApi, tmp_path: Path) -> k8s.CoreV1Api:
    """The official client's CoreV1Api, connected to ``api`` as the gateway would be."""
    return k8s.CoreV1Api(kubernetes_gateway(api, tmp_path)._api)


def _version(core: k8s.CoreV1Api, namespace: str) -> str:
    listed = core.list_namespaced_pod(namespace)
    assert listed.metadata is not None and listed.metadata.resource_version
    return listed.metadata.resource_version


class WatchedServer:
    """The fake API server or the real control plane, seen through the official client,
    with the few writes the watch tests make (pods bound to a node nobody runs, so no
    controller writes in between; deleted at once, as with ``--force``)."""

    def __init__(
        self,
        core: k8s.CoreV1Api,
        add_pod: Callable[[str, str], None],
        relabel: Callable[[str, str, dict[str, str | None]], None],
    ) -> None:
        self.core, self.add_pod, self.relabel = core, add_pod, relabel

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        self.core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": phase}})

    def delete(self, namespace: str, name: str) -> None:
        self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def _pod_body(namespace: str, name: str) -> dict[str, Any]:
    gpu = {"nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {}},
        "spec": {
            "nodeName": "nowhere",
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": gpu, "limits": gpu}}
            ],
        },
    }


@pytest.fixture(params=["fake", "real"])
def watched(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WatchedServer]:
    if request.param == "fake":
        api: FakeKubeApi = request.getfixturevalue("kube_api")
        api.add_namespace("a")
        core = _core(api, tmp_path)
    else:
        real = request.getfixturevalue("real_cluster")
        real.add_namespace("a")
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(
            str(real.plane.admin_kubeconfig), "admin", client_configuration=configuration
        )
        core = k8s.CoreV1Api(k8s.ApiClient(configuration))

    def add_pod(namespace: str, name: str) -> None:
        core.create_namespaced_pod(namespace, _pod_body(namespace, name))  # type: ignore[arg-type]

    def relabel(namespace: str, name: str, labels: dict[str, str | None]) -> None:
        core.patch_namespaced_pod(name, namespace, {"metadata": {"labels": labels}})

    yield WatchedServer(core, add_pod, relabel)


def test_the_official_watch_reads_events_from_a_resource_version(watched: WatchedServer) -> None:
    version = _version(watched.core, "a")
    watched.add_pod("a", "p1")
    watched.set_phase("a", "p1", "Running")
    watched.delete("a", "p1")
    events = list(
        k8s_watch.Watch().stream(
            watched.core.list_namespaced_pod, "a", resource_version=version, timeout_seconds=1
        )
    )
    # a pod bound to a node is marked for deletion first, even without a grace period
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "p1"),
        ("MODIFIED", "p1"),
        ("MODIFIED", "p1"),
        ("DELETED", "p1"),
    ]
    assert events[2]["object"].metadata.deletion_timestamp is not None


def test_a_watch_without_a_resource_version_starts_with_the_current_state(
    watched: WatchedServer,
) -> None:
    watched.add_pod("a", "p1")
    events = list(
        k8s_watch.Watch().stream(watched.core.list_namespaced_pod, "a", timeout_seconds=1)
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "p1")]


def test_a_label_selected_watch_sees_objects_start_and_stop_matching(
    watched: WatchedServer,
) -> None:
    watched.add_pod("a", "p1")
    version = _version(watched.core, "a")
    watched.relabel("a", "p1", {"q": "1"})
    watched.relabel("a", "p1", {"q": None})
    events = list(
        k8s_watch.Watch().stream(
            watched.core.list_namespaced_pod,
            "a",
            label_selector="q=1",
            resource_version=version,
            timeout_seconds=1,
        )
    )
    assert [e["type"] for e in events] == ["ADDED", "DELETED"]


def test_a_watch_from_before_the_history_is_410_gone(kube_api: FakeKubeApi, tmp_path: Path) -> None:
    kube_api.add_namespace("a")
    core = _core(kube_api, tmp_path)
    version = _version(core, "a")
    kube_api.add_pod("a", "p1", requests=GPU)
    kube_api.store.forget_history()
    with pytest.raises(k8s.ApiException) as gone:
        list(
            k8s_watch.Watch().stream(
                core.list_namespaced_pod, "a", resource_version=version, timeout_seconds=1
            )
        )
    assert gone.value.status == 410


def test_bookmarks_carry_only_a_resource_version(kube_api: FakeKubeApi, tmp_path: Path) -> None:
    kube_api.add_namespace("a")
    kube_api.bookmark_interval_s = 0.1
    core = _core(kube_api, tmp_path)
    version = _version(core, "a")
    kube_api.add_namespace("b")
    response = core.list_namespaced_pod(
        "a",
        watch=True,
        resource_version=version,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
        _preload_content=False,
    )
    bookmarks = [json.loads(line) for line in k8s_watch.watch.iter_resp_lines(response)]
    assert bookmarks and all(b["type"] == "BOOKMARK" for b in bookmarks)
    assert bookmarks[-1]["object"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(kube_api.store.version)},
    }


def test_claims_come_from_the_cache_with_their_requests_and_allocation(
    kube_api: FakeKubeApi, cached: KubernetesGateway
) -> None:
    """What a shared claim asks for (its requests) and what a pod's claim holds (its
    allocation) are both read from the watched copy."""
    from tests.dra.devices import H100, gpu, node_slice

    kube_api.create_object(node_slice("h100-1", [gpu(0, H100, "80Gi")]))
    requests = [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "team-gpu", "namespace": "vision-train"},
        "spec": {"devices": {"requests": requests}},
    }
    kube_api.create_object(claim)
    assert cached.list_resource_slices() is not None
    eventually(lambda: bool(cached.list_resource_claims()))
    (seen,) = cached.list_resource_claims() or []
    assert seen["spec"]["devices"]["requests"] == requests
    assert seen["metadata"]["name"] == "team-gpu"
