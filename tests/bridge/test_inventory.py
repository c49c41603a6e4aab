"""Inventory sync through the real Kubernetes client: nodes, GPUs, MIG and flavours."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler_bridge.gateways import GatewayConfigError
from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.inventory.services import inventory_sync
from scheduler_bridge.tasks import inventory_sync as inventory_sync_task
from scheduler_bridge.workloads.selectors import admitted_jobs
from tests.bridge.conftest import FakeCluster, Synced, fast_gateway, seed_gpu_nodes
from tests.kube_fake.server import FakeKubeApi

pytestmark = pytest.mark.django_db


def test_nodes_and_flavours_come_from_labels_and_allocatable(synced: Synced) -> None:
    flavours = {
        f.name: (f.resource_name, f.capacity, str(f.gpu_equivalent))
        for f in Flavour.objects.filter(cluster=synced.cluster)
    }
    assert flavours == {
        "h100-80gb": ("nvidia.com/gpu", 16, "1.0000"),
        "a100-sxm4-40gb-mig-1g.5gb": ("nvidia.com/mig-1g.5gb", 56, "0.1429"),
    }
    a100 = Node.objects.get(name="a100-1")
    assert (a100.product, a100.gpu_count, a100.mig_strategy) == ("A100-SXM4-40GB", 8, "mixed")
    assert a100.gpu_layouts[0] == [["1g.5gb", i] for i in range(7)]
    h100 = Node.objects.get(name="h100-1")
    assert h100.topology_domain == "fabric.1" and h100.gpu_layouts == [None] * 8
    assert synced.cluster.status == "ok"


def test_running_pods_mark_what_is_busy(synced: Synced) -> None:
    synced.run_pod("vision-train", "trainer", "h100-1", gpus=4)
    synced.run_pod("vision-train", "done", "h100-2", gpus=4)
    synced.end_pod("vision-train", "done")
    inventory_sync(synced.cluster, synced.gateway, admitted=admitted_jobs)
    assert Node.objects.get(name="h100-1").busy == {"nvidia.com/gpu": 4}
    assert Node.objects.get(name="h100-2").busy == {}


def test_a_node_that_disappears_is_marked_absent_and_capacity_drops(synced: Synced) -> None:
    synced.api.delete_object("Node", None, "h100-2")
    inventory_sync(synced.cluster, synced.gateway, admitted=admitted_jobs)
    assert not Node.objects.get(name="h100-2").present
    assert Flavour.objects.get(name="h100-80gb").capacity == 8


def test_an_unknown_product_is_still_counted_as_whole_gpus(
    db: None, kube_api: FakeKubeApi, kubeconfig: tuple[Path, str]
) -> None:
    kube_api.add_node(
        "mystery",
        labels={"nvidia.com/gpu.product": "NVIDIA-Future-X9", "nvidia.com/gpu.count": "4"},
        allocatable={"cpu": "8", "nvidia.com/gpu": "4"},
    )
    cluster = Cluster.objects.create(name="c", kubeconfig_path=str(kubeconfig[0]))
    inventory_sync(cluster, fast_gateway(*kubeconfig), admitted=admitted_jobs)
    flavour = Flavour.objects.get(cluster=cluster)
    assert (flavour.name, flavour.capacity) == ("nvidia-future-x9", 4)


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"kubeconfig_path": "/nonexistent/kubeconfig"}, "/nonexistent/kubeconfig"),
        ({"kube_context": "no-such-context"}, "no-such-context"),
    ],
)
def test_a_broken_kubeconfig_marks_its_cluster_and_spares_the_others(
    db: None,
    kube_api: FakeKubeApi,
    kubeconfig: tuple[Path, str],
    settings: dict[str, str],
    words: str,
) -> None:
    seed_gpu_nodes(kube_api)
    path, context = kubeconfig
    good = Cluster.objects.create(name="good", kubeconfig_path=str(path), kube_context=context)
    broken = Cluster.objects.create(
        name="broken", **({"kubeconfig_path": str(path), "kube_context": context} | settings)
    )
    with pytest.raises(GatewayConfigError):
        inventory_sync(broken, admitted=admitted_jobs)
    assert inventory_sync_task(broken.pk) is None  # the task records it and does not crash
    assert inventory_sync_task(good.pk) == {"nodes": 3, "gpus": 24, "flavours": 2}
    broken.refresh_from_db()
    good.refresh_from_db()
    assert broken.status == "error" and words in broken.status_message
    assert good.status == "ok"


def test_a_steady_sync_writes_only_the_node_whose_state_changed(
    synced: Synced,
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    synced.run_pod("vision-train", "trainer", "h100-2", gpus=2)
    table = Node._meta.db_table
    with CaptureQueriesContext(connection) as queries:
        inventory_sync(synced.cluster, synced.gateway, admitted=admitted_jobs)
    updates = [q["sql"] for q in queries if q["sql"].startswith(f'UPDATE "{table}"')]
    # one statement, for the node that got busy; the others are not rewritten
    assert len(updates) == 1, updates
    assert '"busy"' in updates[0] and "last_seen_at" not in updates[0]
    assert Node.objects.get(name="h100-2").busy == {"nvidia.com/gpu": 2}


def test_a_node_that_leaves_keeps_the_time_it_was_last_seen(synced: Synced) -> None:
    cluster = Cluster.objects.get(pk=synced.cluster.pk)
    seen_at = cluster.last_synced_at
    assert Node.objects.get(name="h100-2").last_seen_for_api() == seen_at  # present: last sync
    synced.api.delete_object("Node", None, "h100-2")
    inventory_sync(cluster, synced.gateway, admitted=admitted_jobs)
    gone = Node.objects.select_related("cluster").get(name="h100-2")
    assert not gone.present and gone.last_seen_for_api() == seen_at
    later = Cluster.objects.get(pk=cluster.pk).last_synced_at
    assert seen_at is not None and later is not None and later > seen_at


@pytest.mark.parametrize("count", [3, 520])
def test_changed_nodes_are_written_exactly_however_many_change(
    fake_cluster: FakeCluster, count: int
) -> None:
    """A few changed nodes are bound as parameters, many go through COPY: either way
    every node gets its own busy GPUs (JSON), flags and strings."""
    for i in range(count):
        fake_cluster.api.add_node(
            f"extra-{i:03d}",
            labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "team": f"t{i}"},
            allocatable={"cpu": "64", "nvidia.com/gpu": "8"},
            unschedulable=bool(i % 2),
        )
    inventory_sync(fake_cluster.cluster, fake_cluster.gateway, admitted=admitted_jobs)
    for i in range(count):
        fake_cluster.api.add_pod(
            "vision-train",
            f"p-{i}",
            requests={"nvidia.com/gpu": i % 8 + 1},
            node_name=f"extra-{i:03d}",
        )
        fake_cluster.api.edit_object(
            "Node",
            None,
            f"extra-{i:03d}",
            lambda n: n["metadata"]["labels"].update(team="it's x\\y"),
        )
    inventory_sync(fake_cluster.cluster, fake_cluster.gateway, admitted=admitted_jobs)
    nodes = {n.name: n for n in Node.objects.filter(name__startswith="extra-")}
    for i in range(count):
        node = nodes[f"extra-{i:03d}"]
        assert node.busy == {"nvidia.com/gpu": i % 8 + 1}
        assert node.labels["team"] == "it's x\\y"
        assert node.unschedulable is bool(i % 2) and node.product == "H100-80GB"


def test_a_node_row_changed_behind_inventorys_back_is_read_again_and_repaired(
    fake_cluster: FakeCluster,
) -> None:
    """Inventory remembers the rows it read or wrote; a write by anyone else moves the
    row's version (xmin, ctid), so the next sync reads that row again and puts the
    cluster's truth back."""
    cluster, gateway = fake_cluster.cluster, fake_cluster.gateway
    inventory_sync(cluster, gateway, admitted=admitted_jobs)
    Node.objects.filter(name="h100-2").update(
        labels={"nvidia.com/gpu.product": "edited"}, busy={"nvidia.com/gpu": 7}
    )
    inventory_sync(cluster, gateway, admitted=admitted_jobs)
    node = Node.objects.get(name="h100-2")
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node.busy == {}
    # and a row inventory wrote itself is remembered as written: nothing to write again
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        inventory_sync(cluster, gateway, admitted=admitted_jobs)
    table = Node._meta.db_table
    assert not [q for q in queries if q["sql"].startswith(f'UPDATE "{table}" AS t')]


@pytest.mark.parametrize(
    ("labels", "sharing"),
    [
        (
            {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"},
            "time-slicing",
        ),
        ({"nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "2"}, "mps"),
        ({"nvidia.com/gpu.product": "NVIDIA-L4-SHARED"}, "time-slicing"),  # older plugins
        ({"gpu": "on"}, "hami"),
        ({"nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.replicas": "1"}, ""),
    ],
)
def test_a_new_flavour_takes_the_sharing_its_nodes_labels_say(
    db: None, kube_api: FakeKubeApi, kubeconfig: tuple[Path, str], labels: dict, sharing: str
) -> None:
    kube_api.add_node(
        "l4-1",
        labels={"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.count": "2"} | labels,
        allocatable={"cpu": "8", "nvidia.com/gpu": "8"},
    )
    cluster = Cluster.objects.create(name="c", kubeconfig_path=str(kubeconfig[0]))
    inventory_sync(cluster, fast_gateway(*kubeconfig), admitted=admitted_jobs)
    flavour = Flavour.objects.get(cluster=cluster)
    assert (flavour.name, flavour.sharing) == ("l4", sharing)


def test_labels_never_change_an_existing_flavours_sharing_but_the_cluster_says_so(
    db: None, kube_api: FakeKubeApi, kubeconfig: tuple[Path, str]
) -> None:
    product = {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.count": "2"}
    kube_api.add_node("l4-1", labels=product, allocatable={"cpu": "8", "nvidia.com/gpu": "2"})
    cluster = Cluster.objects.create(name="c", kubeconfig_path=str(kubeconfig[0]))
    inventory_sync(cluster, fast_gateway(*kubeconfig), admitted=admitted_jobs)
    assert Flavour.objects.get(cluster=cluster).sharing == ""
    # the device plugin is reconfigured to time-slice: the flavour's units would change
    # under its quotas and work, so only an administrator may follow
    kube_api.edit_object(
        "Node",
        None,
        "l4-1",
        lambda node: node["metadata"]["labels"].update(
            {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}
        ),
    )
    inventory_sync(cluster, fast_gateway(*kubeconfig), admitted=admitted_jobs)
    assert Flavour.objects.get(cluster=cluster).sharing == ""
    cluster.refresh_from_db()
    assert "l4 (nodes say time-slicing, the flavour not shared)" in cluster.status_message
    assert "PATCH /api/v1/flavours/{id}/" in cluster.status_message


def test_gpus_published_through_dra_count_once_beside_the_device_plugins(synced: Synced) -> None:
    """h100-1 offers its GPUs as nvidia.com/gpu and also through DRA (counted once); a
    node without labels or extended resources has only DRA slices (its product and count
    come from them)."""
    from tests.dra.devices import H100, gpu, node_slice
    from tests.kube_real.cluster import RealCluster

    api = synced.api
    if isinstance(api, RealCluster):
        api.register_kind("ResourceSlice", "resource.k8s.io/v1", "resourceslices", False)
    api.add_node("dra-only", labels={}, allocatable={"cpu": "8"})
    slices = [
        node_slice("h100-1", [gpu(i, H100, "80Gi") for i in range(8)]),
        node_slice("dra-only", [gpu(i, H100, "80Gi") for i in range(2)]),
    ]
    for resource_slice in slices:
        api.create_object(resource_slice)
    try:
        inventory_sync(synced.cluster, synced.gateway, admitted=admitted_jobs)
    finally:
        for resource_slice in slices:
            api.delete_object("ResourceSlice", None, resource_slice["metadata"]["name"])
    assert Flavour.objects.get(cluster=synced.cluster, name="h100-80gb").capacity == 16 + 2
    node = Node.objects.get(name="dra-only")
    assert (node.product, node.gpu_count, node.dra_devices) == ("H100-80GB", 2, {"h100-80gb": 2})
    assert Node.objects.get(name="h100-1").dra_devices == {"h100-80gb": 8}


def test_a_dra_slice_that_cannot_be_read_is_named_and_the_rest_still_counts() -> None:
    """(The real API server refuses such a slice; one from a newer API may still carry
    what this version cannot read.)"""
    from scheduler_bridge.gateways.base import NodeInfo
    from scheduler_bridge.inventory.services import _dra_flavours
    from tests.dra.devices import H100, gpu, node_slice

    slices = [
        node_slice("n1", [gpu(0, H100, "80Gi")]),
        node_slice("n2", [{"name": "gpu-0", "attributes": {"type": {}}}]),
    ]
    node = NodeInfo(name="n1", labels={}, allocatable={}, capacity={})
    found, note = _dra_flavours(slices, [node])
    assert {n: {s.name: c for s, c in f.items()} for n, f in found.flavours.items()} == {
        "n1": {"h100-80gb": 1}
    }
    assert note.startswith("; DRA slices left out: ResourceSlice n2-gpu.nvidia.com")
