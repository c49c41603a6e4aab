"""A cluster with GPU nodes, bound namespaces and quotas for the Django side of the
bridge: behind the local test server (`fake_cluster`, where faults can be injected), or
the same cluster on the local test server and on the real control plane (`synced`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scheduler_bridge.gateways.kubernetes import KubernetesGateway, RetryPolicy
from scheduler_bridge.inventory.models import Cluster, Flavour
from scheduler_bridge.inventory.services import inventory_sync
from scheduler_bridge.workloads.selectors import admitted_jobs
from tests.clusters import bind_team_namespaces, hand_down
from tests.conftest import Cast
from tests.kube_fake.fixtures import kube_api, kubeconfig
from tests.kube_fake.server import FakeKubeApi
from tests.kube_real.cluster import GATEWAY_USER, RUNS_UNTIL_FINISHED, RealCluster
from tests.kube_real.fixtures import control_plane, real_cluster

__all__ = ["control_plane", "kube_api", "kubeconfig", "real_cluster"]

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
    inventory_sync(cluster, gateway, admitted=admitted_jobs)
    h100 = Flavour.objects.get(cluster=cluster, name="h100-80gb")
    mig = Flavour.objects.get(cluster=cluster, name="a100-sxm4-40gb-mig-1g.5gb")
    bind_team_namespaces(cast)
    hand_down(guarantees(Flavour.objects.filter(cluster=cluster), cast))
    yield FakeCluster(kube_api, cluster, gateway, h100, mig)
    gateway.close()


class Synced(ABC):
    """`gpu-east` as `fake_cluster` builds it, on either server, and what the tests do to
    it by hand: ``api`` answers get_object, edit_object and delete_object on both."""

    def __init__(self, cluster: Cluster, gateway: KubernetesGateway, api: Any) -> None:
        self.cluster, self.gateway, self.api = cluster, gateway, api

    @abstractmethod
    def run_pod(self, namespace: str, name: str, node: str, gpus: int = 1) -> None:
        """A pod bound to ``node``, holding ``gpus`` whole GPUs, running."""

    @abstractmethod
    def end_pod(self, namespace: str, name: str) -> None:
        """The pod succeeds (its GPUs are free again)."""

    @abstractmethod
    def create(self, obj: dict[str, Any]) -> None:
        """Create ``obj`` as an administrator would."""

    @abstractmethod
    def writes(self) -> int:
        """Write requests Tidegate's gateway has made so far."""


class _SyncedOnFake(Synced):
    def run_pod(self, namespace: str, name: str, node: str, gpus: int = 1) -> None:
        self.api.add_pod(namespace, name, requests={"nvidia.com/gpu": gpus}, node_name=node)

    def end_pod(self, namespace: str, name: str) -> None:
        self.api.edit_object(
            "Pod", namespace, name, lambda p: p["status"].update(phase="Succeeded")
        )

    def create(self, obj: dict[str, Any]) -> None:
        self.api.put_object(obj)

    def writes(self) -> int:
        return int(self.api.write_count())


class _SyncedOnReal(Synced):
    api: RealCluster

    def __init__(self, cluster: Cluster, gateway: KubernetesGateway, api: RealCluster) -> None:
        super().__init__(cluster, gateway, api)
        self._writes_before = api.writes_by(GATEWAY_USER)

    def run_pod(self, namespace: str, name: str, node: str, gpus: int = 1) -> None:
        gpu = {"nvidia.com/gpu": str(gpus)}
        self.api.create_object(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "annotations": dict(RUNS_UNTIL_FINISHED),
                },
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "c", "image": "i", "resources": {"requests": gpu, "limits": gpu}}
                    ],
                },
            }
        )

    def end_pod(self, namespace: str, name: str) -> None:
        self.api.wait_for(
            lambda: (self.api.read("Pod", namespace, name).get("status") or {}).get("startTime"),
            f"KWOK to start pod {name}",
        )
        self.api.finish_pod(namespace, name)

    def create(self, obj: dict[str, Any]) -> None:
        self.api.create_object({"apiVersion": "v1", **obj})

    def writes(self) -> int:
        return self.api.writes_by(GATEWAY_USER) - self._writes_before


@pytest.fixture(params=["fake", "real"])
def synced(request: pytest.FixtureRequest, cast: Cast) -> Iterator[Synced]:
    """`fake_cluster`'s cluster on the local test server, then on the real control plane
    (where the two disagree, the real one is right)."""
    if request.param == "fake":
        fake: FakeCluster = request.getfixturevalue("fake_cluster")
        yield _SyncedOnFake(fake.cluster, fake.gateway, fake.api)
        return
    from tests.real_cluster.conftest import NAMESPACES, tidegate_gateway
    from tests.real_cluster.conftest import seed_gpu_nodes as seed_real_gpu_nodes

    real: RealCluster = request.getfixturevalue("real_cluster")
    seed_real_gpu_nodes(real)
    for namespace in NAMESPACES:
        real.add_namespace(namespace)
    cluster = Cluster.objects.create(
        name="gpu-east",
        gateway="kubernetes",
        kubeconfig_path=str(real.plane.gateway_kubeconfig),
        kube_context="tidegate",
    )
    gateway = tidegate_gateway(real)
    inventory_sync(cluster, gateway, admitted=admitted_jobs)
    bind_team_namespaces(cast)
    hand_down(guarantees(Flavour.objects.filter(cluster=cluster), cast))
    yield _SyncedOnReal(cluster, gateway, real)
    gateway.close()
