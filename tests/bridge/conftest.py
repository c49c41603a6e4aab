"""A cluster behind the fake Kubernetes API server, with GPU nodes, bound namespaces and
quotas, for the Django side of the bridge."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scheduler_bridge.gateways.kubernetes import KubernetesGateway, RetryPolicy
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.inventory.services import inventory_sync
from tests.clusters import bind_team_namespaces, hand_down
from tests.conftest import Cast
from tests.kube_fake.fixtures import kube_api, kubeconfig
from tests.kube_fake.server import FakeKubeApi

__all__ = ["kube_api", "kubeconfig"]

H100_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/mig.config": "all-disabled",
    "nvidia.com/mig.config.state": "success",
}
A100_MIG_LABELS = H100_LABELS | {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
    "nvidia.com/gpu.memory": "40960",
    "nvidia.com/mig.config": "all-1g.5gb",
}
BASE = {"cpu": "64", "memory": "512Gi", "pods": "110"}


def seed_gpu_nodes(api: FakeKubeApi) -> None:
    """Two whole-GPU H100 nodes in one NVLink clique, one A100 node split into 1g.5gb."""
    for i in (1, 2):
        api.add_node(
            f"h100-{i}",
            labels=H100_LABELS | {"nvidia.com/gpu.clique": "fabric.1"},
            allocatable=BASE | {"nvidia.com/gpu": "8"},
        )
    api.add_node(
        "a100-1",
        labels=A100_MIG_LABELS,
        allocatable=BASE | {"nvidia.com/mig-1g.5gb": "56"},
    )


def guarantees(flavours: Any, cast: Cast) -> list[tuple[Any, Flavour, int]]:
    """The guarantees handed down the tree: vision 6 H100s and 14 1g.5gb slices,
    speech 2 H100s, globex 4."""
    h100 = flavours.get(name="h100-80gb")
    mig = flavours.get(name="a100-sxm4-40gb-mig-1g.5gb")
    return [
        (cast.org, h100, 12),
        (cast.dept, h100, 10),
        (cast.team_a, h100, 6),
        (cast.team_b, h100, 2),
        (cast.other_org, h100, 4),
        (cast.org, mig, 28),
        (cast.dept, mig, 28),
        (cast.team_a, mig, 14),
    ]


@dataclass
class FakeCluster:
    api: FakeKubeApi
    cluster: Cluster
    gateway: KubernetesGateway
    h100: Flavour
    mig_1g: Flavour


def fast_gateway(kubeconfig_path: Path, context: str) -> KubernetesGateway:
    return KubernetesGateway.from_kubeconfig(
        str(kubeconfig_path), context, retry=RetryPolicy(attempts=3, base_delay=0)
    )


@pytest.fixture
def fake_cluster(cast: Cast, kube_api: FakeKubeApi, kubeconfig: tuple[Path, str]) -> Any:
    """`gpu-east` with nodes synced, vision and speech bound, quotas handed down the tree."""
    seed_gpu_nodes(kube_api)
    for namespace in ("vision-train", "vision-dev", "speech-train", "globex-train"):
        kube_api.add_namespace(namespace)
    path, context = kubeconfig
    cluster = Cluster.objects.create(
        name="gpu-east", gateway="kubernetes", kubeconfig_path=str(path), kube_context=context
    )
    gateway = fast_gateway(path, context)
    inventory_sync(cluster, gateway)
    h100 = Flavour.objects.get(cluster=cluster, name="h100-80gb")
    mig = Flavour.objects.get(cluster=cluster, name="a100-sxm4-40gb-mig-1g.5gb")
    bind_team_namespaces(cast)
    hand_down(guarantees(Flavour.objects.filter(cluster=cluster), cast))
    yield FakeCluster(kube_api, cluster, gateway, h100, mig)
    gateway.close()
