"""Per-GPU MIG layouts of a node, as far as its labels and allocatable resources tell.

Kubernetes does not say which GPU of a node holds which MIG instance. Tidegate knows it
for nodes whose layout it requested itself (and MIG Manager reported success); for the
others it derives a legal layout per GPU from the allocatable MIG resources, packing the
largest instances first. Pods are not tied to a GPU index either, so a GPU counts as busy
when any running pod on its node uses a resource the GPU provides (conservative: the
planner never repartitions a GPU that might hold work).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler_bridge.gateways.base import GPU_RESOURCE
from scheduler_bridge.inventory.catalogue import (
    GpuProduct,
    mig_profile_name_from_resource,
    profile_by_name,
)
from scheduler_bridge.mig.layouts import MigLayout, counts_realisable, layout_from_counts

StoredLayout = list[list[Any]] | None  # [[profile, start], ...] or None for MIG disabled


def layout_to_json(layout: MigLayout) -> StoredLayout:
    if not layout.mig_enabled:
        return None
    return [[p.profile, p.start] for p in layout.instances]


def layout_from_json(data: StoredLayout) -> MigLayout:
    if data is None:
        return MigLayout.disabled()
    return MigLayout.of(*[(str(profile), int(start)) for profile, start in data])


def derive_gpu_layouts(
    product: GpuProduct, gpu_count: int, allocatable: Mapping[str, int]
) -> list[MigLayout]:
    """A legal layout per GPU that offers what `allocatable` lists (mixed strategy)."""
    remaining: dict[str, int] = {}
    for resource, amount in allocatable.items():
        profile = mig_profile_name_from_resource(resource)
        if profile and amount > 0 and product.mig_capable:
            remaining[profile] = amount
    whole = min(int(allocatable.get(GPU_RESOURCE, 0)), gpu_count)
    mig_gpus = gpu_count - whole if remaining else 0
    if mig_gpus and all(n % mig_gpus == 0 for n in remaining.values()):
        # Operators almost always split every GPU of a node alike (all-balanced, all-1g...).
        uniform = {name: n // mig_gpus for name, n in remaining.items()}
        if counts_realisable(product, uniform):
            layout = layout_from_counts(product, uniform)
            return [layout] * mig_gpus + [MigLayout.disabled()] * (gpu_count - mig_gpus)
    order = sorted(
        remaining, key=lambda name: (-profile_by_name(product, name).compute_slices, name)
    )
    layouts: list[MigLayout] = []
    for _ in range(mig_gpus):
        counts: dict[str, int] = {}
        for name in order:
            while remaining.get(name, 0) > 0:
                trial = counts | {name: counts.get(name, 0) + 1}
                if not counts_realisable(product, trial):
                    break
                counts = trial
                remaining[name] -= 1
        layouts.append(layout_from_counts(product, counts) if counts else MigLayout.of())
    layouts.extend(MigLayout.disabled() for _ in range(gpu_count - len(layouts)))
    return layouts


def busy_gpu_flags(layouts: Sequence[MigLayout], busy: Mapping[str, int]) -> list[bool]:
    """Which GPUs might hold running pods (see the module doc for why this is conservative)."""
    busy_profiles = {
        name
        for resource, n in busy.items()
        if n > 0
        if (name := mig_profile_name_from_resource(resource))
    }
    whole_busy = busy.get(GPU_RESOURCE, 0) > 0
    flags = []
    for layout in layouts:
        if not layout.mig_enabled:
            flags.append(whole_busy)
        else:
            flags.append(any(p.profile in busy_profiles for p in layout.instances))
    return flags
