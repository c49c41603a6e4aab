"""The GPU catalogue: products, MIG profiles, GFD labels and resource names (no Django, no DB)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_bridge.inventory.catalogue import (
    A100_SXM4_40GB,
    A100_SXM4_80GB,
    B200,
    H100_80GB,
    H200_141GB,
    L4,
    L40S,
    MigProfile,
    MigStrategy,
    UnknownGpuProduct,
    UnknownMigProfile,
    all_products,
    full_gpu_resource,
    gpu_equivalent,
    mig_profile_name_from_resource,
    mig_resource_name,
    parse_profile_name,
    product_and_profile_from_gfd_label,
    product_by_name,
    product_from_gfd_label,
    profile_by_name,
    profile_from_resource_name,
)

MIG_PRODUCTS = [p for p in all_products() if p.mig_capable]

# docs/mig.md#profiles (from NVIDIA's MIG user guide), one row per product, columns in catalogue order:
# 1g, 1g+me, 1g double memory, 2g, 3g, 4g, 7g.
REFERENCE_PROFILES = {
    "A100-SXM4-40GB": "1g.5gb 1g.5gb+me 1g.10gb 2g.10gb 3g.20gb 4g.20gb 7g.40gb",
    "A100-SXM4-80GB": "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
    "H100-80GB": "1g.10gb 1g.10gb+me 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
    "H200-141GB": "1g.18gb 1g.18gb+me 1g.35gb 2g.35gb 3g.71gb 4g.71gb 7g.141gb",
    "B200": "1g.23gb 1g.23gb+me 1g.45gb 2g.45gb 3g.90gb 4g.90gb 7g.180gb",
}
# Placement table: (starts, memory slices) per column.
REFERENCE_PLACEMENTS = [
    ((0, 1, 2, 3, 4, 5, 6), 1),
    ((0, 1, 2, 3, 4, 5, 6), 1),
    ((0, 2, 4, 6), 2),
    ((0, 2, 4), 2),
    ((0, 4), 4),
    ((0,), 4),
    ((0,), 8),
]


def test_every_mig_product_offers_the_reference_profiles_in_order() -> None:
    assert {p.name for p in MIG_PRODUCTS} == set(REFERENCE_PROFILES)
    for product in MIG_PRODUCTS:
        assert product.profile_names == tuple(REFERENCE_PROFILES[product.name].split())


def test_profile_placements_follow_the_reference_placement_table() -> None:
    for product in MIG_PRODUCTS:
        for profile, (starts, size) in zip(product.mig_profiles, REFERENCE_PLACEMENTS, strict=True):
            assert (profile.starts, profile.memory_slices) == (starts, size), profile.name


def test_profile_compute_memory_and_media_extensions_match_its_name() -> None:
    for product in MIG_PRODUCTS:
        for profile in product.mig_profiles:
            compute, memory_gb, media = parse_profile_name(profile.name)
            assert (profile.compute_slices, profile.memory_gb) == (compute, memory_gb)
            assert profile.media_extensions is media


def test_only_the_plus_me_profile_has_media_extensions() -> None:
    for product in MIG_PRODUCTS:
        assert [p.name for p in product.mig_profiles if p.media_extensions] == [
            product.profile_names[0] + "+me"
        ]


def test_l40s_and_l4_are_whole_gpus_with_their_memory_in_mib() -> None:
    assert (L40S.mig_capable, L40S.memory_mib) == (False, 48 * 1024)
    assert (L4.mig_capable, L4.memory_mib) == (False, 24 * 1024)


def test_products_carry_the_pci_device_ids_mig_parted_filters_on() -> None:
    assert A100_SXM4_40GB.pci_device_ids == ("0x20B0",)
    assert A100_SXM4_80GB.pci_device_ids == ("0x20B2",)
    assert H100_80GB.pci_device_ids == ("0x2330",)
    assert H200_141GB.pci_device_ids == ("0x2335", "0x233B")
    assert B200.pci_device_ids == ("0x2901",)


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("NVIDIA-H100-80GB-HBM3", H100_80GB),
        ("NVIDIA-A100-SXM4-40GB", A100_SXM4_40GB),
        ("NVIDIA-A100-SXM4-80GB", A100_SXM4_80GB),
        ("NVIDIA-H200", H200_141GB),
        ("NVIDIA-H200-NVL", H200_141GB),
        ("NVIDIA-B200", B200),
        ("NVIDIA-L40S", L40S),
        ("NVIDIA-L4", L4),
        ("A100-SXM4-40GB", A100_SXM4_40GB),  # older drivers: no NVIDIA- prefix
        ("NVIDIA-A100-SXM4-80GB-SHARED", A100_SXM4_80GB),  # time-slicing suffix
        ("nvidia-h100-80gb-hbm3", H100_80GB),
    ],
)
def test_gfd_product_label_names_its_catalogue_product(label: str, expected: object) -> None:
    assert product_from_gfd_label(label) == expected


def test_single_strategy_label_gives_the_base_product() -> None:
    assert product_from_gfd_label("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb") == A100_SXM4_40GB


def test_single_strategy_label_gives_product_and_profile() -> None:
    product, profile = product_and_profile_from_gfd_label("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb")
    assert product == A100_SXM4_40GB
    assert profile is not None and profile.name == "1g.5gb"


def test_single_strategy_label_with_media_extensions_in_either_spelling() -> None:
    for label in ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb+me", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me"):
        _, profile = product_and_profile_from_gfd_label(label)
        assert profile is not None and profile.name == "1g.10gb+me"


def test_plain_label_has_no_profile() -> None:
    assert product_and_profile_from_gfd_label("NVIDIA-H200") == (H200_141GB, None)


def test_mig_invalid_label_names_the_product_but_no_profile() -> None:
    # The device plugin's mark of a mixed layout under the single strategy.
    assert product_and_profile_from_gfd_label("NVIDIA-A100-SXM4-80GB-MIG-INVALID") == (
        A100_SXM4_80GB,
        None,
    )


def test_single_strategy_label_with_a_profile_the_product_lacks_is_refused() -> None:
    with pytest.raises(UnknownMigProfile, match="A100-SXM4-40GB has no MIG profile '1g.20gb'"):
        product_and_profile_from_gfd_label("NVIDIA-A100-SXM4-40GB-MIG-1g.20gb")


def test_unknown_label_gives_an_opaque_whole_gpu_product_named_after_it() -> None:
    product = product_from_gfd_label("NVIDIA-GeForce-RTX-4090", memory_mib=24564)
    assert product.name == "NVIDIA-GeForce-RTX-4090"
    assert product.opaque and not product.mig_capable
    assert product.memory_mib == 24564
    assert product_and_profile_from_gfd_label("NVIDIA-GeForce-RTX-4090-MIG-1g.5gb")[1] is None


def test_a_different_board_of_a_known_family_is_not_guessed() -> None:
    # The PCIe A100 and the H100 NVL have other names and, for H100 NVL, other
    # MIG tables: better an honest opaque product than a wrong catalogue one.
    assert product_from_gfd_label("NVIDIA-A100-80GB-PCIe").opaque
    assert product_from_gfd_label("NVIDIA-H100-NVL").opaque


def test_family_label_is_resolved_by_reported_memory() -> None:
    assert product_from_gfd_label("NVIDIA-A100-SXM4", memory_mib=81920) == A100_SXM4_80GB
    assert product_from_gfd_label("NVIDIA-A100-SXM4", memory_mib=40536) == A100_SXM4_40GB
    assert product_from_gfd_label("NVIDIA-H200-SXM", memory_mib=143771) == H200_141GB


def test_family_label_without_memory_or_with_implausible_memory_stays_opaque() -> None:
    assert product_from_gfd_label("NVIDIA-A100-SXM4").opaque
    assert product_from_gfd_label("NVIDIA-A100-SXM4", memory_mib=16384).opaque


def test_memory_does_not_override_an_exact_label() -> None:
    assert product_from_gfd_label("NVIDIA-A100-SXM4-40GB", memory_mib=81920) == A100_SXM4_40GB


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.none() | st.integers(min_value=0, max_value=300_000))
def test_any_label_gives_a_product_and_never_raises(label: str, memory: int | None) -> None:
    product = product_from_gfd_label(label, memory_mib=memory)
    assert product.opaque or product in all_products()


def test_full_gpu_resource_is_nvidia_gpu() -> None:
    assert full_gpu_resource() == "nvidia.com/gpu"


def test_mixed_strategy_gives_one_resource_per_profile_with_plus_written_dot() -> None:
    me = profile_by_name(H100_80GB, "1g.10gb+me")
    assert mig_resource_name(me, MigStrategy.MIXED) == "nvidia.com/mig-1g.10gb.me"
    assert mig_resource_name("3g.40gb", "mixed") == "nvidia.com/mig-3g.40gb"


def test_single_strategy_exposes_mig_devices_as_nvidia_gpu() -> None:
    assert mig_resource_name("1g.10gb", "single") == "nvidia.com/gpu"


def test_strategy_none_has_no_mig_resource() -> None:
    with pytest.raises(ValueError, match="exposes no MIG devices"):
        mig_resource_name("1g.10gb", MigStrategy.NONE)


def test_mixed_resource_name_parses_back_to_the_profile() -> None:
    profile = profile_from_resource_name(A100_SXM4_80GB, "nvidia.com/mig-1g.10gb.me")
    assert profile.name == "1g.10gb+me"
    assert mig_profile_name_from_resource("nvidia.com/mig-2g.35gb") == "2g.35gb"


def test_non_mig_resources_parse_to_no_profile() -> None:
    assert mig_profile_name_from_resource("nvidia.com/gpu") is None
    assert mig_profile_name_from_resource("nvidia.com/mig-large") is None
    with pytest.raises(UnknownMigProfile):
        profile_from_resource_name(H100_80GB, "nvidia.com/gpu")


@pytest.mark.parametrize(
    ("product", "profile"), [(p, q) for p in MIG_PRODUCTS for q in p.mig_profiles]
)
def test_every_profile_round_trips_through_its_mixed_resource_name(
    product: object, profile: MigProfile
) -> None:
    assert isinstance(product, type(H100_80GB))
    resource = mig_resource_name(profile, MigStrategy.MIXED)
    assert profile_from_resource_name(product, resource) == profile


def test_resource_of_another_products_profile_is_refused() -> None:
    with pytest.raises(UnknownMigProfile):
        profile_from_resource_name(A100_SXM4_40GB, "nvidia.com/mig-1g.18gb")


def test_unknown_profile_message_lists_the_valid_profiles() -> None:
    with pytest.raises(UnknownMigProfile) as caught:
        profile_by_name(A100_SXM4_40GB, "1g.20gb")
    assert str(caught.value) == (
        "A100-SXM4-40GB has no MIG profile '1g.20gb'; valid profiles: "
        "1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb"
    )
    assert caught.value.valid == A100_SXM4_40GB.profile_names


def test_unknown_profile_on_a_card_without_mig_says_so() -> None:
    with pytest.raises(UnknownMigProfile, match="L40S does not support MIG"):
        profile_by_name(L40S, "1g.12gb")


def test_profile_by_name_accepts_the_resource_spelling_of_plus_me() -> None:
    assert profile_by_name(B200, "1g.23gb.me").name == "1g.23gb+me"


def test_unknown_product_name_lists_the_catalogue() -> None:
    with pytest.raises(UnknownGpuProduct, match="known products: A100-SXM4-40GB"):
        product_by_name("V100")
    assert product_by_name("H200-141GB") == H200_141GB


def test_gpu_equivalent_is_one_for_a_full_gpu_and_compute_sevenths_for_mig() -> None:
    assert gpu_equivalent(None) == 1.0
    assert gpu_equivalent(profile_by_name(H100_80GB, "3g.40gb")) == pytest.approx(3 / 7)
    assert gpu_equivalent(profile_by_name(H100_80GB, "1g.10gb+me")) == pytest.approx(1 / 7)
    assert gpu_equivalent(profile_by_name(H100_80GB, "7g.80gb")) == 1.0


def test_catalogue_and_planner_import_no_django() -> None:
    code = (
        "import sys;"
        "import scheduler_bridge.inventory.catalogue, scheduler_bridge.mig.planner;"
        "sys.exit(any(m == 'django' or m.startswith('django.') for m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, check=False)
    assert result.returncode == 0
