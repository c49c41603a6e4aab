"""Devices, slices and device classes shaped as NVIDIA's DRA driver publishes them
(driver gpu.nvidia.com, one pool per node named after it; attributes type, productName,
profile, driverVersion; capacity memory) and the classes its chart installs."""

from __future__ import annotations

from typing import Any

GPU_CLASS: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ],
        "extendedResourceName": "nvidia.com/gpu",
    },
}
MIG_CLASS: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "mig.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'mig'"
                }
            }
        ]
    },
}


def gpu(index: int, product: str, memory: str, *, shared: bool = False) -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "index": {"int": index},
            "uuid": {"string": f"GPU-{index}"},
            "productName": {"string": product},
            "architecture": {"string": "Hopper"},
            "driverVersion": {"version": "570.124.6"},
        },
        "capacity": {"memory": {"value": memory}},
    }
    if shared:
        device["allowMultipleAllocations"] = True
    return device


def mig(parent: int, profile: str, placement: int, product: str) -> dict[str, Any]:
    return {
        "name": f"gpu-{parent}-mig-{profile.replace('.', '')}-{placement}",
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": profile},
            "productName": {"string": product},
            "parentUUID": {"string": f"GPU-{parent}"},
            "parentIndex": {"int": parent},
        },
        "capacity": {"memory": {"value": "9856Mi"}, "multiprocessors": {"value": "16"}},
    }


def node_slice(node: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


# H100 MIG placements (NVIDIA's MIG user guide, H100 profiles): 1g.10gb on any of the
# 7 first memory slices, 3g.40gb at slice 0 or 4, each taking that many memory slices
H100_PARTITIONS = {"1g.10gb": (range(7), 1, 16), "3g.40gb": ((0, 4), 4, 60)}


def partitionable_gpu_slices(node: str, gpus: int) -> list[dict[str, Any]]:
    """``gpus`` H100s on ``node`` as a driver splitting GPUs on claim publishes them
    (partitionable devices, resource.k8s.io/v1): a slice of counter sets (per GPU one
    counter per memory slice and the streaming multiprocessors) and a slice of devices,
    each GPU whole (taking every counter) and each MIG placement (taking its slices)."""
    pool = {"name": f"{node}-split", "generation": 1, "resourceSliceCount": 2}
    everything = {f"memory-slice-{i}": {"value": "1"} for i in range(8)}
    everything["multiprocessors"] = {"value": "132"}
    counter_sets = []
    devices = []
    for index in range(gpus):
        counter_set = f"gpu-{index}-counter-set"
        counter_sets.append({"name": counter_set, "counters": everything})
        whole = gpu(index, H100, "80Gi")
        whole["consumesCounters"] = [{"counterSet": counter_set, "counters": everything}]
        devices.append(whole)
        for profile, (starts, size, multiprocessors) in H100_PARTITIONS.items():
            for start in starts:
                partition = mig(index, profile, start, H100)
                taken = {f"memory-slice-{s}": {"value": "1"} for s in range(start, start + size)}
                taken["multiprocessors"] = {"value": str(multiprocessors)}
                partition["consumesCounters"] = [{"counterSet": counter_set, "counters": taken}]
                devices.append(partition)
    spec = {"driver": "gpu.nvidia.com", "nodeName": node, "pool": pool}
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-counters"},
            "spec": {**spec, "sharedCounters": counter_sets},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-devices"},
            "spec": {**spec, "devices": devices},
        },
    ]
