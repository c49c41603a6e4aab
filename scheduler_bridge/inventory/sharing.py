"""How a shared flavour's units meet Kubernetes' own: the device plugin advertises each
shared GPU as several units of its resource (time-slicing or MPS replicas, HAMi vGPUs),
and ResourceQuota counts those, while admission counts thousandths of a GPU."""

from __future__ import annotations

from scheduler_bridge.inventory.models import SHARE_UNITS_PER_GPU, Flavour, Node


def device_units_per_gpu(flavour: Flavour) -> int:
    """Units of its resource the device plugin advertises per GPU of ``flavour`` (its
    nodes' allocatable over their GPUs, at least 1; 1 for a flavour nobody shares)."""
    if not flavour.is_shared:
        return 1
    found = 1
    for allocatable, gpus in Node.objects.filter(
        cluster_id=flavour.cluster_id, present=True, product=flavour.product, gpu_count__gt=0
    ).values_list("allocatable", "gpu_count"):
        advertised = int((allocatable or {}).get(flavour.resource_name) or 0)
        found = max(found, advertised // gpus)
    return found


def as_device_units(flavour: Flavour, units: int) -> int:
    """Admission's units of ``flavour`` (thousandths of a GPU when shared) as units of
    its Kubernetes resource, rounded up."""
    if not flavour.is_shared:
        return units
    return -(-units * device_units_per_gpu(flavour) // SHARE_UNITS_PER_GPU)
