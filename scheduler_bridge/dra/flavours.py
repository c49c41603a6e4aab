"""Which Tidegate flavour a published device is.

A GPU published through DRA is the same flavour as the same GPU offered as an extended
resource (``h100-80gb``, ``h100-80gb-mig-1g.10gb``): one quota, one queue and one rate
card for both, whichever way a team asks. NVIDIA's DRA driver (``gpu.nvidia.com``) says
what a device is in its attributes: ``type`` (``gpu`` or ``mig``), ``productName`` (as
``nvidia-smi`` prints it, e.g. ``NVIDIA H100 80GB HBM3``) and, for a MIG device, its
``profile``; its ``memory`` capacity tells models apart where the name does not. A device
that several claims may share (``allowMultipleAllocations``, consumable capacity) is a
shared GPU, counted in thousandths like Tidegate's other shared flavours. Devices of
drivers Tidegate does not know are mapped by an admin (``mapped``), never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from scheduler_bridge.inventory.catalogue import (
    FULL_GPU_RESOURCE,
    CatalogueError,
    MigStrategy,
    flavour_name,
    mig_resource_name,
    product_from_gfd_label,
    profile_by_name,
)

from .objects import Device

NVIDIA_DRIVER = "gpu.nvidia.com"
MIB = Decimal(2**20)


@dataclass(frozen=True, slots=True)
class DeviceFlavour:
    name: str
    product: str
    mig_profile: str = ""
    shared: bool = False  # several claims share one device, each a part of its capacity

    @property
    def resource_name(self) -> str:
        """The extended resource the same GPUs have (``nvidia.com/gpu``, or the MIG
        profile's under the mixed strategy): what a device counts as in quotas, the
        ledger and the inventory's busy GPUs."""
        if self.mig_profile:
            return mig_resource_name(self.mig_profile, MigStrategy.MIXED)
        return FULL_GPU_RESOURCE


# names in a driver -> flavour map: a driver is a DNS subdomain (resource.k8s.io), a flavour
# as Tidegate names its flavours
DRIVER_NAME = re.compile(
    r"(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
FLAVOUR_NAME = re.compile(r"(?=.{1,120}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


def mapping_problems(mapped: object) -> list[str]:
    """What is wrong with an admin's map of DRA drivers to flavours (Cluster.dra_flavours),
    one sentence each saying how to fix it; empty when it is right."""
    if not isinstance(mapped, dict):
        return ['Give an object of driver name to flavour name, e.g. {"gpu.amd.com": "mi300x"}.']
    problems = []
    for driver, flavour in mapped.items():
        if not (isinstance(driver, str) and DRIVER_NAME.fullmatch(driver)):
            problems.append(
                f"{driver!r} is not a DRA driver name (a lowercase DNS subdomain of at most "
                "63 characters, such as gpu.amd.com)."
            )
        elif driver == NVIDIA_DRIVER:
            problems.append(
                f"{driver} devices are named from their own attributes; map other drivers."
            )
        if not (isinstance(flavour, str) and FLAVOUR_NAME.fullmatch(flavour)):
            problems.append(
                f"{flavour!r} (for {driver}) is not a flavour name: lowercase letters, digits, "
                "'-' and '.', at most 120 characters, such as mi300x."
            )
    return problems


def flavour_of(device: Device, mapped: Mapping[str, str] | None = None) -> DeviceFlavour | None:
    """The flavour ``device`` counts as, or None when it is no GPU Tidegate knows.
    ``mapped`` names flavours per driver for drivers without NVIDIA's attributes."""
    if device.driver != NVIDIA_DRIVER:
        name = (mapped or {}).get(device.driver)
        return DeviceFlavour(name=name, product=name) if name else None
    kind = device.attribute("type")
    product_name = device.attribute("productName")
    if kind not in ("gpu", "mig") or not isinstance(product_name, str):
        return None
    memory = device.capacity_of("memory")
    # GPU Feature Discovery's label is the same name with dashes for spaces
    label = "-".join(product_name.split())
    profile_name = ""
    if kind == "mig":
        profile = device.attribute("profile")
        if not isinstance(profile, str):
            return None
        # a MIG device's memory is its slice's: only the name identifies the product
        product = product_from_gfd_label(label)
        try:
            profile_name = (
                profile_by_name(product, profile).name if product.mig_capable else profile
            )
        except CatalogueError:
            profile_name = profile
    else:
        product = product_from_gfd_label(label, int(memory / MIB) if memory else None)
    return DeviceFlavour(
        name=flavour_name(product, profile_name),
        product=product.name,
        mig_profile=profile_name,
        shared=device.multiple_allocations,
    )


def devices_by_node(
    devices: Iterable[Device], mapped: Mapping[str, str] | None = None
) -> dict[str, dict[DeviceFlavour, int]]:
    """Per node, how many devices of each flavour its drivers publish. Devices several
    nodes reach (``allNodes``, a node selector) belong to no one node and are left out;
    a shared GPU counts once, however many claims may share it. Devices drawing on shared
    counters are a partitionable GPU's alternatives, counted through their GPU
    (dra.partitions), never each."""
    found: dict[str, dict[DeviceFlavour, int]] = {}
    for device in devices:
        if device.node is None or device.is_partition:
            continue
        flavour = flavour_of(device, mapped)
        if flavour is None:
            continue
        on_node = found.setdefault(device.node, {})
        on_node[flavour] = on_node.get(flavour, 0) + 1
    return found


def gpus_by_node(devices: Iterable[Device]) -> dict[str, list[dict[str, int] | None]]:
    """Per node, its physical GPUs in index order as its NVIDIA devices show them: None for
    a GPU published whole, else how many MIG devices of each profile it is split into.
    A whole GPU says its place in ``index``, a MIG device its GPU's in ``parentIndex``
    (NVIDIA's driver publishes both); without them, GPUs are told apart by ``uuid`` and
    ``parentUUID``, then by name (a MIG device's ``gpu-<minor>-mig-`` prefix). What the
    MIG planner reads as the node's current layout. Partitionable GPUs (devices drawing
    on shared counters) are dra.partitions'."""
    found: dict[str, dict[tuple[int, int | str], dict[str, int] | None]] = {}
    for device in devices:
        if device.node is None or device.driver != NVIDIA_DRIVER or device.is_partition:
            continue
        kind = device.attribute("type")
        gpus = found.setdefault(device.node, {})
        if kind == "gpu":
            gpus.setdefault(_gpu_key(device, "index", "uuid", device.name), None)
        elif kind == "mig":
            key = _gpu_key(device, "parentIndex", "parentUUID", device.name.split("-mig-")[0])
            profile = device.attribute("profile")
            counts = gpus.get(key) or {}
            if isinstance(profile, str):
                counts[profile] = counts.get(profile, 0) + 1
            gpus[key] = counts
    return {node: [gpus[key] for key in sorted(gpus)] for node, gpus in found.items()}


def _gpu_key(device: Device, index: str, uuid: str, name: str) -> tuple[int, int | str]:
    """Which physical GPU ``device`` is (or is part of), in an order that sorts GPUs by
    index where the driver says it."""
    number = device.attribute(index)
    if isinstance(number, int) and not isinstance(number, bool):
        return (0, number)
    text = device.attribute(uuid)
    return (1, text if isinstance(text, str) else name)
