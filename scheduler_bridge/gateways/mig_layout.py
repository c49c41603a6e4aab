"""What a mig-parted layout makes allocatable on a node (mixed strategy).

Under the ``mixed`` strategy each MIG profile is its own extended resource,
``nvidia.com/mig-<profile>`` with ``+`` written ``.``; GPUs left whole stay
``nvidia.com/gpu`` (docs/gpu-labels.md#resources, docs/mig.md#profiles).
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from .manifests import MigDeviceGroup

# GPU Feature Discovery product label -> (PCI device id as mig-parted's device-filter
# spells it, memory in MiB for the nvidia.com/gpu.memory label). Device ids:
# docs/mig.md#profiles. Memory: as nvidia-smi reports it; the H200 and B200 figures are
# unverified.
PRODUCTS = {
    "NVIDIA-H100-80GB-HBM3": ("0x233010DE", 81559),
    "NVIDIA-A100-SXM4-80GB": ("0x20B210DE", 81920),
    "NVIDIA-A100-SXM4-40GB": ("0x20B010DE", 40960),
    "NVIDIA-H200": ("0x233510DE", 143771),
    "NVIDIA-B200": ("0x290110DE", 183359),
}


def mig_allocatable(groups: Sequence[MigDeviceGroup], gpus: int, device_id: str) -> dict[str, int]:
    """Allocatable GPU resources of a node whose ``gpus`` GPUs follow ``groups``."""
    amounts = {GPU_RESOURCE: 0}
    for index in range(gpus):
        group = next(
            (
                g
                for g in groups
                if (not g.device_filter or device_id in g.device_filter)
                and (g.devices == "all" or index in g.devices)
            ),
            None,
        )
        if group is None or not group.mig_enabled:
            amounts[GPU_RESOURCE] += 1
            continue
        for profile, count in group.mig_devices.items():
            resource = MIG_RESOURCE_PREFIX + profile.replace("+", ".")
            amounts[resource] = amounts.get(resource, 0) + count
    return amounts
