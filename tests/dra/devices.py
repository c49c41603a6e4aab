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
