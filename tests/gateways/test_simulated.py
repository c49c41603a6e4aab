"""The simulated cluster: the demo's shape, MIG Manager, the Job controller, the registry."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from scheduler_bridge.gateways import GatewayConfigError, gateway_for, simulated
from scheduler_bridge.gateways.manifests import (
    MIG_CONFIG_STATE_LABEL,
    MigDeviceGroup,
    managed_labels,
    mig_config_map,
    node_mig_config_labels,
)
from scheduler_bridge.gateways.simulated import SimulatedCluster, SimulatedGateway
from tests.kube_fake.schema import assert_valid_kubernetes

H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


@pytest.fixture
def demo():
    simulated.reset()
    cluster = simulated.register(SimulatedCluster.demo(seed=7, name="demo-test"))
    yield cluster, SimulatedGateway(cluster)
    simulated.reset()


def test_demo_has_twelve_eight_gpu_nodes_some_partitioned(demo) -> None:
    cluster, gateway = demo

    nodes = {n.name: n for n in gateway.list_nodes()}

    assert len(nodes) == 12
    products = Counter(n.labels["nvidia.com/gpu.product"] for n in nodes.values())
    assert products == {"NVIDIA-H100-80GB-HBM3": 6, "NVIDIA-A100-SXM4-80GB": 6}
    assert all(n.labels["nvidia.com/gpu.count"] == "8" for n in nodes.values())
    assert all(n.labels["nvidia.com/mig.strategy"] == "mixed" for n in nodes.values())
    assert all(n.labels[MIG_CONFIG_STATE_LABEL] == "success" for n in nodes.values())
    assert nodes["h100-01"].allocatable["nvidia.com/gpu"] == 8
    # all-balanced on an H100: 2 x 1g.10gb + 2g.20gb + 3g.40gb per GPU.
    assert {k: v for k, v in nodes["h100-05"].allocatable.items() if "nvidia" in k} == {
        "nvidia.com/gpu": 0,
        "nvidia.com/mig-1g.10gb": 16,
        "nvidia.com/mig-2g.20gb": 8,
        "nvidia.com/mig-3g.40gb": 8,
    }
    assert nodes["a100-05"].allocatable["nvidia.com/gpu"] == 4
    assert nodes["a100-05"].labels["nvidia.com/mig-3g.40gb.count"] == "8"
    cliques = {n.labels.get("nvidia.com/gpu.clique") for n in nodes.values() if "h100" in n.name}
    assert len(cliques) == 2


def test_the_same_seed_builds_the_same_cluster() -> None:
    def uids(seed: int) -> list[str]:
        return [n["metadata"]["uid"] for n in SimulatedCluster.demo(seed).objects("Node")]

    assert uids(3) == uids(3)
    assert uids(3) != uids(4)


def test_a_new_mig_config_is_pending_until_the_next_tick(demo) -> None:
    cluster, gateway = demo
    layout = {
        "half-1g": [
            MigDeviceGroup(devices=(0, 1, 2, 3), mig_enabled=True, mig_devices={"1g.10gb": 7}),
            MigDeviceGroup(devices=(4, 5, 6, 7), mig_enabled=False),
        ]
    }
    config_map = mig_config_map("gpu-operator", layout)
    gateway.apply_config_map(
        "gpu-operator", config_map["metadata"]["name"], config_map["data"], managed_labels()
    )

    assert gateway.set_node_labels("h100-01", node_mig_config_labels("half-1g"))
    node = next(n for n in gateway.list_nodes() if n.name == "h100-01")
    assert node.labels[MIG_CONFIG_STATE_LABEL] == "pending"
    assert node.allocatable["nvidia.com/gpu"] == 8

    cluster.tick()

    node = next(n for n in gateway.list_nodes() if n.name == "h100-01")
    assert node.labels[MIG_CONFIG_STATE_LABEL] == "success"
    assert node.allocatable["nvidia.com/gpu"] == 4
    assert node.allocatable["nvidia.com/mig-1g.10gb"] == 28


def test_a_reconfiguration_can_be_made_to_fail(demo) -> None:
    cluster, gateway = demo
    cluster.fail_next_mig_config("a100-01")

    gateway.set_node_labels("a100-01", node_mig_config_labels("all-1g.10gb"))
    cluster.tick()

    node = next(n for n in gateway.list_nodes() if n.name == "a100-01")
    assert node.labels[MIG_CONFIG_STATE_LABEL] == "failed"
    assert node.allocatable["nvidia.com/gpu"] == 8


def test_admitted_jobs_run_where_they_fit_and_finish_after_their_duration(demo) -> None:
    cluster, gateway = demo
    cluster.add_namespace("team-a")
    cluster.add_job(
        "team-a", "big", requests={"nvidia.com/gpu": 8}, parallelism=7, duration_seconds=3600
    )
    cluster.add_job("team-a", "late", requests={"nvidia.com/gpu": 8}, duration_seconds=60)
    start = cluster.now

    gateway.admit_job("team-a", "big", H100, [])
    gateway.admit_job("team-a", "late", H100, [])

    def phases() -> Counter:
        return Counter((p.job_name, p.phase) for p in gateway.list_gpu_pods())

    # Four H100 nodes have 8 whole GPUs (the other two are split with MIG).
    running = [p for p in gateway.list_gpu_pods() if p.phase == "Running"]
    assert len({p.node_name for p in running}) == 4
    assert all(p.started_at == start for p in running)
    assert phases() == {("big", "Running"): 4, ("big", "Pending"): 3, ("late", "Pending"): 1}

    cluster.tick(3600)  # the first four end; the freed nodes take the waiting pods
    assert phases() == {("big", "Succeeded"): 4, ("big", "Running"): 3, ("late", "Running"): 1}

    cluster.tick(60)
    assert [j.name for j in gateway.list_jobs() if j.finished] == ["late"]

    cluster.tick(3540)
    assert all(j.finished and not j.failed for j in gateway.list_jobs())
    big = [p for p in gateway.list_gpu_pods() if p.job_name == "big"]
    assert {p.finished_at - p.started_at for p in big} == {timedelta(hours=1)}
    assert max(p.finished_at for p in big) == start + timedelta(hours=2)


def test_a_job_can_be_ended_by_hand(demo) -> None:
    cluster, gateway = demo
    cluster.add_namespace("team-a")
    cluster.add_job("team-a", "train", requests={"nvidia.com/mig-1g.10gb": 1})
    gateway.admit_job("team-a", "train", {}, [])

    cluster.finish_job("team-a", "train", failed=True)

    job = gateway.list_jobs()[0]
    assert job.finished and job.failed
    assert [p.phase for p in gateway.list_gpu_pods()] == ["Failed"]


def test_every_simulated_object_is_schema_valid(demo) -> None:
    cluster, gateway = demo
    cluster.add_namespace("team-a")
    cluster.add_job("team-a", "train", requests={"nvidia.com/gpu": 2}, parallelism=2)
    cluster.add_pod(
        "team-a", "notebook", requests={"nvidia.com/mig-1g.10gb": 1}, node_name="a100-06"
    )
    gateway.apply_resource_quota(
        "team-a", "tidegate-gpu", {"requests.nvidia.com/gpu": "8"}, managed_labels("team-a")
    )
    gateway.admit_job("team-a", "train", H100, [], ["h100-01"])
    cluster.tick(10)

    for kind in ("Namespace", "Node", "Pod", "ConfigMap", "ResourceQuota", "Job"):
        for obj in cluster.objects(kind):
            assert_valid_kubernetes(obj)


def test_gateways_for_the_same_name_share_one_cluster() -> None:
    simulated.reset()
    first = gateway_for("simulated", name="shared", seed=1)
    assert isinstance(first, SimulatedGateway)
    first.cluster.add_namespace("team-z")

    assert "team-z" in gateway_for("simulated", name="shared").list_namespaces()
    simulated.reset()
    assert "team-z" not in gateway_for("simulated", name="shared").list_namespaces()
    with pytest.raises(GatewayConfigError, match="kubeconfig"):
        gateway_for("simulated", kubeconfig="/tmp/x")
    simulated.reset()


def test_an_unknown_mig_config_fails_without_changing_the_layout(demo) -> None:
    """mig-parted cannot apply a config its ConfigMap does not define: MIG Manager
    reports failed and the GPUs keep their layout."""
    cluster, gateway = demo

    gateway.set_node_labels("h100-05", node_mig_config_labels("nobody-defined-this"))
    cluster.tick()

    node = next(n for n in gateway.list_nodes() if n.name == "h100-05")
    assert node.labels[MIG_CONFIG_STATE_LABEL] == "failed"
    assert node.allocatable["nvidia.com/mig-1g.10gb"] == 16


def test_quota_status_counts_the_gpus_pods_hold(demo) -> None:
    cluster, gateway = demo
    cluster.add_namespace("team-a")
    gateway.apply_resource_quota(
        "team-a", "tidegate-gpu", {"requests.nvidia.com/gpu": "8"}, managed_labels("team-a")
    )
    cluster.add_job("team-a", "train", requests={"nvidia.com/gpu": 3})

    gateway.admit_job("team-a", "train", H100, [])

    quota = cluster.get_object("ResourceQuota", "team-a", "tidegate-gpu")
    assert quota["status"] == {
        "hard": {"requests.nvidia.com/gpu": "8"},
        "used": {"requests.nvidia.com/gpu": "3"},
    }
