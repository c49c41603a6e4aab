"""DRA on the real control plane: the API server stores the driver's slices, classes and a
team's claim template; the real scheduler allocates the claim of a pod; Tidegate's reading
of the same objects (as the server returns them, defaults filled in) must agree with what
the scheduler allocated and with what Kubernetes' ResourceQuota charges."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler_bridge.dra.demand import (
    Inventory,
    device_class_counts,
    device_class_quota_key,
    pod_claims,
)
from scheduler_bridge.dra.flavours import flavour_of
from scheduler_bridge.dra.objects import claim_spec, device_class, devices_of_slice
from tests.dra.devices import A100, GPU_CLASS, H100, MIG_CLASS, gpu, mig, node_slice
from tests.kube_real.cluster import RealCluster

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


def test_the_scheduler_allocates_the_first_alternative_tidegate_computed(dra: RealCluster) -> None:
    dra.create_object(
        _template(
            "gpus-or-slices",
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
                        {"name": "slices", "deviceClassName": "mig.nvidia.com", "count": 3},
                    ],
                }
            ],
        )
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": NAMESPACE},
        "spec": {
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpus-or-slices"}],
            "containers": [
                {"name": "main", "image": "trainer", "resources": {"claims": [{"name": "gpus"}]}}
            ],
        },
    }
    dra.create_object(pod)
    inventory = _inventory(dra)
    stored = dra.read("ResourceClaimTemplate", NAMESPACE, "gpus-or-slices")
    spec = claim_spec(stored["spec"]["spec"], "template gpus-or-slices")
    (entry,) = pod_claims(dra.read("Pod", NAMESPACE, "trainer")["spec"]).per_pod
    demand = inventory.request_demand(entry[0], spec.requests[0])
    assert [(a.flavour, a.amount) for a in demand.alternatives] == [
        ("h100-80gb", 2),
        ("a100-sxm4-80gb-mig-1g.10gb", 3),
    ]

    def allocated() -> list[dict[str, Any]] | None:
        for claim in dra.objects("ResourceClaim", NAMESPACE):
            results = (
                ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
            ).get("results")
            if results:
                return list(results)
        return None

    results = dra.wait_for(allocated, "the scheduler to allocate the pod's claim")
    assert {r["request"] for r in results} == {"gpu/whole"}
    by_key = {d.key: d for d in inventory.devices}
    flavours = {
        inventory.flavour(by_key[(r["driver"], r["pool"], r["device"])]).name  # type: ignore[union-attr]
        for r in results
    }
    assert flavours == {demand.alternatives[0].flavour}
    assert len(results) == demand.alternatives[0].amount
    assert dra.read("Pod", NAMESPACE, "trainer")["spec"].get("nodeName") == "dra-h100"


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
