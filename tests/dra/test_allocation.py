"""What pods hold through their claims once allocated: counted as the extended resource
the same GPUs have, for the pod that owns the claim only."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler_bridge.dra.allocation import ClaimedGpus, claim_allocation
from tests.dra.devices import A100, H100, gpu, mig, node_slice

SLICES = [
    node_slice("h100-1", [gpu(i, H100, "80Gi") for i in range(4)]),
    node_slice("a100-mig", [mig(0, "1g.10gb", p, A100) for p in range(3)]),
]


def claim(name: str, owner: str | None, devices: list[tuple[str, str]]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml"}
    if owner:
        meta["ownerReferences"] = [{"kind": "Pod", "name": owner, "uid": owner}]
    results = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": pool, "device": device}
        for pool, device in devices
    ]
    return {"metadata": meta, "status": {"allocation": {"devices": {"results": results}}}}


def test_a_pods_own_allocated_claims_count_as_its_extended_resources() -> None:
    claims = [
        claim("a-gpus", "pod-a", [("h100-1", "gpu-0"), ("h100-1", "gpu-1")]),
        claim("b-slices", "pod-b", [("a100-mig", "gpu-0-mig-1g10gb-0")]),
        claim("b-more", "pod-b", [("a100-mig", "gpu-0-mig-1g10gb-1")]),
        claim("shared", None, [("h100-1", "gpu-2")]),  # several pods' claim: not per pod
        claim("pending", "pod-c", []),  # not allocated yet
        claim("gone", "pod-d", [("h100-9", "gpu-0")]),  # a device no slice publishes now
    ]
    held = ClaimedGpus((claim_allocation(c) for c in claims), SLICES)
    assert held.of_pod("pod-a") == {"nvidia.com/gpu": 2}
    assert held.of_pod("pod-b") == {"nvidia.com/mig-1g.10gb": 2}
    assert held.of_pod("pod-c") == held.of_pod("pod-d") == held.of_pod("nobody") == {}


def test_a_pod_keeps_what_it_asks_as_resources_apart_from_what_its_claims_hold() -> None:
    """Kubernetes' ResourceQuota counts only containers' requests under
    ``requests.<resource>``; a pod's claims are counted under their device classes."""
    from scheduler_bridge.gateways.base import PodInfo, _add_claimed

    asked = PodInfo("u", "p", "ml", "h100-1", "Running", gpu_requests={"nvidia.com/gpu": 1})
    pod = _add_claimed(asked, {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 1}, {})
    assert pod.gpu_requests == {"nvidia.com/gpu": 3, "nvidia.com/mig-1g.10gb": 1}
    assert pod.resource_requests == {"nvidia.com/gpu": 1}
    only_claims = _add_claimed(replace(asked, gpu_requests={}), {"nvidia.com/gpu": 2}, {})
    assert only_claims.resource_requests == {}
    assert asked.resource_requests == {"nvidia.com/gpu": 1}


def test_part_of_a_shared_gpu_counts_in_thousandths_by_the_capacity_consumed() -> None:
    """Consumable capacity: claims sharing one 80Gi A100 hold what their allocation
    consumed of it (20Gi: 250 thousandths), kept apart from whole devices."""
    slices = [*SLICES, node_slice("shared-1", [gpu(0, A100, "80Gi", shared=True)])]
    quarter = claim("quarter", "pod-q", [("shared-1", "gpu-0")])
    quarter["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {
        "memory": "20Gi"
    }
    everything = claim("all", "pod-all", [("shared-1", "gpu-0")])  # consumed nothing named
    held = ClaimedGpus((claim_allocation(c) for c in (quarter, everything)), slices)
    assert held.shares_of_pod("pod-q") == {"nvidia.com/gpu": 250}
    assert held.shares_of_pod("pod-all") == {"nvidia.com/gpu": 1000}
    assert held.of_pod("pod-q") == held.of_pod("pod-all") == {}
