"""GPUs a driver publishes as partitionable devices, and the layout each one counts as.

A driver that splits GPUs on demand (Kubernetes' partitionable devices, KEP-4815, beta
and on by default since 1.36) publishes each GPU whole and every MIG device it could be
split into, all drawing on one shared counter set (NVIDIA's driver: one set per GPU, a
counter per memory slice and per capacity). The scheduler allocates any combination the
counters allow, so the devices are alternatives, not a sum: such a GPU is one GPU.

Which of its partitions it offers is Tidegate's choice, as for a GPU MIG Manager
reconfigures: the MIG planner lays it out by the teams' MIG guarantees and the layout
takes effect at once (the driver creates the MIG device when a claim gets it). Until a
layout is chosen a GPU counts as what claims hold on it now, else whole. A layout is
taken only where the counters still give it beside what claims hold: the scheduler, not
Tidegate, chose where the held partitions sit.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

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
class Part:
    """One device a partitionable GPU publishes: the GPU whole or one MIG placement."""

    profile: str  # WHOLE for the GPU whole
    consumes: Mapping[str, Decimal]  # of the GPU's counter set, per counter
    held: bool  # a claim holds it now


@dataclass(frozen=True, slots=True)
class PartitionableGpu:
    node: str
    counter_set: tuple[str, str, str]  # (driver, pool, counter set) its devices draw on
    # per MIG profile (WHOLE for the GPU whole), the flavour of the devices published
    flavours: Mapping[str, DeviceFlavour]
    parts: tuple[Part, ...]
    # what the counter set holds in all, per counter (None: its slice was not read)
    counters: Mapping[str, Decimal] | None = None

    @property
    def product(self) -> str:
        return min(flavour.product for flavour in self.flavours.values())

    @property
    def in_use(self) -> dict[str, int]:
        """Per MIG profile (WHOLE for the GPU whole), how many of its devices claims hold."""
        found: dict[str, int] = {}
        for part in self.parts:
            if part.held:
                found[part.profile] = found.get(part.profile, 0) + 1
        return found

    @property
    def published(self) -> dict[str, int]:
        """Per MIG profile (WHOLE for the GPU whole), how many devices are published."""
        found: dict[str, int] = {}
        for part in self.parts:
            found[part.profile] = found.get(part.profile, 0) + 1
        return found


def partitionable_gpus(
    devices: Iterable[Device],
    allocated: Collection[tuple[str, str, str]] = (),
    mapped: Mapping[str, str] | None = None,
    counter_sets: Mapping[tuple[str, str, str], Mapping[str, Decimal]] | None = None,
) -> dict[str, list[PartitionableGpu]]:
    """Per node, its partitionable GPUs in the order of the whole device's ``index`` (then
    of counter-set name). ``allocated``: the devices claims hold ((driver, pool, device),
    from their allocation results); ``counter_sets``: what each set holds
    (objects.counter_sets_of_slices). Devices several nodes reach, and devices that are no
    GPU Tidegate knows, are left out."""
    groups: dict[tuple[str, tuple[str, str, str]], tuple[dict, list, list]] = {}
    for device in devices:
        if device.node is None or not device.is_partition:
            continue
        flavour = flavour_of(device, mapped)
        if flavour is None:
            continue
        # (a device may draw on two sets; the first by name is its GPU's)
        set_name = min(device.consumes)
        key = (device.node, (device.driver, device.pool, set_name))
        flavours, parts, order = groups.setdefault(key, ({}, [], []))
        flavours.setdefault(flavour.mig_profile, flavour)
        parts.append(Part(flavour.mig_profile, device.consumes[set_name], device.key in allocated))
        index = device.attribute("index")
        if flavour.mig_profile == WHOLE and isinstance(index, int) and not isinstance(index, bool):
            order.append(index)
    found: dict[str, list[tuple[tuple[int, int, str], PartitionableGpu]]] = {}
    for (node, counter_set), (flavours, parts, order) in groups.items():
        gpu = PartitionableGpu(
            node, counter_set, flavours, tuple(parts), (counter_sets or {}).get(counter_set)
        )
        rank = (0, order[0], counter_set[2]) if order else (1, 0, counter_set[2])
        found.setdefault(node, []).append((rank, gpu))
    return {node: [gpu for _, gpu in sorted(ranked)] for node, ranked in found.items()}


def most_of(gpu: PartitionableGpu, product: GpuProduct | None, profile: str) -> int:
    """The most devices of ``profile`` (WHOLE: the GPU whole) ``gpu`` can offer at once,
    whichever layout the MIG planner chooses."""
    published = gpu.published.get(profile, 0)
    if profile == WHOLE:
        return min(published, 1)
    if product is None or not product.mig_capable:
        return published
    return min(published, _most_instances(product, profile))


@functools.lru_cache(maxsize=256)
def _most_instances(product: GpuProduct, profile: str) -> int:
    return max((layout.counts().get(profile, 0) for layout in legal_layouts(product)), default=0)


def _counters_give(gpu: PartitionableGpu, extra: Mapping[str, int]) -> bool:
    """The counters left beside what claims hold give ``extra`` more devices per
    profile, each a published device not held (largest first, each the first that fits:
    a refusal may be cautious, a yes never promises what the scheduler cannot give)."""
    if gpu.counters is None:
        return True  # the counter set was not read: profile counts only
    left = dict(gpu.counters)
    for part in gpu.parts:
        if part.held:
            for counter, amount in part.consumes.items():
                left[counter] = left.get(counter, Decimal(0)) - amount
    free = [p for p in gpu.parts if not p.held]
    wanted = sorted(extra.items(), key=lambda kv: -_size(gpu, kv[0]))
    for profile, count in wanted:
        for _ in range(count):
            fits = next(
                (
                    p
                    for p in free
                    if p.profile == profile
                    and all(left.get(c, Decimal(0)) >= a for c, a in p.consumes.items())
                ),
                None,
            )
            if fits is None:
                return False
            free.remove(fits)
            for counter, amount in fits.consumes.items():
                left[counter] -= amount
    return True


def _size(gpu: PartitionableGpu, profile: str) -> Decimal:
    consumed = [sum(p.consumes.values(), Decimal(0)) for p in gpu.parts if p.profile == profile]
    return max(consumed, default=Decimal(0))


def _keeps(gpu: PartitionableGpu, product: GpuProduct, layout: MigLayout) -> bool:
    """``layout`` is legal for ``product``, keeps every partition claims hold, and the
    counters give the rest of it beside them."""
    held = {profile: n for profile, n in gpu.in_use.items() if profile != WHOLE}
    if not layout.mig_enabled:
        return not held
    counts = layout.counts()
    if not is_legal_layout(product, layout) or any(
        counts.get(profile, 0) < n for profile, n in held.items()
    ):
        return False
    return _counters_give(gpu, {p: n - held.get(p, 0) for p, n in counts.items()})


def partition_layout(
    gpu: PartitionableGpu, product: GpuProduct | None, chosen: MigLayout | None
) -> MigLayout | None:
    """The layout ``gpu`` counts as: the ``chosen`` one (the MIG planner's) where it keeps
    what claims hold and the counters give the rest; else what claims hold; else whole.
    None when claims hold partitions no layout Tidegate knows describes: the GPU then
    offers nothing beyond them."""
    in_use = gpu.in_use
    if in_use.get(WHOLE):
        return MigLayout.disabled()
    held = {profile: n for profile, n in in_use.items() if n}
    if product is None or not product.mig_capable:
        return None if held else MigLayout.disabled()
    if chosen is not None and _keeps(gpu, product, chosen):
        return chosen
    if not held:
        return MigLayout.disabled()
    return layout_from_counts(product, held) if counts_realisable(product, held) else None


def layout_devices(gpu: PartitionableGpu, layout: MigLayout | None) -> dict[DeviceFlavour, int]:
    """The devices ``gpu`` offers laid out as ``layout``: itself whole, or its
    partitions (profiles its driver does not publish offer nothing); with no layout,
    the partitions claims hold."""
    if layout is None:
        counts = gpu.in_use
    elif not layout.mig_enabled:
        counts = {WHOLE: 1}
    else:
        counts = layout.counts()
    found: dict[DeviceFlavour, int] = {}
    for profile, count in counts.items():
        flavour = gpu.flavours.get(profile)
        if flavour is not None and count:
            found[flavour] = found.get(flavour, 0) + count
    return found
