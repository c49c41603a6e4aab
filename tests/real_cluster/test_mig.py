"""MIG on the real control plane: Tidegate writes the mig-parted ConfigMap and labels an idle
node; a stand-in for the GPU operator's MIG Manager (named as such: the real one needs
GPUs) repartitions the node as the operator reports it, through its labels and capacity;
Tidegate adopts the new slices and admits work onto them."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_bridge.gateways.manifests import MIG_CONFIG_MAP_NAME, parse_mig_parted_yaml
from scheduler_bridge.inventory.models import Flavour
from scheduler_bridge.inventory.services import inventory_sync
from scheduler_bridge.mig.services import mig_reconcile
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.jobs import jobs_sync
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.selectors import admitted_jobs
from tests.conftest import Cast
from tests.kube_real.cluster import RealCluster

from .conftest import RealGpuCluster, job_manifest

pytestmark = pytest.mark.django_db
CONFIG_LABEL, STATE_LABEL = "nvidia.com/mig.config", "nvidia.com/mig.config.state"


def mig_manager_stand_in(real: RealCluster, node_name: str) -> dict[str, int]:
    """What MIG Manager does for a node whose ``nvidia.com/mig.config`` names a config of
    the ConfigMap: split its GPUs as the config says, publish each profile as the extended
    resource ``nvidia.com/mig-<profile>`` (mixed strategy) in place of the whole GPUs it
    took, and set ``nvidia.com/mig.config.state`` to ``success``. Returns the new resources."""
    node = real.read("Node", None, node_name)
    config_name = node["metadata"]["labels"][CONFIG_LABEL]
    config_map = real.read("ConfigMap", "gpu-operator", MIG_CONFIG_MAP_NAME)
    groups = parse_mig_parted_yaml(config_map["data"]["config.yaml"])[config_name]
    gpus = int(node["status"]["capacity"]["nvidia.com/gpu"])
    resources: dict[str, int] = {}
    split = 0
    for index in range(gpus):
        for group in groups:
            if group.devices != "all" and index not in group.devices:
                continue
            if group.mig_enabled and group.mig_devices:
                split += 1
                for profile, count in group.mig_devices.items():
                    key = f"nvidia.com/mig-{profile}"
                    resources[key] = resources.get(key, 0) + count
            break
    resources["nvidia.com/gpu"] = gpus - split
    status = {
        "capacity": {**node["status"]["capacity"], **{k: str(v) for k, v in resources.items()}},
        "allocatable": {
            **node["status"]["allocatable"],
            **{k: str(v) for k, v in resources.items()},
        },
    }
    real.patch_status("Node", None, node_name, status)
    real.edit_object(
        "Node",
        None,
        node_name,
        lambda n: n["metadata"]["labels"].update({STATE_LABEL: "success"}),
    )
    return resources


def test_a_mig_layout_lands_is_applied_and_its_slices_are_admitted(
    gpu_cluster: RealGpuCluster, cast: Cast, priorities: Any
) -> None:
    real = gpu_cluster.real
    real.add_namespace("gpu-operator")
    flavour = Flavour.objects.create(
        cluster=gpu_cluster.cluster,
        name="h100-80gb-mig-3g.40gb",
        product="H100-80GB",
        resource_name="nvidia.com/mig-3g.40gb",
        mig_profile="3g.40gb",
    )
    Quota.objects.filter(tenant=cast.org, flavour=gpu_cluster.h100).update(guaranteed=8)
    for tenant in (cast.dept, cast.team_a):
        Quota.objects.filter(tenant=tenant, flavour=gpu_cluster.h100).update(guaranteed=4)
    Quota.objects.filter(tenant=cast.team_b, flavour=gpu_cluster.h100).update(guaranteed=0)
    Quota.objects.create(tenant=cast.org, flavour=flavour, guaranteed=4, overcommit_allowed=True)
    Quota.objects.create(tenant=cast.dept, flavour=flavour, guaranteed=4)
    Quota.objects.create(tenant=cast.team_a, flavour=flavour, guaranteed=4)

    requested = mig_reconcile(gpu_cluster.cluster, gpu_cluster.gateway, admitted=admitted_jobs)

    assert requested.plan is not None and requested.requested >= 1
    config_map = real.read("ConfigMap", "gpu-operator", MIG_CONFIG_MAP_NAME)
    configs = parse_mig_parted_yaml(config_map["data"]["config.yaml"])
    managers = {m["manager"] for m in config_map["metadata"]["managedFields"]}
    assert "tidegate" in managers
    changed = sorted(requested.plan.nodes_to_reconfigure)
    for name in changed:
        assert real.read("Node", None, name)["metadata"]["labels"][CONFIG_LABEL] in configs

    slices = {name: mig_manager_stand_in(real, name) for name in changed}
    follow_up = mig_reconcile(gpu_cluster.cluster, gpu_cluster.gateway, admitted=admitted_jobs)
    inventory_sync(gpu_cluster.cluster, gpu_cluster.gateway, admitted=admitted_jobs)

    assert follow_up.succeeded == requested.requested
    flavour.refresh_from_db()
    made = sum(s.get("nvidia.com/mig-3g.40gb", 0) for s in slices.values())
    assert made >= 4 and flavour.capacity == made

    # vision asks for a 3g.40gb slice: admitted onto a repartitioned node, bound there
    real.create_object(
        job_manifest(
            "vision-train", "slice", queue="vision", gpus=1, resource="nvidia.com/mig-3g.40gb"
        )
    )
    jobs_sync(gpu_cluster.cluster, gpu_cluster.gateway)
    admission_cycle(gpu_cluster.cluster, gpu_cluster.gateway)
    workload = Workload.objects.get(job_name="slice")
    assert workload.state == Workload.State.RUNNING, workload.reason
    (pod,) = real.active_job_pods("vision-train", "slice")
    assert pod["spec"]["nodeName"] in changed
