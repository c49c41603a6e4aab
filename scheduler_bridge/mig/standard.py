"""The GPU operator's standard MIG configs, rebuilt from Tidegate's catalogue.

Once ClusterPolicy points MIG Manager at Tidegate's ConfigMap
(``spec.migManager.config.name``), MIG Manager reads no other: every node still
labelled with one of the operator's own configs (``all-disabled`` on every GPU node by
default, ``all-1g.10gb``, ``all-balanced``...) would go to ``failed`` unless the
ConfigMap defines it too. The names and their meaning follow the operator's default
``default-mig-parted-config`` (NVIDIA gpu-operator, ``assets/state-mig-manager``):
``all-disabled``, ``all-enabled`` (MIG on, no instances), ``all-<profile>`` (as many
instances of one profile as a GPU holds; ``+`` written ``.``) and ``all-balanced``
(two small 1g, one 2g and one 3g instance). Entries are restricted to each product by
its PCI device id with NVIDIA's vendor id (``0x20B210DE``), as the operator's are.
"""

from __future__ import annotations

from functools import cache

from scheduler_bridge.gateways.manifests import MigDeviceGroup
from scheduler_bridge.inventory.catalogue import GpuProduct, MigProfile, all_products
from scheduler_bridge.mig.layouts import counts_realisable

NVIDIA_VENDOR = "10DE"


def _device_filter(product: GpuProduct) -> tuple[str, ...]:
    return tuple(f"{device}{NVIDIA_VENDOR}" for device in product.pci_device_ids)


def _most(product: GpuProduct, profile: MigProfile) -> int:
    count = 0
    while counts_realisable(product, {profile.name: count + 1}):
        count += 1
    return count


@cache
def standard_mig_configs() -> dict[str, tuple[MigDeviceGroup, ...]]:
    """The operator's standard config names, each with one entry per catalogue product
    that has the profile (all-disabled and all-enabled apply to every GPU)."""
    configs: dict[str, list[MigDeviceGroup]] = {
        "all-disabled": [MigDeviceGroup(devices="all", mig_enabled=False)],
        "all-enabled": [MigDeviceGroup(devices="all", mig_enabled=True, mig_devices={})],
    }
    balanced: list[MigDeviceGroup] = []
    for product in all_products():
        if not product.mig_capable or not product.pci_device_ids:
            continue
        device_filter = _device_filter(product)
        for profile in product.mig_profiles:
            most = _most(product, profile)
            if most:
                configs.setdefault(f"all-{profile.resource_suffix}", []).append(
                    MigDeviceGroup(
                        devices="all",
                        mig_enabled=True,
                        mig_devices={profile.name: most},
                        device_filter=device_filter,
                    )
                )
        small, _, _, two, three, _, _ = product.mig_profiles
        mix = {small.name: 2, two.name: 1, three.name: 1}
        if counts_realisable(product, mix):
            balanced.append(
                MigDeviceGroup(
                    devices="all", mig_enabled=True, mig_devices=mix, device_filter=device_filter
                )
            )
    configs["all-balanced"] = balanced
    return {name: tuple(groups) for name, groups in configs.items()}
