"""DRA claims to flavour demand, on devices shaped as NVIDIA's DRA driver publishes them
(driver gpu.nvidia.com, one pool per node; attributes type, productName, profile;
capacity memory) and the device classes its chart installs."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from scheduler_bridge.dra.demand import (
    Alternative,
    Inventory,
    device_class_counts,
    device_class_quota_key,
    pod_claims,
    pod_need,
)
from scheduler_bridge.dra.flavours import flavour_of
from scheduler_bridge.dra.objects import DraError, claim_spec, device_class, devices_of_slice
from scheduler_bridge.dra.selectors import SelectorError, evaluate
from tests.dra.devices import A100, GPU_CLASS, H100, MIG_CLASS, gpu, mig, node_slice


@pytest.fixture
def inventory() -> Inventory:
    slices = [
        node_slice("h100-1", [gpu(i, H100, "80Gi") for i in range(8)]),
        node_slice("h100-2", [gpu(i, H100, "80Gi") for i in range(8)]),
        node_slice("a100-1", [gpu(i, A100, "80Gi") for i in range(4)]),
        node_slice("a100-mig", [mig(0, "1g.10gb", p, A100) for p in range(7)]),
        node_slice("h100-shared", [gpu(0, H100, "80Gi", shared=True)]),
    ]
    devices = [d for s in slices for d in devices_of_slice(s)]
    classes = [device_class(GPU_CLASS), device_class(MIG_CLASS)]
    return Inventory(devices, classes, flavour_of)


def request(**exactly: Any) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}


def demand(inventory: Inventory, spec: dict[str, Any]) -> tuple[Alternative, ...]:
    parsed = claim_spec(spec, "template t")
    return pod_need([inventory.request_demand("c", r) for r in parsed.requests], "pod")


def test_devices_are_the_flavours_the_same_gpus_have_as_extended_resources(
    inventory: Inventory,
) -> None:
    names = {inventory.flavour(d).name for d in inventory.devices}  # type: ignore[union-attr]
    assert names == {"h100-80gb", "a100-sxm4-80gb", "a100-sxm4-80gb-mig-1g.10gb"}
    shared = [d for d in inventory.devices if d.multiple_allocations]
    assert inventory.flavour(shared[0]).shared  # type: ignore[union-attr]


def test_a_class_without_selectors_of_its_own_offers_every_product_in_flavour_order(
    inventory: Inventory,
) -> None:
    need = demand(inventory, request(deviceClassName="gpu.nvidia.com", count=2))
    assert [(a.flavour, a.amount) for a in need if not a.shared] == [
        ("a100-sxm4-80gb", 2),
        ("h100-80gb", 2),
    ]


def test_a_selector_on_the_product_narrows_to_one_flavour(inventory: Inventory) -> None:
    need = demand(
        inventory,
        request(
            deviceClassName="gpu.nvidia.com",
            count=4,
            selectors=[
                {
                    "cel": {
                        "expression": "device.attributes['gpu.nvidia.com'].productName"
                        ".lowerAscii().contains('h100') && !device.allowMultipleAllocations"
                    }
                }
            ],
        ),
    )
    assert need == (Alternative("h100-80gb", 4),)


def test_a_capacity_selector_compares_quantities(inventory: Inventory) -> None:
    need = demand(
        inventory,
        request(
            deviceClassName="mig.nvidia.com",
            selectors=[
                {
                    "cel": {
                        "expression": "device.capacity['gpu.nvidia.com'].memory"
                        ".compareTo(quantity('8Gi')) >= 0"
                    }
                }
            ],
        ),
    )
    assert need == (Alternative("a100-sxm4-80gb-mig-1g.10gb", 1),)


def test_a_prioritized_list_is_flavour_alternatives_in_its_order(inventory: Inventory) -> None:
    spec = {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {
                            "name": "big",
                            "deviceClassName": "gpu.nvidia.com",
                            "count": 8,
                            "selectors": [
                                {
                                    "cel": {
                                        "expression": "device.attributes['gpu.nvidia.com']"
                                        ".productName == 'NVIDIA H100 80GB HBM3'"
                                    }
                                }
                            ],
                        },
                        {"name": "slice", "deviceClassName": "mig.nvidia.com", "count": 2},
                    ],
                }
            ]
        }
    }
    need = demand(inventory, spec)
    assert [(a.flavour, a.amount) for a in need] == [
        ("h100-80gb", 8),
        ("a100-sxm4-80gb-mig-1g.10gb", 2),
    ]
    # Kubernetes' quota charges the largest count per class of a prioritized list
    assert device_class_counts([claim_spec(spec, "t")]) == {
        "gpu.nvidia.com": 8,
        "mig.nvidia.com": 2,
    }


def test_all_needs_every_matching_device_of_the_node(inventory: Inventory) -> None:
    need = demand(
        inventory,
        request(
            deviceClassName="gpu.nvidia.com",
            allocationMode="All",
            selectors=[
                {
                    "cel": {
                        "expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3' && !device.allowMultipleAllocations"
                    }
                }
            ],
        ),
    )
    assert need == (Alternative("h100-80gb", 8),)
    spec = claim_spec(request(deviceClassName="gpu.nvidia.com", allocationMode="All"), "t")
    assert device_class_counts([spec]) == {"gpu.nvidia.com": 32}


def test_a_shared_gpu_counts_the_capacity_claimed_in_thousandths(inventory: Inventory) -> None:
    spec = request(
        deviceClassName="gpu.nvidia.com",
        selectors=[{"cel": {"expression": "device.allowMultipleAllocations"}}],
        capacity={"requests": {"memory": "20Gi"}},
    )
    assert demand(inventory, spec) == (Alternative("h100-80gb", 250, shared=True),)


def test_a_pods_requests_add_up_on_the_flavour_they_share(inventory: Inventory) -> None:
    spec = {
        "devices": {
            "requests": [
                {"name": "a", "exactly": {"deviceClassName": "mig.nvidia.com", "count": 2}},
                {"name": "b", "exactly": {"deviceClassName": "mig.nvidia.com"}},
            ]
        }
    }
    assert demand(inventory, spec) == (Alternative("a100-sxm4-80gb-mig-1g.10gb", 3),)


def test_requests_of_different_flavours_in_one_pod_are_refused_with_what_each_asks(
    inventory: Inventory,
) -> None:
    spec = {
        "devices": {
            "requests": [
                {"name": "a", "exactly": {"deviceClassName": "mig.nvidia.com"}},
                {
                    "name": "b",
                    "exactly": {
                        "deviceClassName": "gpu.nvidia.com",
                        "selectors": [
                            {
                                "cel": {
                                    "expression": "device.attributes['gpu.nvidia.com'].productName.contains('H100')"
                                }
                            }
                        ],
                    },
                },
            ]
        }
    }
    with pytest.raises(DraError, match="different flavours .*c/a: a100-sxm4-80gb-mig-1g.10gb"):
        demand(inventory, spec)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            request(deviceClassName="tpu.example.com"),
            "device class 'tpu.example.com' does not exist \\(the cluster's: gpu.nvidia.com, mig.nvidia.com\\)",
        ),
        (
            request(
                deviceClassName="gpu.nvidia.com",
                selectors=[
                    {
                        "cel": {
                            "expression": "device.attributes['gpu.nvidia.com'].productName == 'B200'"
                        }
                    }
                ],
            ),
            "no published device meets device class 'gpu.nvidia.com' and the request's selectors",
        ),
        (
            request(
                deviceClassName="gpu.nvidia.com",
                count=9,
                selectors=[{"cel": {"expression": "!device.allowMultipleAllocations"}}],
            ),
            "asks for 9 devices of class 'gpu.nvidia.com' on one node; a100-sxm4-80gb: at most 4 on a node, h100-80gb: at most 8",
        ),
        (
            request(
                deviceClassName="mig.nvidia.com",
                selectors=[
                    {"cel": {"expression": "device.attributes['gpu.nvidia.com'].nosuch == 'x'"}}
                ],
            ),
            "selector error: no such member in mapping: 'nosuch'",
        ),
    ],
)
def test_requests_no_device_can_serve_say_why(
    inventory: Inventory, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(DraError, match=message):
        demand(inventory, spec)


def test_a_selector_that_is_not_cel_is_refused_before_anything_is_matched(
    inventory: Inventory,
) -> None:
    with pytest.raises(SelectorError, match="is not valid CEL"):
        demand(
            inventory,
            request(
                deviceClassName="gpu.nvidia.com", selectors=[{"cel": {"expression": "device.("}}]
            ),
        )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"name": "x", "exactly": {"deviceClassName": "g", "count": 0}},
            "count must be a whole number from 1",
        ),
        (
            {"name": "x", "exactly": {"deviceClassName": "g", "allocationMode": "Some"}},
            "allocationMode 'Some'",
        ),
        ({"name": "x"}, "give exactly one of exactly and firstAvailable"),
        ({"name": "x", "exactly": {"count": 1}}, "deviceClassName is required"),
    ],
)
def test_malformed_requests_say_what_is_wrong(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(DraError, match=message):
        claim_spec({"devices": {"requests": [raw]}}, "claim c")


def test_pod_claims_split_per_pod_templates_from_shared_claims() -> None:
    claims = pod_claims(
        {
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                {"name": "shared", "resourceClaimName": "team-gpu"},
            ]
        }
    )
    assert claims.per_pod == (("gpu", "one-gpu"),)
    assert claims.shared == (("shared", "team-gpu"),)
    with pytest.raises(DraError, match="exactly one of resourceClaimTemplateName"):
        pod_claims({"resourceClaims": [{"name": "x"}]})


def test_versions_and_missing_domains_evaluate_as_kubernetes_does(inventory: Inventory) -> None:
    device = inventory.devices[0]
    newer = "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))"
    assert evaluate(newer, device) is True
    # another driver's domain is an empty map: guarded by the driver test, no error
    assert (
        evaluate(
            "device.driver == 'x.example.com' && device.attributes['x.example.com'].a == 1", device
        )
        is False
    )
    assert device.capacity_of("memory") == Decimal(80 * 2**30)


def test_device_class_quota_key_is_kubernetes_own() -> None:
    assert (
        device_class_quota_key("gpu.nvidia.com")
        == "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
    )


def test_a_nodes_gpus_are_read_in_index_order_whether_whole_or_split() -> None:
    """GPU 0 whole, GPU 1 split into two 3g devices, GPU 2 whole: the MIG planner's
    layouts follow the GPUs' indexes (a wrong order would reconfigure the wrong GPU)."""
    from scheduler_bridge.dra.flavours import gpus_by_node

    devices = devices_of_slice(
        node_slice(
            "mixed",
            [
                gpu(2, A100, "80Gi"),
                mig(1, "3g.40gb", 4, A100),
                gpu(0, A100, "80Gi"),
                mig(1, "3g.40gb", 0, A100),
            ],
        )
    )
    assert gpus_by_node(devices) == {"mixed": [None, {"3g.40gb": 2}, None]}
    # a driver without indexes: told apart by UUIDs (GPU-0 < GPU-1 < GPU-2)
    for device in devices:
        for kind in ("index", "parentIndex"):
            device.attributes["gpu.nvidia.com"].pop(kind, None)  # type: ignore[attr-defined]
    assert gpus_by_node(devices) == {"mixed": [None, {"3g.40gb": 2}, None]}
