"""The GPU catalogue: products, their MIG profiles and Kubernetes resource names.

Pure Python (no Django): the admission engine, the MIG planner and the pricing
code all read it, and the API maps its exceptions to HTTP 400.

Sources for the tables below (the facts, in our words: docs/mig.md, docs/gpu-labels.md):

* NVIDIA Multi-Instance GPU user guide, "Supported GPUs" and "Supported MIG
  profiles": profile names, slice counts and placements
  (``nvidia-smi mig -lgipp``: ``{starts}:size`` in memory slices).
* NVIDIA/mig-parted ``deployments/systemd/config-default.yaml``: the profile
  names per product and PCI device id (``all-balanced`` device filters).
* NVIDIA/k8s-device-plugin ``internal/lm/mig-strategy.go`` and
  ``internal/lm/resource.go``: ``nvidia.com/gpu.product`` is the device name
  with spaces written ``-``; under the ``single`` strategy it becomes
  ``<model>-MIG-<profile>`` (``<model>-MIG-INVALID`` on a bad layout), under
  ``mixed`` each profile is its own resource ``nvidia.com/mig-<profile>``.
  Time-slicing without renaming appends ``-SHARED``; with ``renameByDefault`` the
  resource becomes ``nvidia.com/gpu.shared`` instead (docs/gpu-labels.md#time-slicing).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum

# Every MIG-capable product in the catalogue has 7 compute slices and 8 memory
# slices and holds at most 7 GPU instances (MIG user guide).
MIG_COMPUTE_SLICES = 7
MIG_MEMORY_SLICES = 8
MIG_MAX_INSTANCES = 7

FULL_GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

# How far the reported ``nvidia.com/gpu.memory`` may sit from a product's
# nominal size and still identify it: drivers report usable memory, a few
# percent below the marketing figure (ECC, reserved regions).
_MEMORY_TOLERANCE = 0.15

_PROFILE_NAME = re.compile(r"^(?P<compute>[1-7])g\.(?P<memory>\d+)gb(?P<suffix>\+me)?$")
_RESOURCE_PROFILE = re.compile(r"^(?P<base>\d+g\.\d+gb)(?:\.(?P<suffix>.+))?$")


class CatalogueError(Exception):
    """Base class for catalogue look-ups that a user can fix by naming something valid."""


class UnknownMigProfile(CatalogueError):
    """A MIG profile name that the product does not offer."""

    def __init__(self, product: GpuProduct, name: str) -> None:
        self.product = product
        self.name = name
        self.valid = product.profile_names
        if product.mig_capable:
            message = (
                f"{product.name} has no MIG profile {name!r}; "
                f"valid profiles: {', '.join(self.valid)}"
            )
        else:
            message = f"{product.name} does not support MIG, so it has no profile {name!r}"
        super().__init__(message)


class UnknownGpuProduct(CatalogueError):
    """A product name that is not in the catalogue."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.valid = tuple(p.name for p in _PRODUCTS)
        super().__init__(f"unknown GPU product {name!r}; known products: {', '.join(self.valid)}")


class MigStrategy(StrEnum):
    """How the device plugin exposes MIG devices (``nvidia.com/mig.strategy``)."""

    NONE = "none"
    SINGLE = "single"
    MIXED = "mixed"


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile, e.g. ``1g.10gb`` or ``1g.10gb+me``.

    ``starts`` are the legal first memory slices; the instance then occupies
    ``memory_slices`` consecutive slices.
    """

    name: str
    compute_slices: int
    memory_slices: int
    memory_gb: int
    starts: tuple[int, ...]
    media_extensions: bool = False

    @property
    def gpu_equivalent(self) -> float:
        """Share of a full GPU, by compute: ``1g`` is 1/7 (docs/chargeback.md#mig-pricing)."""
        return self.compute_slices / MIG_COMPUTE_SLICES

    @property
    def resource_suffix(self) -> str:
        """The profile as it appears in a resource name: ``+`` becomes ``.``."""
        return self.name.replace("+", ".")


@dataclass(frozen=True)
class GpuProduct:
    """A GPU model. ``mig_profiles`` is empty for cards without MIG.

    ``gfd_names`` are the ``nvidia.com/gpu.product`` values that name it,
    without the ``NVIDIA-`` prefix; ``opaque`` marks a product built from an
    unrecognised label.
    """

    name: str
    memory_mib: int
    pci_device_ids: tuple[str, ...] = ()
    gfd_names: tuple[str, ...] = ()
    mig_profiles: tuple[MigProfile, ...] = ()
    opaque: bool = False

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    @property
    def profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.mig_profiles)

    @property
    def family(self) -> str:
        """First token of the name: ``A100``, ``H100``, ``L40S``..."""
        return self.name.split("-", 1)[0]


def _profiles(small_gb: int, double_gb: int, half_gb: int, full_gb: int) -> tuple[MigProfile, ...]:
    """The seven profiles every catalogue MIG product shares, by memory size.

    Placements come from the MIG user guide (``nvidia-smi mig -lgipp``), the
    same on A100 and H100; the H200 and B200 tables use the same geometry.
    """
    return (
        MigProfile(f"1g.{small_gb}gb", 1, 1, small_gb, (0, 1, 2, 3, 4, 5, 6)),
        MigProfile(f"1g.{small_gb}gb+me", 1, 1, small_gb, (0, 1, 2, 3, 4, 5, 6), True),
        MigProfile(f"1g.{double_gb}gb", 1, 2, double_gb, (0, 2, 4, 6)),
        MigProfile(f"2g.{double_gb}gb", 2, 2, double_gb, (0, 2, 4)),
        MigProfile(f"3g.{half_gb}gb", 3, 4, half_gb, (0, 4)),
        MigProfile(f"4g.{half_gb}gb", 4, 4, half_gb, (0,)),
        MigProfile(f"7g.{full_gb}gb", 7, 8, full_gb, (0,)),
    )


def _gib(gb: int) -> int:
    return gb * 1024


# Nominal memory in MiB (marketing GB x 1024); see _MEMORY_TOLERANCE.
A100_SXM4_40GB = GpuProduct(
    name="A100-SXM4-40GB",
    memory_mib=_gib(40),
    pci_device_ids=("0x20B0",),
    gfd_names=("A100-SXM4-40GB",),
    mig_profiles=_profiles(5, 10, 20, 40),
)
A100_SXM4_80GB = GpuProduct(
    name="A100-SXM4-80GB",
    memory_mib=_gib(80),
    pci_device_ids=("0x20B2",),
    gfd_names=("A100-SXM4-80GB",),
    mig_profiles=_profiles(10, 20, 40, 80),
)
H100_80GB = GpuProduct(
    name="H100-80GB",
    memory_mib=_gib(80),
    pci_device_ids=("0x2330",),
    gfd_names=("H100-80GB-HBM3", "H100-SXM5-80GB"),
    mig_profiles=_profiles(10, 20, 40, 80),
)
# H200 SXM and H200 NVL share one MIG table (mig-parted filters 0x2335, 0x233B).
H200_141GB = GpuProduct(
    name="H200-141GB",
    memory_mib=_gib(141),
    pci_device_ids=("0x2335", "0x233B"),
    gfd_names=("H200", "H200-NVL", "H200-SXM", "H200-141GB"),
    mig_profiles=_profiles(18, 35, 71, 141),
)
B200 = GpuProduct(
    name="B200",
    memory_mib=_gib(180),
    pci_device_ids=("0x2901",),
    gfd_names=("B200",),
    mig_profiles=_profiles(23, 45, 90, 180),
)
L40S = GpuProduct(name="L40S", memory_mib=_gib(48), gfd_names=("L40S",))
L4 = GpuProduct(name="L4", memory_mib=_gib(24), gfd_names=("L4",))

_PRODUCTS: tuple[GpuProduct, ...] = (
    A100_SXM4_40GB,
    A100_SXM4_80GB,
    H100_80GB,
    H200_141GB,
    B200,
    L40S,
    L4,
)
_BY_NAME = {p.name: p for p in _PRODUCTS}
_BY_GFD = {g.upper(): p for p in _PRODUCTS for g in (*p.gfd_names, p.name)}
# Tokens a label may carry for a family match when it is not an exact alias,
# e.g. ``NVIDIA-A100-SXM4`` (memory decides) or ``NVIDIA-H100-SXM5``. A token
# outside this set (``PCIE``, ``NVL`` on H100) means a different board whose
# MIG table we do not carry, so the label stays opaque rather than guessed.
_FAMILY_TOKENS = {
    "A100": {"A100", "SXM4", "40GB", "80GB"},
    "H100": {"H100", "SXM5", "SXM", "80GB", "HBM3"},
    "H200": {"H200", "SXM", "NVL", "141GB"},
    "B200": {"B200", "SXM6", "SXM", "180GB"},
}


def all_products() -> tuple[GpuProduct, ...]:
    """Every product in the catalogue, MIG-capable first."""
    return _PRODUCTS


def product_by_name(name: str) -> GpuProduct:
    """The catalogue product called ``name``; raises ``UnknownGpuProduct``."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownGpuProduct(name) from None


def profile_by_name(product: GpuProduct, name: str) -> MigProfile:
    """The product's profile ``name`` (``+me`` or resource-style ``.me`` accepted).

    Raises ``UnknownMigProfile`` listing the valid profiles, for an HTTP 400.
    """
    wanted = name.strip()
    for profile in product.mig_profiles:
        if wanted in (profile.name, profile.resource_suffix):
            return profile
    raise UnknownMigProfile(product, name)


def gpu_equivalent(profile: MigProfile | None) -> float:
    """GPU-equivalent weight: 1.0 for a full GPU (``None``), compute_slices/7 for MIG."""
    return 1.0 if profile is None else profile.gpu_equivalent


def full_gpu_resource() -> str:
    """The extended resource of a whole GPU (and of MIG devices under ``single``)."""
    return FULL_GPU_RESOURCE


def mig_resource_name(profile: MigProfile | str, strategy: MigStrategy | str) -> str:
    """Resource a pod requests for ``profile`` under the node's MIG strategy.

    ``mixed``: ``nvidia.com/mig-<profile>`` with ``+`` written ``.``;
    ``single``: ``nvidia.com/gpu``. ``none`` exposes no MIG devices: ValueError.
    """
    name = profile.name if isinstance(profile, MigProfile) else profile
    mode = MigStrategy(strategy)
    if mode is MigStrategy.MIXED:
        return MIG_RESOURCE_PREFIX + name.replace("+", ".")
    if mode is MigStrategy.SINGLE:
        return FULL_GPU_RESOURCE
    raise ValueError(f"MIG strategy {mode.value!r} exposes no MIG devices")


def mig_profile_name_from_resource(resource_name: str) -> str | None:
    """``nvidia.com/mig-1g.10gb.me`` -> ``1g.10gb+me``; None if not a MIG resource.

    The first ``.`` after ``<n>g.<m>gb`` is the ``+`` the device plugin rewrote.
    """
    if not resource_name.startswith(MIG_RESOURCE_PREFIX):
        return None
    match = _RESOURCE_PROFILE.match(resource_name[len(MIG_RESOURCE_PREFIX) :])
    if match is None:
        return None
    suffix = match.group("suffix")
    return match.group("base") + (f"+{suffix}" if suffix else "")


def profile_from_resource_name(product: GpuProduct, resource_name: str) -> MigProfile:
    """The product's profile behind a ``mixed`` resource name; ``UnknownMigProfile`` otherwise."""
    name = mig_profile_name_from_resource(resource_name)
    if name is None:
        raise UnknownMigProfile(product, resource_name)
    return profile_by_name(product, name)


def parse_profile_name(name: str) -> tuple[int, int, bool]:
    """``"3g.40gb"`` -> ``(3, 40, False)``: compute slices, memory GB, media extensions."""
    match = _PROFILE_NAME.match(name)
    if match is None:
        raise ValueError(f"{name!r} is not a MIG profile name like '1g.10gb' or '1g.10gb+me'")
    return int(match.group("compute")), int(match.group("memory")), bool(match.group("suffix"))


def _split_label(label: str) -> tuple[str, str | None]:
    """Split a product label into (base label, single-strategy profile or None).

    Drops a ``-SHARED`` time-slicing suffix and the ``-MIG-<profile>`` part.
    """
    base = label.strip()
    if base.upper().endswith("-SHARED"):
        base = base[: -len("-SHARED")]
    marker = base.upper().rfind("-MIG-")
    if marker < 0:
        return base, None
    return base[:marker], base[marker + len("-MIG-") :]


def _nearest_by_memory(candidates: list[GpuProduct], memory_mib: int | None) -> GpuProduct | None:
    if len(candidates) == 1:
        return candidates[0]
    if not candidates or not memory_mib:
        return None
    best = min(candidates, key=lambda p: abs(p.memory_mib - memory_mib))
    if abs(best.memory_mib - memory_mib) > best.memory_mib * _MEMORY_TOLERANCE:
        return None
    return best


def _match_model(base: str, memory_mib: int | None) -> GpuProduct | None:
    model = base[len("NVIDIA-") :] if base.upper().startswith("NVIDIA-") else base
    exact = _BY_GFD.get(model.upper())
    if exact is not None:
        return exact
    tokens = model.upper().split("-")
    allowed = _FAMILY_TOKENS.get(tokens[0])
    if allowed is None or not set(tokens) <= allowed:
        return None
    candidates = [p for p in _PRODUCTS if p.family == tokens[0]]
    sizes = {t for t in tokens if t.endswith("GB")}
    if sizes:
        candidates = [p for p in candidates if f"{p.memory_mib // 1024}GB" in sizes]
    return _nearest_by_memory(candidates, memory_mib)


def _opaque_product(label: str, memory_mib: int | None) -> GpuProduct:
    return GpuProduct(name=label, memory_mib=memory_mib or 0, opaque=True)


def flavour_name(product: GpuProduct, mig_profile: str | None) -> str:
    """`h100-80gb` for whole GPUs, `h100-80gb-mig-1g.10gb` for a MIG profile: the same
    name whether the GPUs are offered as extended resources or through DRA."""
    base = product.name.lower()
    return f"{base}-mig-{mig_profile.replace('+', '.')}" if mig_profile else base


def product_from_gfd_label(label: str, memory_mib: int | None = None) -> GpuProduct:
    """The product named by a GPU Feature Discovery ``nvidia.com/gpu.product`` value.

    Accepts ``NVIDIA-H100-80GB-HBM3``, ``NVIDIA-H200-NVL``, the ``single``
    strategy form ``NVIDIA-A100-SXM4-40GB-MIG-1g.5gb`` (returns the base
    product) and ``-SHARED`` suffixes. ``memory_mib`` (``nvidia.com/gpu.memory``)
    only disambiguates family-level labels such as ``NVIDIA-A100-SXM4``.

    Never raises: an unrecognised label gives an opaque, non-MIG product named
    after the label (minus the suffixes above) so its GPUs can still be counted
    and charged as whole GPUs.
    """
    base, _ = _split_label(label)
    product = _match_model(base, memory_mib)
    return product if product is not None else _opaque_product(base, memory_mib)


@functools.lru_cache(maxsize=1024)  # a cluster's nodes carry a handful of labels
def product_and_profile_from_gfd_label(
    label: str, memory_mib: int | None = None
) -> tuple[GpuProduct, MigProfile | None]:
    """Like ``product_from_gfd_label`` but also returns the ``single``-strategy profile.

    ``NVIDIA-A100-SXM4-40GB-MIG-1g.5gb`` -> (A100-SXM4-40GB, 1g.5gb). The profile
    is None for a plain label, for ``-MIG-INVALID`` (the device plugin's mark of
    a mixed layout under ``single``) and for an opaque product. Raises
    ``UnknownMigProfile`` when a known product carries a profile it does not offer.
    """
    product = product_from_gfd_label(label, memory_mib)
    _, profile_name = _split_label(label)
    if profile_name is None or profile_name.upper() == "INVALID" or product.opaque:
        return product, None
    return product, profile_by_name(product, profile_name)


# How a node's GPUs are shared, as NVIDIA GPU Feature Discovery labels it (device plugin
# 0.15 and later: ``nvidia.com/gpu.sharing-strategy`` none, time-slicing or mps, with
# ``nvidia.com/gpu.replicas``; older ones only append ``-SHARED`` to the product), and
# HAMi's scheduling label (its README: ``kubectl label nodes <node> gpu=on``).
SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
HAMI_NODE_LABEL = "gpu"


def sharing_of_node(labels: dict[str, str]) -> str:
    """How a node's whole GPUs are shared, read from its labels: "time-slicing", "mps",
    "hami", or "" (not shared, or nothing says so)."""
    if labels.get(HAMI_NODE_LABEL) == "on":
        return "hami"
    strategy = labels.get(SHARING_STRATEGY_LABEL, "").strip().lower()
    if strategy in ("time-slicing", "mps"):
        return strategy
    if strategy == "none":
        return ""
    if labels.get("nvidia.com/gpu.product", "").upper().endswith("-SHARED"):
        return "time-slicing"
    replicas = labels.get(REPLICAS_LABEL, "")
    return "time-slicing" if replicas.isdigit() and int(replicas) > 1 else ""
