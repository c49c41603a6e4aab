"""DRA on the real control plane: the API server stores the driver's slices, classes and a
team's claim template; the real scheduler allocates the claim of a pod; Tidegate's reading
of the same objects (as the server returns them, defaults filled in) must agree with what
the scheduler allocated and with what Kubernetes' ResourceQuota charges."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone, translation

from billing.models import UsageRecord
from billing.usage.collection import usage_collect
from scheduler_bridge.dra.demand import (
    Inventory,
    device_class_counts,
    device_class_quota_key,
    pod_claims,
)
from scheduler_bridge.dra.flavours import flavour_of
from scheduler_bridge.dra.objects import claim_spec, device_class, devices_of_slice
from scheduler_bridge.gateways.kubernetes import KubernetesGateway
from scheduler_bridge.gateways.watch_cache import drop_shared_caches
from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.inventory.services import inventory_sync
from scheduler_bridge.quotas.sync import quota_sync
from scheduler_bridge.templatetags.tidegate import say
from scheduler_bridge.workloads.cycle import admission_cycle
from scheduler_bridge.workloads.jobs import jobs_sync
from scheduler_bridge.workloads.models import Workload
from scheduler_bridge.workloads.selectors import admitted_jobs, queue_holdings
from scheduler_bridge.workloads.snapshot import flavour_index, node_flavours
from tenants.models import NamespaceBinding
from tests.clusters import CLUSTER, bind_team_namespaces, hand_down
from tests.conftest import Cast
from tests.dra.devices import A100, GPU_CLASS, H100, MIG_CLASS, gpu, mig, node_slice
from tests.kube_real.cluster import RUNS_UNTIL_FINISHED, RealCluster
from tests.real_cluster.conftest import tidegate_gateway

NAMESPACE = "dra-team"
RESOURCE = "resource.k8s.io/v1"


@pytest.fixture
def dra(real_cluster: RealCluster) -> Iterator[RealCluster]:
    """Two KWOK nodes without extended GPU resources, their devices published as the
    driver publishes them, and the driver's two device classes."""
    real = real_cluster
    real.register_kind("DeviceClass", RESOURCE, "deviceclasses", namespaced=False)
    real.register_kind("ResourceSlice", RESOURCE, "resourceslices", namespaced=False)
    real.register_kind("ResourceClaimTemplate", RESOURCE, "resourceclaimtemplates", namespaced=True)
    real.register_kind("ResourceClaim", RESOURCE, "resourceclaims", namespaced=True)
    real.add_namespace(NAMESPACE)
    real.add_node("dra-h100")
    real.add_node("dra-a100-mig")
    gpu_class = copy.deepcopy(GPU_CLASS)
    gpu_class["spec"].pop("extendedResourceName")  # other tests' pods ask for nvidia.com/gpu
    cluster_scoped = [
        gpu_class,
        MIG_CLASS,
        node_slice("dra-h100", [gpu(i, H100, "80Gi") for i in range(4)]),
        node_slice("dra-a100-mig", [mig(0, "1g.10gb", p, A100) for p in range(7)]),
    ]
    try:
        for obj in cluster_scoped:
            real.create_object(obj)
        yield real
    finally:
        for pod in real.objects("Pod", NAMESPACE):
            real.delete_pod_now(NAMESPACE, pod["metadata"]["name"])
        for obj in cluster_scoped:
            real.delete_object(obj["kind"], None, obj["metadata"]["name"])


def _inventory(real: RealCluster) -> Inventory:
    """Tidegate's reading of what the API server holds."""
    devices = [d for s in real.objects("ResourceSlice") for d in devices_of_slice(s)]
    classes = [device_class(c) for c in real.objects("DeviceClass")]
    return Inventory(devices, classes, flavour_of)


def _template(name: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }


PRODUCT_IS_H100 = {
    "cel": {"expression": "device.attributes['gpu.nvidia.com'].productName.contains('H100')"}
}


# a template's requests: two whole H100s
TWO_H100: list[dict[str, Any]] = [
    {
        "name": "gpu",
        "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "count": 2,
            "selectors": [PRODUCT_IS_H100],
        },
    }
]


def _h100_or_slices(slices: int) -> list[dict[str, Any]]:
    """Two whole H100s, or else ``slices`` MIG devices: a prioritized list."""
    whole = {
        "name": "whole",
        "deviceClassName": "gpu.nvidia.com",
        "count": 2,
        "selectors": [PRODUCT_IS_H100],
    }
    sliced = {"name": "slices", "deviceClassName": "mig.nvidia.com", "count": slices}
    return [{"name": "gpu", "firstAvailable": [whole, sliced]}]


def test_the_scheduler_allocates_the_alternative_of_the_flavour_a_pod_is_pinned_to(
    dra: RealCluster,
) -> None:
    """A prioritized list is flavour alternatives; admission pins a pod to the nodes of
    the flavour it chose, and there the scheduler allocates exactly that alternative
    (left free, the scheduler takes any node whose devices serve some alternative)."""
    dra.create_object(
        _template(
            "gpus-or-slices",
            _h100_or_slices(slices=3),
        )
    )
    for node in ("dra-h100", "dra-a100-mig"):
        dra.create_object(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"on-{node}", "namespace": NAMESPACE},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "resourceClaims": [
                        {"name": "gpus", "resourceClaimTemplateName": "gpus-or-slices"}
                    ],
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer",
                            "resources": {"claims": [{"name": "gpus"}]},
                        }
                    ],
                },
            }
        )
    inventory = _inventory(dra)
    stored = dra.read("ResourceClaimTemplate", NAMESPACE, "gpus-or-slices")
    spec = claim_spec(stored["spec"]["spec"], "template gpus-or-slices")
    (entry,) = pod_claims(dra.read("Pod", NAMESPACE, "on-dra-h100")["spec"]).per_pod
    demand = inventory.request_demand(entry[0], spec.requests[0])
    assert [(a.flavour, a.amount) for a in demand.alternatives] == [
        ("h100-80gb", 2),
        ("a100-sxm4-80gb-mig-1g.10gb", 3),
    ]

    def allocations() -> dict[str, list[dict[str, Any]]] | None:
        found = {}
        for claim in dra.objects("ResourceClaim", NAMESPACE):
            allocation = (claim.get("status") or {}).get("allocation") or {}
            results = (allocation.get("devices") or {}).get("results")
            owner = claim["metadata"]["annotations"].get("resource.kubernetes.io/pod-claim-name")
            pod = next(r["name"] for r in claim["metadata"].get("ownerReferences") or [])
            if results and owner == "gpus":
                found[pod] = list(results)
        return found if len(found) == 2 else None

    allocated = dra.wait_for(allocations, "the scheduler to allocate both pods' claims")
    by_key = {d.key: d for d in inventory.devices}
    wanted = {"on-dra-h100": ("gpu/whole", demand.alternatives[0])}
    wanted["on-dra-a100-mig"] = ("gpu/slices", demand.alternatives[1])
    for pod, (request, alternative) in wanted.items():
        results = allocated[pod]
        assert {r["request"] for r in results} == {request}
        flavours = {
            inventory.flavour(by_key[(r["driver"], r["pool"], r["device"])]).name  # type: ignore[union-attr]
            for r in results
        }
        assert flavours == {alternative.flavour}
        assert len(results) == alternative.amount


def test_kubernetes_quota_charges_a_claim_what_tidegate_counts(dra: RealCluster) -> None:
    key = device_class_quota_key("mig.nvidia.com")
    dra.create_object(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "dra", "namespace": NAMESPACE},
            "spec": {"hard": {key: "3", device_class_quota_key("gpu.nvidia.com"): "0"}},
        }
    )
    dra.wait_for(
        lambda: (dra.read("ResourceQuota", NAMESPACE, "dra").get("status") or {}).get("hard"),
        "the quota controller to fill in the quota's status",
    )

    def claim(name: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": RESOURCE,
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"devices": {"requests": requests}},
        }

    fits = claim(
        "three-slices",
        [{"name": "s", "exactly": {"deviceClassName": "mig.nvidia.com", "count": 3}}],
    )
    # a prioritized list is charged its largest count per class: 4 slices, over the 3 allowed
    too_many = claim(
        "four-or-one",
        [
            {
                "name": "s",
                "firstAvailable": [
                    {"name": "many", "deviceClassName": "mig.nvidia.com", "count": 4},
                    {"name": "few", "deviceClassName": "mig.nvidia.com", "count": 1},
                ],
            }
        ],
    )
    assert device_class_counts([claim_spec(fits["spec"], "c")]) == {"mig.nvidia.com": 3}
    assert device_class_counts([claim_spec(too_many["spec"], "c")]) == {"mig.nvidia.com": 4}
    answer = dra.request("POST", dra.path("ResourceClaim", NAMESPACE), json=too_many)
    assert answer.status_code == 403 and "exceeded quota" in answer.text, answer.text
    dra.create_object(fits)
    used = dra.wait_for(
        lambda: (
            (dra.read("ResourceQuota", NAMESPACE, "dra").get("status") or {})
            .get("used", {})
            .get(key)
            == "3"
            or None
        ),
        "the quota to count the claim",
    )
    assert used


@pytest.mark.django_db
def test_inventory_counts_gpus_published_through_dra_as_their_flavours(dra: RealCluster) -> None:
    """Nodes without GPU Feature Discovery labels or extended resources: what their
    slices publish is the cluster's GPUs, in the flavours the same GPUs have otherwise."""
    cluster = Cluster.objects.create(
        name="dra-east",
        gateway="kubernetes",
        kubeconfig_path=str(dra.plane.gateway_kubeconfig),
        kube_context="tidegate",
    )
    with tidegate_gateway(dra) as gateway:
        result = inventory_sync(cluster, gateway, admitted=admitted_jobs)
    capacity = dict(Flavour.objects.filter(cluster=cluster).values_list("name", "capacity"))
    assert capacity == {"h100-80gb": 4, "a100-sxm4-80gb-mig-1g.10gb": 7}
    mig = Flavour.objects.get(cluster=cluster, name="a100-sxm4-80gb-mig-1g.10gb")
    assert (mig.resource_name, mig.mig_profile) == ("nvidia.com/mig-1g.10gb", "1g.10gb")
    assert float(mig.gpu_equivalent) == pytest.approx(1 / 7, abs=1e-4)
    h100_node = Node.objects.get(cluster=cluster, name="dra-h100")
    assert (h100_node.product, h100_node.gpu_count) == ("H100-80GB", 4)
    assert result.gpus >= 4
    by_key = flavour_index(cluster)
    assert node_flavours(h100_node, by_key) == {"h100-80gb": 4}
    mig_node = Node.objects.get(cluster=cluster, name="dra-a100-mig")
    assert node_flavours(mig_node, by_key) == {"a100-sxm4-80gb-mig-1g.10gb": 7}
    # the MIG planner reads the partitions DRA publishes: one A100 split into seven 1g
    assert (mig_node.product, mig_node.gpu_count, mig_node.mig_capable) == (
        "A100-SXM4-80GB",
        1,
        True,
    )
    assert mig_node.gpu_layouts == [[["1g.10gb", start] for start in range(7)]]
    assert h100_node.gpu_layouts == [None] * 4

    # a device the driver stops publishing leaves the count at the next sync
    dra.edit_object(
        "ResourceSlice",
        None,
        "dra-h100-gpu.nvidia.com",
        lambda obj: obj["spec"].update(devices=obj["spec"]["devices"][:2]),
    )
    with tidegate_gateway(dra) as gateway:
        inventory_sync(cluster, gateway, admitted=admitted_jobs)
    assert Flavour.objects.get(cluster=cluster, name="h100-80gb").capacity == 2
    assert Node.objects.get(cluster=cluster, name="dra-h100").dra_devices == {"h100-80gb": 2}


def _queue_cluster(real: RealCluster, cast: Cast) -> tuple[Cluster, KubernetesGateway]:
    """`gpu-east` on the DRA nodes: inventory synced, vision bound to vision-train,
    vision guaranteed 2 of the 4 H100s (its sibling the other 2) and all 7 MIG slices."""
    real.add_namespace("vision-train")
    cluster = Cluster.objects.create(
        name=CLUSTER,
        gateway="kubernetes",
        kubeconfig_path=str(real.plane.gateway_kubeconfig),
        kube_context="tidegate",
    )
    gateway = tidegate_gateway(real)
    inventory_sync(cluster, gateway, admitted=admitted_jobs)
    h100 = Flavour.objects.get(cluster=cluster, name="h100-80gb")
    mig = Flavour.objects.get(cluster=cluster, name="a100-sxm4-80gb-mig-1g.10gb")
    bind_team_namespaces(cast)
    hand_down(
        [
            (cast.org, h100, 4),
            (cast.dept, h100, 4),
            (cast.team_a, h100, 2),
            (cast.team_b, h100, 2),
            (cast.org, mig, 7),
            (cast.dept, mig, 7),
            (cast.team_a, mig, 7),
        ]
    )
    return cluster, gateway


def _claim_job(name: str, template: str) -> dict[str, Any]:
    """A queue Job of one pod whose GPUs come from a ResourceClaimTemplate."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "vision-train",
            "labels": {"tidegate.io/queue": "vision"},
        },
        "spec": {
            "suspend": True,
            "template": {
                "metadata": {"annotations": dict(RUNS_UNTIL_FINISHED)},
                "spec": {
                    "restartPolicy": "Never",
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
                    "containers": [
                        {
                            "name": "train",
                            "image": "registry.example/train:1",
                            "resources": {"claims": [{"name": "gpus"}]},
                        }
                    ],
                },
            },
        },
    }


@pytest.mark.django_db
def test_jobs_asking_through_claims_are_queued_counted_and_admitted_on_their_alternatives(
    dra: RealCluster, cast: Cast
) -> None:
    """Two H100s per Job for a team guaranteed 2 of the cluster's 4 (the rest its
    sibling's, idle): the first runs on its guarantee, the second borrows, a third whose
    prioritized list also takes two MIG slices runs on those, a fourth waits in line with
    the reason; the real scheduler allocates each admitted pod's claim on the devices of
    the flavour Tidegate admitted it on. A claim for a class no flavour serves is refused."""
    real = dra
    templates: dict[str, list[dict[str, Any]]] = {
        "two-h100": TWO_H100,
        "h100-or-slices": _h100_or_slices(slices=2),
        "tpus": [{"name": "tpu", "exactly": {"deviceClassName": "tpu.example.com"}}],
    }
    cluster, gateway = _queue_cluster(real, cast)
    for name, requests in templates.items():
        made = _template(name, requests)
        made["metadata"]["namespace"] = "vision-train"
        real.create_object(made)
    h100 = Flavour.objects.get(cluster=cluster, name="h100-80gb")
    mig = Flavour.objects.get(cluster=cluster, name="a100-sxm4-80gb-mig-1g.10gb")
    try:
        for name, template in (
            ("first", "two-h100"),
            ("second", "two-h100"),
            ("either", "h100-or-slices"),
            ("fourth", "two-h100"),
            ("tpu", "tpus"),
        ):
            real.create_object(_claim_job(name, template))
            jobs_sync(cluster, gateway)
            admission_cycle(cluster, gateway)

        state = {w.job_name: w for w in Workload.objects.filter(cluster=cluster)}
        running = {n for n, w in state.items() if w.state == Workload.State.RUNNING}
        assert running == {"first", "second", "either"}, {n: w.reason for n, w in state.items()}
        assert {n: state[n].flavour.name for n in running} == {  # type: ignore[union-attr]
            "first": "h100-80gb",
            "second": "h100-80gb",
            "either": "a100-sxm4-80gb-mig-1g.10gb",
        }
        assert [ps.flavours for ps in state["either"].pod_set_records] == [
            ("h100-80gb", "a100-sxm4-80gb-mig-1g.10gb")
        ]
        # what Kubernetes' ResourceQuota will charge each pod's claims: every class listed
        assert [ps.claim_devices for ps in state["either"].pod_set_records] == [
            (("gpu.nvidia.com", 2), ("mig.nvidia.com", 2))
        ]
        assert state["fourth"].state == Workload.State.PENDING
        assert "h100-80gb" in state["fourth"].reason
        assert state["tpu"].state == Workload.State.REJECTED
        assert "device class 'tpu.example.com' does not exist" in state["tpu"].reason
        # worded once, said again in the reader's language
        wording = state["tpu"].reason_wording
        assert wording is not None
        with translation.override("zh-hans"):
            said = say(wording)
        assert "设备类 'tpu.example.com' 不存在" in said, said
        assert real.read("Job", "vision-train", "fourth")["spec"]["suspend"] is True

        def allocated() -> dict[str, set[tuple[str, str]]] | None:
            found: dict[str, set[tuple[str, str]]] = {}
            for claim in real.objects("ResourceClaim", "vision-train"):
                allocation = (claim.get("status") or {}).get("allocation") or {}
                results = (allocation.get("devices") or {}).get("results") or []
                pod = claim["metadata"]["ownerReferences"][0]["name"]
                job = pod.rsplit("-", 1)[0]
                found[job] = {(r["pool"], r["request"]) for r in results}
            done = all(found.get(job) for job in ("first", "second", "either"))
            return found if done else None

        claims = real.wait_for(allocated, "the scheduler to allocate the admitted pods' claims")
        assert claims["first"] == {("dra-h100", "gpu")}
        assert claims["second"] == {("dra-h100", "gpu")}
        assert claims["either"] == {("dra-a100-mig", "gpu/slices")}

        # metered as the same GPUs through extended resources: busy on their nodes,
        # and each pod's allocation in the ledger, on its flavour, for its team
        pods = {job: real.active_job_pods("vision-train", job)[0] for job in ("first", "either")}
        real.wait_for(
            lambda: all(
                real.read("Pod", "vision-train", p["metadata"]["name"])["status"].get("phase")
                == "Running"
                for p in pods.values()
            ),
            "KWOK to run the pods",
        )
        inventory_sync(cluster, gateway, admitted=admitted_jobs)
        assert Node.objects.get(cluster=cluster, name="dra-h100").busy == {"nvidia.com/gpu": 4}
        assert Node.objects.get(cluster=cluster, name="dra-a100-mig").busy == {
            "nvidia.com/mig-1g.10gb": 2
        }
        # collected while they run (generated claims go with their pods once these end;
        # the workload's own record covers what follows the last collection)
        usage_collect(cluster=cluster, gateway=gateway, now=timezone.now() + timedelta(hours=2))
        for job, flavour in (("first", h100), ("either", mig)):
            uid = pods[job]["metadata"]["uid"]
            rows = UsageRecord.objects.filter(pod_uid=uid, source=UsageRecord.Source.POD)
            assert rows.exists(), job
            assert {(r.tenant_id, r.flavour_id, r.devices) for r in rows} == {
                (cast.team_a.pk, flavour.pk, 2)
            }
            started = datetime.fromisoformat(
                real.read("Pod", "vision-train", pods[job]["metadata"]["name"])["status"][
                    "startTime"
                ].replace("Z", "+00:00")
            )
            for r in rows:  # two devices for as long as the pod ran in each hour
                ran = r.interval_end - max(r.interval_start, started)
                assert r.gpu_seconds_allocated == 2 * int(ran.total_seconds()), (job, r)
    finally:
        gateway.close()


@pytest.mark.django_db
@pytest.mark.parametrize("watched", [False, True])
def test_a_claim_the_pods_of_a_job_share_is_counted_once(
    dra: RealCluster, cast: Cast, watched: bool
) -> None:
    """Two pods naming one ResourceClaim of two H100s hold two H100s, not four: the
    workload asks for them once, is admitted within vision's guarantee of 2, and both
    pods run on the node the claim's devices are on; read as the workers read it, from
    the watched cache, too."""
    real = dra
    cluster, gateway = _queue_cluster(real, cast)
    if watched:
        gateway.close()
        key = f"dra-test-{cluster.pk}:watch"
        gateway = KubernetesGateway.from_kubeconfig(
            str(real.plane.gateway_kubeconfig), "tidegate", cache_key=key
        )
    try:
        real.create_object(
            {
                "apiVersion": RESOURCE,
                "kind": "ResourceClaim",
                "metadata": {"name": "pair-gpus", "namespace": "vision-train"},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": "gpu.nvidia.com",
                                    "count": 2,
                                    "selectors": [PRODUCT_IS_H100],
                                },
                            }
                        ]
                    }
                },
            }
        )
        job = _claim_job("pair", "unused")
        job["spec"].update(parallelism=2, completions=2)
        pod_spec = job["spec"]["template"]["spec"]
        pod_spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "pair-gpus"}]
        real.create_object(job)
        jobs_sync(cluster, gateway)
        admission_cycle(cluster, gateway)

        workload = Workload.objects.get(cluster=cluster, job_name="pair")
        assert workload.state == Workload.State.RUNNING, workload.reason
        assert [
            (ps.name, ps.count, ps.gpus_per_pod, ps.shared_claim) for ps in workload.pod_set_records
        ] == [("claim-pair-gpus", 1, 2, "pair-gpus")]
        assert workload.gpus == 2
        pods = real.active_job_pods("vision-train", "pair")
        assert len(pods) == 2 and {p["spec"]["nodeName"] for p in pods} == {"dra-h100"}

        def allocated() -> list[dict[str, Any]] | None:
            claim = real.read("ResourceClaim", "vision-train", "pair-gpus")
            allocation = (claim.get("status") or {}).get("allocation") or {}
            return (allocation.get("devices") or {}).get("results") or None

        results = real.wait_for(allocated, "the scheduler to allocate the shared claim")
        assert len(results) == 2 and {r["pool"] for r in results} == {"dra-h100"}
    finally:
        gateway.close()
        drop_shared_caches(f"dra-test-{cluster.pk}:")


def _claim(name: str, device_class_name: str, count: int) -> dict[str, Any]:
    """A ResourceClaim made by hand in vision-train, outside the queue."""
    return {
        "apiVersion": RESOURCE,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "vision-train"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": device_class_name, "count": count},
                    }
                ]
            }
        },
    }


@pytest.mark.django_db
def test_claims_made_outside_the_queue_are_refused_by_kubernetes_beyond_the_team_quota(
    dra: RealCluster, cast: Cast
) -> None:
    """`tidegate-gpu` carries the device-class keys: the team's guarantee of each class's
    flavours. Kubernetes refuses a hand-made claim beyond it; a claim within it is
    counted, and the queue's own Job still gets its claims (its namespace's limit rises
    by what the queue admitted) while nothing more fits outside the queue."""
    real = dra
    cluster, gateway = _queue_cluster(real, cast)
    # one namespace for the team, so that its quota carries the team's whole ceiling
    NamespaceBinding.objects.filter(namespace="vision-dev").delete()
    gpu_key = device_class_quota_key("gpu.nvidia.com")
    mig_key = device_class_quota_key("mig.nvidia.com")
    template = _template(
        "two-h100",
        [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}],
    )
    template["metadata"]["namespace"] = "vision-train"
    real.create_object(template)

    def counted(key: str, hard: str, used: str | None = None) -> bool | None:
        status = real.read("ResourceQuota", "vision-train", "tidegate-gpu").get("status") or {}
        ok = (status.get("hard") or {}).get(key) == hard
        return (ok and (used is None or (status.get("used") or {}).get(key) == used)) or None

    try:
        quota_sync(cluster, gateway, queue=queue_holdings(cluster))
        hard = real.read("ResourceQuota", "vision-train", "tidegate-gpu")["spec"]["hard"]
        # the team's guarantees: 2 H100s, 7 MIG slices; its nodes offer no extended resource
        assert {k: v for k, v in hard.items() if k.endswith("/devices")} == {
            gpu_key: "2",
            mig_key: "7",
        }, hard
        assert "requests.nvidia.com/gpu" not in hard, hard
        real.wait_for(lambda: counted(gpu_key, "2"), "the quota controller to take the limits")

        path = real.path("ResourceClaim", "vision-train")
        answer = real.request("POST", path, json=_claim("three", "gpu.nvidia.com", 3))
        assert answer.status_code == 403 and "exceeded quota" in answer.text, answer.text
        real.create_object(_claim("one", "gpu.nvidia.com", 1))
        real.wait_for(lambda: counted(gpu_key, "2", used="1"), "the quota to count the claim")

        # the queue admits a Job of two H100s on the team's guarantee (the hand-made claim
        # is allocated to nothing); its pod's claim is created and allocated
        real.create_object(_claim_job("queued", "two-h100"))
        jobs_sync(cluster, gateway)
        admission_cycle(cluster, gateway)
        workload = Workload.objects.get(cluster=cluster, job_name="queued")
        assert workload.state == Workload.State.RUNNING, workload.reason
        hard = real.read("ResourceQuota", "vision-train", "tidegate-gpu")["spec"]["hard"]
        assert hard[gpu_key] == "3", hard  # the hand-made claim's 1 and the Job's 2

        def job_claim() -> list[dict[str, Any]] | None:
            found = [
                c
                for c in real.objects("ResourceClaim", "vision-train")
                if (c["metadata"].get("ownerReferences") or [{}])[0]
                .get("name", "")
                .startswith("queued-")
                and (c.get("status") or {}).get("allocation")
            ]
            return found or None

        allocated = real.wait_for(job_claim, "the Job's pod's claim to be made and allocated")
        results = allocated[0]["status"]["allocation"]["devices"]["results"]
        assert {(r["pool"], r["request"]) for r in results} == {("dra-h100", "gpu")}
        assert len(results) == 2

        real.wait_for(lambda: counted(gpu_key, "3", used="3"), "the quota to count the Job")
        answer = real.request("POST", path, json=_claim("another", "gpu.nvidia.com", 1))
        assert answer.status_code == 403 and "exceeded quota" in answer.text, answer.text
    finally:
        gateway.close()


PRODUCT_IS_A100 = {
    "cel": {"expression": "device.attributes['gpu.nvidia.com'].productName.contains('A100')"}
}


@pytest.mark.django_db
def test_jobs_asking_for_part_of_a_gpu_through_consumable_capacity_share_it(
    dra: RealCluster, cast: Cast
) -> None:
    """A driver publishes one A100 for several claims at once (consumable capacity):
    its flavour is shared through DRA, in thousandths. Four Jobs whose claims take 20Gi
    of its 80Gi memory each are a quarter of it each: all four run, on that one device
    (the real scheduler allocates their claims there), the fifth waits for room."""
    real = dra
    real.add_node("dra-shared")
    shared_slice = node_slice("dra-shared", [gpu(0, A100, "80Gi", shared=True)])
    real.create_object(shared_slice)
    try:
        cluster, gateway = _queue_cluster(real, cast)
        a100 = Flavour.objects.get(cluster=cluster, name="a100-sxm4-80gb")
        assert (a100.sharing, a100.capacity) == (Flavour.Sharing.DRA, 1)
        hand_down([(cast.org, a100, 1), (cast.dept, a100, 1), (cast.team_a, a100, 1)])
        template = _template(
            "a100-quarter",
            [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "gpu.nvidia.com",
                        "selectors": [PRODUCT_IS_A100],
                        "capacity": {"requests": {"memory": "20Gi"}},
                    },
                }
            ],
        )
        template["metadata"]["namespace"] = "vision-train"
        real.create_object(template)
        names = [f"share-{i}" for i in range(5)]
        for name in names:
            real.create_object(_claim_job(name, "a100-quarter"))
            jobs_sync(cluster, gateway)
            admission_cycle(cluster, gateway)

        state = {w.job_name: w for w in Workload.objects.filter(cluster=cluster)}
        running = [n for n in names if state[n].state == Workload.State.RUNNING]
        assert running == names[:4], {n: (w.state, w.reason) for n, w in state.items()}
        for name in running:
            workload = state[name]
            assert workload.flavour == a100
            assert [(p.node, p.gpus) for p in workload.placement_records] == [("dra-shared", 250)]
        assert state["share-4"].state == Workload.State.PENDING
        assert "a100-sxm4-80gb" in state["share-4"].reason, state["share-4"].reason
        assert real.read("Job", "vision-train", "share-4")["spec"]["suspend"] is True

        def allocated() -> dict[str, list[dict[str, Any]]] | None:
            found: dict[str, list[dict[str, Any]]] = {}
            for claim in real.objects("ResourceClaim", "vision-train"):
                allocation = (claim.get("status") or {}).get("allocation") or {}
                results = (allocation.get("devices") or {}).get("results") or []
                owner = claim["metadata"]["ownerReferences"][0]["name"]
                if results:
                    found[owner.rsplit("-", 1)[0]] = results
            return found if len(found) == 4 else None

        claims = real.wait_for(allocated, "the scheduler to allocate the four shares")
        assert sorted(claims) == names[:4]
        for results in claims.values():
            assert [(r["pool"], r["device"]) for r in results] == [("dra-shared", "gpu-0")]
            assert results[0].get("consumedCapacity") == {"memory": "20Gi"}, results

        # metered and billed from admission, as a share of that flavour: a quarter of a
        # GPU (250 thousandths) for the team, for as long as the Job held it
        usage_collect(cluster=cluster, gateway=gateway, now=timezone.now() + timedelta(hours=2))
        for name in running:
            rows = UsageRecord.objects.filter(workload=state[name])
            assert rows.exists(), name
            assert {(r.tenant_id, r.flavour_id, r.devices) for r in rows} == {
                (cast.team_a.pk, a100.pk, 250)
            }, name
    finally:
        real.delete_object("ResourceSlice", None, shared_slice["metadata"]["name"])


def _queue_in_turn(
    real: RealCluster,
    cluster: Cluster,
    gateway: KubernetesGateway,
    template: str,
    requests: list[dict[str, Any]],
    jobs: tuple[str, ...],
) -> dict[str, Workload]:
    """``template`` in vision-train, then a Job of each of ``jobs`` naming it, each synced
    and given an admission cycle before the next: their workloads by Job name."""
    made = _template(template, requests)
    made["metadata"]["namespace"] = "vision-train"
    real.create_object(made)
    for name in jobs:
        real.create_object(_claim_job(name, template))
        jobs_sync(cluster, gateway)
        admission_cycle(cluster, gateway)
    return {w.job_name: w for w in Workload.objects.filter(cluster=cluster)}


def _claim_results(real: RealCluster, jobs: int) -> dict[str, list[dict[str, Any]]]:
    """Per Job of vision-train, its pod's claim's allocation results, once ``jobs`` Jobs'
    claims are allocated."""

    def allocated() -> dict[str, list[dict[str, Any]]] | None:
        found: dict[str, list[dict[str, Any]]] = {}
        for claim in real.objects("ResourceClaim", "vision-train"):
            allocation = (claim.get("status") or {}).get("allocation") or {}
            results = (allocation.get("devices") or {}).get("results") or []
            owner = claim["metadata"]["ownerReferences"][0]["name"]
            if results:
                found[owner.rsplit("-", 1)[0]] = results
        return found if len(found) == jobs else None

    return real.wait_for(allocated, f"the scheduler to allocate {jobs} Jobs' claims")


@pytest.mark.django_db
def test_a_prioritized_list_of_shares_of_different_sizes_takes_each_at_its_own_size(
    dra: RealCluster, cast: Cast
) -> None:
    """Each pod asks for 36Gi of a shared 48Gi L40S (750 thousandths), or else 20Gi of a
    shared 80Gi A100 (250): the first Job takes the L40S at 750, the second no longer fits
    there and takes the A100 at 250, and the scheduler allocates each that much of the
    device Tidegate admitted it on."""
    real = dra
    slices = [
        node_slice("dra-l40s", [gpu(0, "NVIDIA L40S", "48Gi", shared=True)]),
        node_slice("dra-shared", [gpu(0, A100, "80Gi", shared=True)]),
    ]
    for made in slices:
        real.add_node(made["spec"]["nodeName"])
        real.create_object(made)
    try:
        cluster, gateway = _queue_cluster(real, cast)
        l40s = Flavour.objects.get(cluster=cluster, name="l40s")
        a100 = Flavour.objects.get(cluster=cluster, name="a100-sxm4-80gb")
        assert {l40s.sharing, a100.sharing} == {Flavour.Sharing.DRA}
        for flavour in (l40s, a100):
            hand_down([(cast.org, flavour, 1), (cast.dept, flavour, 1), (cast.team_a, flavour, 1)])
        product_is_l40s = {
            "cel": {
                "expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L40S'"
            }
        }
        state = _queue_in_turn(
            real,
            cluster,
            gateway,
            "l40s-or-a100",
            [
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {
                            "name": "l40s",
                            "deviceClassName": "gpu.nvidia.com",
                            "selectors": [product_is_l40s],
                            "capacity": {"requests": {"memory": "36Gi"}},
                        },
                        {
                            "name": "a100",
                            "deviceClassName": "gpu.nvidia.com",
                            "selectors": [PRODUCT_IS_A100],
                            "capacity": {"requests": {"memory": "20Gi"}},
                        },
                    ],
                }
            ],
            ("first", "second"),
        )
        assert {n: w.state for n, w in state.items()} == {
            "first": Workload.State.RUNNING,
            "second": Workload.State.RUNNING,
        }, {n: w.reason for n, w in state.items()}
        assert [ps.per_flavour for ps in state["first"].pod_set_records] == [(750, 250)]
        placed = {
            n: (
                w.flavour.name if w.flavour else None,
                [(p.node, p.gpus) for p in w.placement_records],
            )
            for n, w in state.items()
        }
        assert placed == {
            "first": ("l40s", [("dra-l40s", 750)]),
            "second": ("a100-sxm4-80gb", [("dra-shared", 250)]),
        }

        claims = {job: results[0] for job, results in _claim_results(real, 2).items()}
        assert {
            job: (r["pool"], r["request"], r.get("consumedCapacity")) for job, r in claims.items()
        } == {
            "first": ("dra-l40s", "gpu/l40s", {"memory": "36Gi"}),
            "second": ("dra-shared", "gpu/a100", {"memory": "20Gi"}),
        }
    finally:
        for made in slices:
            real.delete_object("ResourceSlice", None, made["metadata"]["name"])


@pytest.mark.django_db
def test_a_prioritized_list_of_whole_gpus_or_else_a_share_runs_on_either(
    dra: RealCluster, cast: Cast
) -> None:
    """Each pod asks for two whole H100s, or else 20Gi of a shared 80Gi A100: the first
    Job takes the team's two H100s, the second (more H100s would be borrowed) a quarter
    of the A100 within the team's guarantee, each in its flavour's unit, and the
    scheduler allocates each on what Tidegate admitted it on."""
    real = dra
    real.add_node("dra-shared")
    shared_slice = node_slice("dra-shared", [gpu(0, A100, "80Gi", shared=True)])
    real.create_object(shared_slice)
    try:
        cluster, gateway = _queue_cluster(real, cast)
        a100 = Flavour.objects.get(cluster=cluster, name="a100-sxm4-80gb")
        hand_down([(cast.org, a100, 1), (cast.dept, a100, 1), (cast.team_a, a100, 1)])
        state = _queue_in_turn(
            real,
            cluster,
            gateway,
            "h100s-or-a100-quarter",
            [
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {
                            "name": "whole",
                            "deviceClassName": "gpu.nvidia.com",
                            "count": 2,
                            "selectors": [PRODUCT_IS_H100],
                        },
                        {
                            "name": "quarter",
                            "deviceClassName": "gpu.nvidia.com",
                            "selectors": [PRODUCT_IS_A100],
                            "capacity": {"requests": {"memory": "20Gi"}},
                        },
                    ],
                }
            ],
            ("first", "second"),
        )
        placed = {
            n: (
                w.state,
                w.flavour.name if w.flavour else None,
                [(p.node, p.gpus) for p in w.placement_records],
            )
            for n, w in state.items()
        }
        assert placed == {
            "first": (Workload.State.RUNNING, "h100-80gb", [("dra-h100", 2)]),
            "second": (Workload.State.RUNNING, "a100-sxm4-80gb", [("dra-shared", 250)]),
        }, {n: w.reason for n, w in state.items()}

        claims = {
            job: [(r["request"], str(r.get("consumedCapacity") or "")) for r in results]
            for job, results in _claim_results(real, 2).items()
        }
        assert claims == {
            "first": [("gpu/whole", "")] * 2,
            "second": [("gpu/quarter", "{'memory': '20Gi'}")],
        }
    finally:
        real.delete_object("ResourceSlice", None, shared_slice["metadata"]["name"])


@pytest.mark.django_db
def test_a_share_a_pod_outside_the_queue_holds_is_metered_for_its_team(
    dra: RealCluster, cast: Cast
) -> None:
    """A pod of speech's namespace, outside the queue, takes 40Gi of a shared 80Gi A100
    through its own claim: the scheduler allocates it that much of the device, and the
    ledger bills speech half a GPU for as long as the pod holds it."""
    real = dra
    real.add_node("dra-shared")
    real.add_namespace("speech-train")
    shared_slice = node_slice("dra-shared", [gpu(0, A100, "80Gi", shared=True)])
    real.create_object(shared_slice)
    try:
        cluster, gateway = _queue_cluster(real, cast)
        a100 = Flavour.objects.get(cluster=cluster, name="a100-sxm4-80gb")
        assert a100.sharing == Flavour.Sharing.DRA
        template = _template(
            "a100-half",
            [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "gpu.nvidia.com",
                        "selectors": [PRODUCT_IS_A100],
                        "capacity": {"requests": {"memory": "40Gi"}},
                    },
                }
            ],
        )
        template["metadata"]["namespace"] = "speech-train"
        real.create_object(template)
        real.create_object(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "notebook", "namespace": "speech-train"},
                "spec": {
                    "restartPolicy": "Never",
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "a100-half"}],
                    "containers": [
                        {
                            "name": "lab",
                            "image": "registry.example/lab:1",
                            "resources": {"claims": [{"name": "gpu"}]},
                        }
                    ],
                },
            }
        )

        def running() -> dict[str, Any] | None:
            pod = real.read("Pod", "speech-train", "notebook")
            return pod if (pod.get("status") or {}).get("phase") == "Running" else None

        pod = real.wait_for(running, "the scheduler to place the notebook on its share")
        (claim,) = real.objects("ResourceClaim", "speech-train")
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["device"], result.get("consumedCapacity")) == ("gpu-0", {"memory": "40Gi"})

        usage_collect(cluster=cluster, gateway=gateway, now=timezone.now() + timedelta(hours=2))
        rows = UsageRecord.objects.filter(
            pod_uid=pod["metadata"]["uid"], source=UsageRecord.Source.POD
        )
        assert rows.exists()
        assert {(r.tenant_id, r.flavour_id, r.devices) for r in rows} == {
            (cast.team_b.pk, a100.pk, 500)
        }
    finally:
        real.delete_object("ResourceSlice", None, shared_slice["metadata"]["name"])


@pytest.mark.django_db
def test_a_deployment_asking_through_claims_is_gated_queued_and_released_onto_its_devices(
    dra: RealCluster, cast: Cast, tidegate_webhook: str
) -> None:
    """Tidegate's webhook gates the pods a Deployment's ReplicaSet creates when they name
    ResourceClaimTemplates; the queue admits the group on the H100s their claims ask for
    (two each, borrowing two of the sibling's idle ones) and releases the pods pinned to
    the node it placed them on, where the real scheduler allocates their claims."""
    from scheduler_bridge.integrations.pods import GATE, group_uid

    real = dra
    cluster, gateway = _queue_cluster(real, cast)
    template = _template(
        "two-h100",
        [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}],
    )
    template["metadata"]["namespace"] = "vision-train"
    real.create_object(template)
    pod_spec = _claim_job("unused", "two-h100")["spec"]["template"]["spec"]
    pod_spec.pop("restartPolicy")
    real.create_object(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "serve", "namespace": "vision-train"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "serve"}},
                "template": {
                    "metadata": {"labels": {"app": "serve", "tidegate.io/queue": "vision"}},
                    "spec": pod_spec,
                },
            },
        }
    )

    def pods() -> list[dict[str, Any]]:
        return [
            p
            for p in real.objects("Pod", "vision-train")
            if p["metadata"].get("labels", {}).get("app") == "serve"
        ]

    def gated(pod: dict[str, Any]) -> bool:
        return any(g["name"] == GATE for g in pod["spec"].get("schedulingGates") or [])

    made = real.wait_for(
        lambda: (lambda p: p if len(p) == 2 else None)(pods()),
        "the ReplicaSet controller to create two pods",
    )
    assert all(gated(p) for p in made)
    try:
        jobs_sync(cluster, gateway)
        admission_cycle(cluster, gateway)
        replica_set = made[0]["metadata"]["ownerReferences"][0]["name"]
        workload = Workload.objects.get(job_uid=group_uid("vision-train", replica_set))
        assert (workload.kind, workload.state, workload.gpus) == ("PodGroup", "running", 4), (
            workload.reason
        )
        assert workload.flavour is not None and workload.flavour.name == "h100-80gb"
        assert [ps.claim_devices for ps in workload.pod_set_records] == [(("gpu.nvidia.com", 2),)]

        def running() -> list[dict[str, Any]] | None:
            now = pods()
            bound = [p for p in now if p["spec"].get("nodeName") and not gated(p)]
            return bound if len(bound) == 2 else None

        for pod in real.wait_for(running, "the released pods to be bound"):
            assert pod["spec"]["nodeName"] == "dra-h100"
            terms = pod["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]["nodeSelectorTerms"]
            assert terms == [
                {
                    "matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["dra-h100"]}
                    ]
                }
            ]

        def allocated() -> list[dict[str, Any]] | None:
            found = [
                c
                for c in real.objects("ResourceClaim", "vision-train")
                if (c.get("status") or {}).get("allocation")
            ]
            return found if len(found) == 2 else None

        for claim in real.wait_for(allocated, "the scheduler to allocate both pods' claims"):
            results = claim["status"]["allocation"]["devices"]["results"]
            assert [r["pool"] for r in results] == ["dra-h100", "dra-h100"]
    finally:
        real.delete_object("Deployment", "vision-train", "serve")
        gateway.close()


@pytest.mark.django_db
def test_a_job_asking_for_nvidia_gpu_is_served_through_the_class_that_maps_it(
    dra: RealCluster, cast: Cast
) -> None:
    """The driver's class serves `nvidia.com/gpu` (DRA extended resource): a queued Job
    asking for 2 `nvidia.com/gpu` on nodes that offer GPUs only through DRA is admitted
    on their flavour and pinned there; the scheduler serves its pod from the class's
    devices. The namespace quota limits the resource as well as the class (a pod asking
    for the resource outside the queue must not escape it), and the GPUs count once."""
    real = dra

    def maps(resource: str | None) -> Any:
        def change(device_class: dict[str, Any]) -> None:
            if resource:
                device_class["spec"]["extendedResourceName"] = resource
            else:
                device_class["spec"].pop("extendedResourceName", None)

        return change

    real.edit_object("DeviceClass", None, "gpu.nvidia.com", maps("nvidia.com/gpu"))
    cluster, gateway = _queue_cluster(real, cast)
    NamespaceBinding.objects.filter(namespace="vision-dev").delete()
    job = _claim_job("plain", "unused")
    pod_spec = job["spec"]["template"]["spec"]
    pod_spec.pop("resourceClaims")
    pod_spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    try:
        real.create_object(job)
        jobs_sync(cluster, gateway)
        admission_cycle(cluster, gateway)
        workload = Workload.objects.get(cluster=cluster, job_name="plain")
        assert workload.state == Workload.State.RUNNING, workload.reason
        assert workload.flavour is not None and workload.flavour.name == "h100-80gb"
        hard = real.read("ResourceQuota", "vision-train", "tidegate-gpu")["spec"]["hard"]
        assert hard["requests.nvidia.com/gpu"] == "2", hard
        assert hard[device_class_quota_key("gpu.nvidia.com")] == "2", hard

        def served() -> dict[str, Any] | None:
            pods = real.active_job_pods("vision-train", "plain")
            if not pods:
                return None
            pod = real.read("Pod", "vision-train", pods[0]["metadata"]["name"])
            return pod if pod["status"].get("phase") == "Running" else None

        pod = real.wait_for(served, "the scheduler to serve the pod through the class")
        assert pod["spec"]["nodeName"] == "dra-h100"
        inventory_sync(cluster, gateway, admitted=admitted_jobs)
        assert Node.objects.get(cluster=cluster, name="dra-h100").busy == {"nvidia.com/gpu": 2}
    finally:
        real.edit_object("DeviceClass", None, "gpu.nvidia.com", maps(None))
        gateway.close()


@pytest.mark.django_db
def test_a_prioritized_list_whose_alternatives_ask_different_numbers_runs_on_its_own(
    dra: RealCluster, cast: Cast
) -> None:
    """ "Two H100s, or else four MIG slices": with the team's two guaranteed H100s taken,
    the queue admits the slices inside its MIG guarantee (before borrowing H100s) at
    their own number, four; the real scheduler allocates four slices, and four are
    charged and metered."""
    real = dra
    cluster, gateway = _queue_cluster(real, cast)
    mig = Flavour.objects.get(cluster=cluster, name="a100-sxm4-80gb-mig-1g.10gb")
    templates = {
        "two-h100": TWO_H100,
        "h100-or-four-slices": _h100_or_slices(slices=4),
    }
    for name, requests in templates.items():
        made = _template(name, requests)
        made["metadata"]["namespace"] = "vision-train"
        real.create_object(made)
    try:
        for name, template in (("first", "two-h100"), ("either", "h100-or-four-slices")):
            real.create_object(_claim_job(name, template))
            jobs_sync(cluster, gateway)
            admission_cycle(cluster, gateway)
        either = Workload.objects.get(cluster=cluster, job_name="either")
        assert either.state == Workload.State.RUNNING, either.reason
        assert either.flavour == mig
        assert [(p.node, p.gpus) for p in either.placement_records] == [("dra-a100-mig", 4)]
        (pod_set,) = either.pod_set_records
        assert (pod_set.flavours, pod_set.per_flavour) == (
            ("h100-80gb", "a100-sxm4-80gb-mig-1g.10gb"),
            (2, 4),
        )
        assert pod_set.claim_devices == (("gpu.nvidia.com", 2), ("mig.nvidia.com", 4))

        def sliced() -> list[dict[str, Any]] | None:
            for claim in real.objects("ResourceClaim", "vision-train"):
                owner = claim["metadata"]["ownerReferences"][0]["name"]
                allocation = (claim.get("status") or {}).get("allocation") or {}
                results = (allocation.get("devices") or {}).get("results") or []
                if owner.startswith("either-") and results:
                    return list(results)
            return None

        results = real.wait_for(sliced, "the scheduler to allocate the four slices")
        assert [(r["pool"], r["request"]) for r in results] == [("dra-a100-mig", "gpu/slices")] * 4
        usage_collect(cluster=cluster, gateway=gateway, now=timezone.now() + timedelta(hours=2))
        rows = UsageRecord.objects.filter(workload=either)
        assert rows.exists()
        assert {(r.flavour_id, r.devices) for r in rows} == {(mig.pk, 4)}
    finally:
        gateway.close()


@pytest.mark.django_db
def test_devices_of_a_driver_an_admin_maps_count_as_its_flavour_and_are_queued(
    dra: RealCluster, cast: Cast
) -> None:
    """A driver that does not describe its GPUs as NVIDIA's does is never guessed at;
    once an admin maps it to a flavour (Cluster.dra_flavours), its devices are that
    flavour's capacity, and a Job claiming two of them is queued, admitted and
    allocated there."""
    real = dra
    real.add_node("dra-amd")
    amd_slice: dict[str, Any] = {
        "apiVersion": RESOURCE,
        "kind": "ResourceSlice",
        "metadata": {"name": "dra-amd-gpu.amd.com"},
        "spec": {
            "driver": "gpu.amd.com",
            "nodeName": "dra-amd",
            "pool": {"name": "dra-amd", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{i}",
                    "attributes": {"productName": {"string": "AMD Instinct MI300X"}},
                    "capacity": {"memory": {"value": "192Gi"}},
                }
                for i in range(4)
            ],
        },
    }
    amd_class = {
        "apiVersion": RESOURCE,
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.amd.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.amd.com'"}}]},
    }
    real.create_object(amd_slice)
    real.create_object(amd_class)
    try:
        cluster, gateway = _queue_cluster(real, cast)
        assert not Flavour.objects.filter(cluster=cluster, name="mi300x").exists()
        cluster.dra_flavours = {"gpu.amd.com": "mi300x"}
        cluster.save(update_fields=["dra_flavours"])
        inventory_sync(cluster, gateway, admitted=admitted_jobs)
        mi300x = Flavour.objects.get(cluster=cluster, name="mi300x")
        assert mi300x.capacity == 4
        assert Node.objects.get(cluster=cluster, name="dra-amd").gpu_count == 4
        hand_down([(cast.org, mi300x, 4), (cast.dept, mi300x, 4), (cast.team_a, mi300x, 4)])
        template = _template(
            "two-amd", [{"name": "gpu", "exactly": {"deviceClassName": "gpu.amd.com", "count": 2}}]
        )
        template["metadata"]["namespace"] = "vision-train"
        real.create_object(template)
        real.create_object(_claim_job("amd", "two-amd"))
        jobs_sync(cluster, gateway)
        admission_cycle(cluster, gateway)
        workload = Workload.objects.get(cluster=cluster, job_name="amd")
        assert workload.state == Workload.State.RUNNING, workload.reason
        assert workload.flavour == mi300x
        assert [(p.node, p.gpus) for p in workload.placement_records] == [("dra-amd", 2)]

        def allocated() -> list[dict[str, Any]] | None:
            for claim in real.objects("ResourceClaim", "vision-train"):
                results = ((claim.get("status") or {}).get("allocation") or {}).get(
                    "devices", {}
                ).get("results") or []
                if results:
                    return list(results)
            return None

        results = real.wait_for(allocated, "the scheduler to allocate the two MI300Xs")
        assert {(r["driver"], r["pool"]) for r in results} == {("gpu.amd.com", "dra-amd")}
        assert len(results) == 2
    finally:
        real.delete_object("ResourceSlice", None, amd_slice["metadata"]["name"])
        real.delete_object("DeviceClass", None, "gpu.amd.com")
