"""GPUs a driver publishes as partitionable devices, and the layout each one counts as.

A driver that splits GPUs on demand (Kubernetes' partitionable devices, KEP-4815, beta
and on by default since 1.36) publishes each GPU whole and every MIG device it could be
split into, all drawing on one shared counter set (NVIDIA's driver: one set per GPU, a
counter per memory slice and per capacity). The scheduler allocates any combination the
counters allow, so the devices are alternatives, not a sum: such a GPU is one GPU.

Which of its partitions it offers is Tidegate's choice, as for a GPU MIG Manager
reconfigures: the MIG planner lays it out by the teams' MIG guarantees and the layout
takes effect at once (the driver creates the MIG device when a claim gets it). Until a
layout is chosen a GPU counts as what claims hold on it now, else whole. A layout never
drops a partition a claim holds.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from scheduler_bridge.inventory.catalogue import GpuProduct
from scheduler_bridge.mig.layouts import (
    MigLayout,
    counts_realisable,
    is_legal_layout,
    layout_from_counts,
    legal_layouts,
)

from .flavours import DeviceFlavour, flavour_of
from .objects import Device

WHOLE = ""  # the profile key of a GPU's whole device


@dataclass(frozen=True, slots=True)
class PartitionableGpu:
    node: str
    counter_set: tuple[str, str, str]  # (driver, pool, counter set) its devices draw on
    # per MIG profile (WHOLE for the GPU whole), the flavour of the devices published
    flavours: Mapping[str, DeviceFlavour]
    # per MIG profile (WHOLE for the GPU whole), how many of its devices claims hold now
    in_use: Mapping[str, int]
    # per MIG profile (WHOLE for the GPU whole), how many devices the driver publishes
    published: Mapping[str, int]

    @property
    def product(self) -> str:
        return min(flavour.product for flavour in self.flavours.values())


def is_partition(device: Device) -> bool:
    """The device draws on shared counters: one of a partitionable GPU's alternatives,
    counted through its GPU (:func:`partitionable_gpus`), never on its own."""
    return bool(device.consumes)


def partitionable_gpus(
    devices: Iterable[Device],
    allocated: Collection[tuple[str, str, str]] = (),
    mapped: Mapping[str, str] | None = None,
) -> dict[str, list[PartitionableGpu]]:
    """Per node, its partitionable GPUs in counter-set order. ``allocated``: the devices
    claims hold ((driver, pool, device), from their allocation results). Devices several
    nodes reach, and devices that are no GPU Tidegate knows, are left out."""
    groups: dict[tuple[str, tuple[str, str, str]], tuple[dict, dict, dict]] = {}
    for device in devices:
        if device.node is None or not is_partition(device):
            continue
        flavour = flavour_of(device, mapped)
        if flavour is None:
            continue
        # (a device may draw on two sets; the first by name is its GPU's)
        key = (device.node, (device.driver, device.pool, min(device.consumes)))
        flavours, in_use, published = groups.setdefault(key, ({}, {}, {}))
        flavours.setdefault(flavour.mig_profile, flavour)
        published[flavour.mig_profile] = published.get(flavour.mig_profile, 0) + 1
        if device.key in allocated:
            in_use[flavour.mig_profile] = in_use.get(flavour.mig_profile, 0) + 1
    found: dict[str, list[PartitionableGpu]] = {}
    for (node, counter_set), (flavours, in_use, published) in sorted(groups.items()):
        found.setdefault(node, []).append(
            PartitionableGpu(node, counter_set, flavours, in_use, published)
        )
    return found


def most_of(gpu: PartitionableGpu, product: GpuProduct | None, profile: str) -> int:
    """The most devices of ``profile`` (WHOLE: the GPU whole) ``gpu`` can offer at once:
    what its flavour's capacity counts, whichever layout the MIG planner chooses."""
    published = gpu.published.get(profile, 0)
    if profile == WHOLE:
        return min(published, 1)
    if product is None or not product.mig_capable:
        return published
    return min(published, _most_instances(product, profile))


@functools.lru_cache(maxsize=256)
def _most_instances(product: GpuProduct, profile: str) -> int:
    return max((layout.counts().get(profile, 0) for layout in legal_layouts(product)), default=0)


def _keeps(product: GpuProduct, layout: MigLayout, held: Mapping[str, int]) -> bool:
    """``layout`` is legal for ``product`` and keeps every partition claims hold."""
    if not layout.mig_enabled:
        return not held
    counts = layout.counts()
    return is_legal_layout(product, layout) and all(
        counts.get(profile, 0) >= n for profile, n in held.items()
    )


def partition_layout(
    gpu: PartitionableGpu, product: GpuProduct | None, chosen: MigLayout | None
) -> MigLayout:
    """The layout ``gpu`` counts as: the ``chosen`` one (the MIG planner's) when it is
    legal and keeps what claims hold; else what claims hold; else whole."""
    if gpu.in_use.get(WHOLE) or product is None or not product.mig_capable:
        return MigLayout.disabled()
    held = {profile: n for profile, n in gpu.in_use.items() if profile != WHOLE and n}
    if chosen is not None and _keeps(product, chosen, held):
        return chosen
    if held and counts_realisable(product, held):
        return layout_from_counts(product, held)
    return MigLayout.disabled()


def layout_devices(gpu: PartitionableGpu, layout: MigLayout) -> dict[DeviceFlavour, int]:
    """The devices ``gpu`` offers laid out as ``layout``: itself whole, or its
    partitions (profiles its driver does not publish offer nothing)."""
    if not layout.mig_enabled:
        whole = gpu.flavours.get(WHOLE)
        return {whole: 1} if whole is not None else {}
    found: dict[DeviceFlavour, int] = {}
    for profile, count in layout.counts().items():
        flavour = gpu.flavours.get(profile)
        if flavour is not None:
            found[flavour] = found.get(flavour, 0) + count
    return found
