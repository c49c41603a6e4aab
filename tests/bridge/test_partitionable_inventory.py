"""Inventory and the MIG planner on nodes whose driver splits GPUs on claim
(partitionable devices), through the gateway against the fake API server. The real
scheduler's side is tests/real_cluster/test_dra_partitions.py."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scheduler_bridge.gateways.kubernetes import KubernetesGateway
from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.inventory.services import inventory_sync
from scheduler_bridge.mig.services import mig_plan, mig_reconcile
from scheduler_bridge.workloads.selectors import admitted_jobs
from tests.bridge.conftest import fast_gateway
from tests.clusters import hand_down
from tests.conftest import Cast
from tests.dra.devices import GPU_CLASS, H100, MIG_CLASS, gpu, partitionable_gpu_slices
from tests.kube_fake.server import FakeKubeApi

pytestmark = pytest.mark.django_db


@dataclass
class Bare:
    api: FakeKubeApi
    cluster: Cluster
    gateway: KubernetesGateway


@pytest.fixture
def bare(kube_api: FakeKubeApi, kubeconfig: tuple[Path, str]) -> Iterator[Bare]:
    """A cluster with no node but those a test adds."""
    path, context = kubeconfig
    cluster = Cluster.objects.create(
        name="split-east", gateway="kubernetes", kubeconfig_path=str(path), kube_context=context
    )
    gateway = fast_gateway(path, context)
    try:
        yield Bare(kube_api, cluster, gateway)
    finally:
        gateway.close()


def _publish(fake: Bare, node: str, extra_whole: int = 0) -> None:
    """``node`` with two H100s split on claim, and ``extra_whole`` more published whole."""
    api = fake.api
    api.add_node(node, labels={}, allocatable={"cpu": "8"})
    gpu_class = copy.deepcopy(GPU_CLASS)
    gpu_class["spec"].pop("extendedResourceName")
    for obj in (gpu_class, MIG_CLASS):
        if api.get_object("DeviceClass", None, obj["metadata"]["name"]) is None:
            api.create_object(obj)
    counters, devices = partitionable_gpu_slices(node, gpus=2)
    spec: dict[str, Any] = devices["spec"]
    spec["pool"]["resourceSliceCount"] = 2
    # the whole ones: indexes after the split ones, drawing on no counters
    spec["devices"] += [gpu(2 + i, H100, "80Gi") for i in range(extra_whole)]
    for obj in (counters, devices):
        api.create_object(obj)


def test_a_node_with_gpus_split_on_claim_and_whole_ones_lists_every_gpu(
    bare: Bare,
) -> None:
    _publish(bare, "split-and-whole", extra_whole=2)
    inventory_sync(bare.cluster, bare.gateway, admitted=admitted_jobs)
    node = Node.objects.get(cluster=bare.cluster, name="split-and-whole")
    assert (node.gpu_count, node.gpu_layouts, node.partitionable_held) == (
        4,
        [None] * 4,
        [False, False],
    )
    assert node.dra_devices == {"h100-80gb": 4}
    assert node.dra_most == {
        "h100-80gb": 4,
        "h100-80gb-mig-1g.10gb": 14,
        "h100-80gb-mig-3g.40gb": 4,
    }


def test_the_planner_splits_only_the_gpus_split_on_claim_and_at_once(
    bare: Bare, cast: Cast
) -> None:
    """A guarantee of fourteen 1g slices: both GPUs split on claim are laid out for them
    at once (no node label, no ConfigMap), the GPUs published whole beside them keep
    their layout, and the next run has nothing left to do."""
    cluster = bare.cluster
    _publish(bare, "split-and-whole", extra_whole=2)
    inventory_sync(cluster, bare.gateway, admitted=admitted_jobs)
    small = Flavour.objects.get(cluster=cluster, name="h100-80gb-mig-1g.10gb")
    assert (small.capacity, small.most_capacity, small.guarantee_ceiling) == (0, 14, 14)
    hand_down([(cast.org, small, 14)])
    plan = mig_plan(cluster)
    by_gpu = {(g.node, g.index): g for g in plan.gpus}
    assert by_gpu[("split-and-whole", 2)].changed is False  # kept: no MIG Manager here
    result = mig_reconcile(cluster, bare.gateway, admitted=admitted_jobs)
    assert (result.laid_out, result.requested) == (1, 0)
    live = bare.api.get_object("Node", None, "split-and-whole")
    assert live is not None and "nvidia.com/mig.config" not in live["metadata"]["labels"]
    node = Node.objects.get(cluster=cluster, name="split-and-whole")
    assert node.dra_devices == {"h100-80gb": 2, "h100-80gb-mig-1g.10gb": 14}
    assert node.gpu_layouts[2:] == [None, None] and node.mig_requested_config == ""
    assert Flavour.objects.get(pk=small.pk).capacity == 14
    assert mig_reconcile(cluster, bare.gateway, admitted=admitted_jobs).laid_out == 0
