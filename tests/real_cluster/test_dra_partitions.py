"""GPUs a DRA driver splits when a claim asks (partitionable devices), on the real control
plane: the API server holds the driver's counter sets and devices, the real scheduler
allocates partitions against the shared counters, and Tidegate's counting must agree with
what it allocates (a GPU is one GPU, laid out by the MIG planner or by what claims hold)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler_bridge.gateways.watch_cache import drop_shared_caches
from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.inventory.services import inventory_sync
from scheduler_bridge.mig.services import mig_reconcile
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.jobs import jobs_sync
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.selectors import admitted_jobs
from tests.clusters import CLUSTER, bind_team_namespaces, hand_down
from tests.conftest import Cast
from tests.dra.devices import GPU_CLASS, MIG_CLASS, partitionable_gpu_slices
from tests.kube_real.cluster import RUNS_UNTIL_FINISHED, RealCluster
from tests.real_cluster.conftest import tidegate_gateway

RESOURCE = "resource.k8s.io/v1"
NODE = "dra-h100-split"
NAMESPACE = "vision-train"
OUTSIDE = "dra-lab"  # bound to no team: no quota, no queue
WHOLE = "h100-80gb"
SMALL = "h100-80gb-mig-1g.10gb"
HALF = "h100-80gb-mig-3g.40gb"


@pytest.fixture
def split(real_cluster: RealCluster) -> Iterator[RealCluster]:
    """One KWOK node with two H100s its driver splits on claim, and the driver's classes."""
    real = real_cluster
    real.register_kind("DeviceClass", RESOURCE, "deviceclasses", namespaced=False)
    real.register_kind("ResourceSlice", RESOURCE, "resourceslices", namespaced=False)
    real.register_kind("ResourceClaimTemplate", RESOURCE, "resourceclaimtemplates", namespaced=True)
    real.register_kind("ResourceClaim", RESOURCE, "resourceclaims", namespaced=True)
    real.add_namespace(NAMESPACE)
    real.add_namespace(OUTSIDE)
    real.add_node(NODE)
    gpu_class = copy.deepcopy(GPU_CLASS)
    gpu_class["spec"].pop("extendedResourceName")  # other tests' pods ask for nvidia.com/gpu
    cluster_scoped = [gpu_class, MIG_CLASS, *partitionable_gpu_slices(NODE, gpus=2)]
    try:
        for obj in cluster_scoped:
            real.create_object(obj)
        yield real
    finally:
        for namespace in (NAMESPACE, OUTSIDE):
            for pod in real.objects("Pod", namespace):
                real.delete_pod_now(namespace, pod["metadata"]["name"])
        for obj in cluster_scoped:
            real.delete_object(obj["kind"], None, obj["metadata"]["name"])
        drop_shared_caches()


def _template(
    name: str, device_class: str, profile: str | None = None, namespace: str = NAMESPACE
) -> dict[str, Any]:
    """A ResourceClaimTemplate for one device of ``device_class`` (of ``profile``)."""
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if profile:
        expression = f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"
        exactly["selectors"] = [{"cel": {"expression": expression}}]
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def _pod_spec(template: str) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        "containers": [
            {
                "name": "work",
                "image": "registry.example/work:1",
                "resources": {"claims": [{"name": "gpu"}]},
            }
        ],
    }


def _outside_pod(name: str, template: str) -> dict[str, Any]:
    """A pod of a namespace no team holds (no queue, no quota)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": OUTSIDE},
        "spec": _pod_spec(template),
    }


def _queue_job(name: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"tidegate.io/queue": "vision"},
        },
        "spec": {
            "suspend": True,
            "template": {
                "metadata": {"annotations": dict(RUNS_UNTIL_FINISHED)},
                "spec": _pod_spec(template),
            },
        },
    }


def _unschedulable(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("reason") == "Unschedulable" for c in conditions)


def _allocated(real: RealCluster) -> dict[str, list[str]]:
    """Per claim, the devices the scheduler allocated it."""
    found = {}
    for claim in [
        *real.objects("ResourceClaim", NAMESPACE),
        *real.objects("ResourceClaim", OUTSIDE),
    ]:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        found[claim["metadata"]["name"]] = [r["device"] for r in results]
    return found


def _layouts(node: Node) -> list[dict[str, int] | None]:
    """Per GPU, its MIG devices per profile (None: whole)."""
    found: list[dict[str, int] | None] = []
    for layout in node.gpu_layouts:
        if layout is None:
            found.append(None)
            continue
        counts: dict[str, int] = {}
        for profile, _start in layout:
            counts[profile] = counts.get(profile, 0) + 1
        found.append(counts)
    return found


@pytest.mark.django_db
def test_gpus_split_on_claim_count_once_and_are_laid_out_by_the_planner(
    split: RealCluster, cast: Cast
) -> None:
    """Two H100s publishing 20 alternatives are two GPUs; a partition a pod outside the
    queue holds keeps its GPU; the MIG planner lays the other out for a team's guarantee
    of seven 1g slices without MIG Manager; seven queued Jobs run on partitions the real
    scheduler allocates, an eighth waits, and a claim for a whole GPU finds none, as
    Tidegate counts."""
    real = split
    cluster = Cluster.objects.create(
        name=CLUSTER,
        gateway="kubernetes",
        kubeconfig_path=str(real.plane.gateway_kubeconfig),
        kube_context="tidegate",
    )
    gateway = tidegate_gateway(real)
    try:
        inventory_sync(cluster, gateway, admitted=admitted_jobs)
        node = Node.objects.get(cluster=cluster, name=NODE)
        assert (node.gpu_count, node.partitionable_held, node.gpu_layouts) == (
            2,
            [False, False],
            [None, None],
        )
        assert node.dra_devices == {WHOLE: 2}
        # a flavour's capacity: what its GPUs offer now; the most they could, if laid out
        # for it, is how far teams may be guaranteed it
        capacity = {
            f.name: (f.capacity, f.most_capacity) for f in Flavour.objects.filter(cluster=cluster)
        }
        assert capacity == {WHOLE: (2, 2), SMALL: (0, 14), HALF: (0, 4)}
        assert node.dra_most == {WHOLE: 2, SMALL: 14, HALF: 4}

        # a pod outside the queue takes half a GPU: that GPU is split as claims hold it
        real.create_object(_template("small", "mig.nvidia.com", "1g.10gb"))
        for name, device_class, profile in (
            ("half", "mig.nvidia.com", "3g.40gb"),
            ("whole", "gpu.nvidia.com", None),
        ):
            real.create_object(_template(name, device_class, profile, OUTSIDE))
        real.create_object(_outside_pod("outside-half", "half"))
        real.wait_for(
            lambda: any(_allocated(real).values()), "the scheduler to allocate the 3g partition"
        )
        inventory_sync(cluster, gateway, admitted=admitted_jobs)
        node = Node.objects.get(cluster=cluster, name=NODE)
        assert sorted(node.partitionable_held) == [False, True]
        assert sorted(_layouts(node), key=str) == [None, {"3g.40gb": 1}]
        assert node.dra_devices == {WHOLE: 1, HALF: 1}

        # the team is guaranteed seven 1g slices: the idle GPU is laid out for them at once
        small = Flavour.objects.get(cluster=cluster, name=SMALL)
        bind_team_namespaces(cast)
        hand_down([(cast.org, small, 7), (cast.dept, small, 7), (cast.team_a, small, 7)])
        result = mig_reconcile(cluster, gateway, admitted=admitted_jobs)
        assert (result.laid_out, result.requested) == (1, 0)
        labels = real.read("Node", None, NODE)["metadata"]["labels"]
        assert "nvidia.com/mig.config" not in labels  # no MIG Manager involved
        node = Node.objects.get(cluster=cluster, name=NODE)
        assert sorted(_layouts(node), key=str) == [{"1g.10gb": 7}, {"3g.40gb": 1}]
        assert node.dra_devices == {SMALL: 7, HALF: 1}
        assert (
            mig_reconcile(cluster, gateway, admitted=admitted_jobs).laid_out == 0
        )  # steady: nothing to change

        # eight Jobs of one 1g slice each: seven run, the eighth waits
        for index in range(8):
            real.create_object(_queue_job(f"small-{index}", "small"))
        jobs_sync(cluster, gateway)
        admission_cycle(cluster, gateway)
        states = dict(Workload.objects.filter(cluster=cluster).values_list("job_name", "state"))
        running = sorted(n for n, s in states.items() if s == Workload.State.RUNNING)
        assert len(running) == 7, states
        waiting = Workload.objects.get(cluster=cluster, state=Workload.State.PENDING)
        assert SMALL in waiting.reason

        def partitions() -> list[str] | None:
            held = [d for name, ds in _allocated(real).items() if "small" in name for d in ds]
            return held if len(held) == 7 else None

        held = real.wait_for(partitions, "the scheduler to allocate seven 1g partitions")
        assert len(set(held)) == 7 and all("mig-1g10gb" in d for d in held), held

        # Kubernetes is the judge: no whole GPU is left, and Tidegate offers none; the
        # 1g slices it offers beyond the seven held are ones the scheduler still gives
        real.create_object(_outside_pod("outside-whole", "whole"))
        inventory_sync(cluster, gateway, admitted=admitted_jobs)
        node = Node.objects.get(cluster=cluster, name=NODE)
        assert node.partitionable_held == [True, True]
        assert WHOLE not in node.dra_devices
        assert node.dra_devices[HALF] == 1 and node.dra_devices[SMALL] > 7, node.dra_devices
        real.wait_for(
            lambda: _unschedulable(real.read("Pod", OUTSIDE, "outside-whole")),
            "the scheduler to find no whole GPU",
        )
        assert not real.read("Pod", OUTSIDE, "outside-whole")["spec"].get("nodeName")
        real.create_object(_template("small", "mig.nvidia.com", "1g.10gb", OUTSIDE))
        for extra in range(node.dra_devices[SMALL] - 7):
            real.create_object(_outside_pod(f"outside-small-{extra}", "small"))
        real.wait_for(
            lambda: (
                sum(1 for name, ds in _allocated(real).items() if "outside-small" in name and ds)
                == node.dra_devices[SMALL] - 7
            ),
            "the scheduler to give every 1g slice Tidegate counts free",
        )
    finally:
        gateway.close()
