"""GPUs a driver splits on claim (partitionable devices): one GPU each, laid out by the
MIG planner or by what claims hold, never the sum of the alternatives it publishes."""

from __future__ import annotations

import pytest

from scheduler_bridge.dra.flavours import devices_by_node, gpus_by_node
from scheduler_bridge.dra.objects import Device, counter_sets_of_slices, devices_of_slices
from scheduler_bridge.dra.partitions import (
    WHOLE,
    PartitionableGpu,
    layout_devices,
    most_of,
    partition_layout,
    partitionable_gpus,
)
from scheduler_bridge.inventory.catalogue import product_by_name
from scheduler_bridge.mig.layouts import MigLayout
from tests.dra.devices import partitionable_gpu_slices

H100 = product_by_name("H100-80GB")
SEVEN_SMALL = MigLayout.of(*(("1g.10gb", start) for start in range(7)))


@pytest.fixture
def devices() -> list[Device]:
    found, unreadable = devices_of_slices(partitionable_gpu_slices("split-1", gpus=2))
    assert unreadable == []
    return found


def _gpus(
    devices: list[Device], allocated: frozenset[tuple[str, str, str]] = frozenset()
) -> list[PartitionableGpu]:
    counters = counter_sets_of_slices(partitionable_gpu_slices("split-1", gpus=2))
    return partitionable_gpus(devices, allocated, counter_sets=counters)["split-1"]


def test_each_gpu_is_one_gpu_whatever_it_could_be_split_into(devices: list[Device]) -> None:
    assert len(devices) == 2 * (1 + 7 + 2)
    gpus = _gpus(devices)
    assert [g.counter_set[2] for g in gpus] == ["gpu-0-counter-set", "gpu-1-counter-set"]
    assert gpus[0].published == {WHOLE: 1, "1g.10gb": 7, "3g.40gb": 2}
    assert gpus[0].counters is not None and gpus[0].counters["memory-slice-7"] == 1
    assert {p: f.name for p, f in gpus[0].flavours.items()} == {
        WHOLE: "h100-80gb",
        "1g.10gb": "h100-80gb-mig-1g.10gb",
        "3g.40gb": "h100-80gb-mig-3g.40gb",
    }
    # counted through their GPUs, never each (that would be 20 devices on 2 GPUs)
    assert devices_by_node(devices) == {}
    assert gpus_by_node(devices) == {}


def test_a_gpu_offers_the_most_of_each_profile_one_layout_can_hold(devices: list[Device]) -> None:
    gpu = _gpus(devices)[0]
    assert [most_of(gpu, H100, p) for p in (WHOLE, "1g.10gb", "3g.40gb")] == [1, 7, 2]
    # a profile the driver does not publish offers nothing
    assert most_of(gpu, H100, "2g.20gb") == 0


def test_the_planners_layout_holds_until_claims_hold_something_else(
    devices: list[Device],
) -> None:
    idle = _gpus(devices)[0]
    assert partition_layout(idle, H100, None) == MigLayout.disabled()
    assert partition_layout(idle, H100, SEVEN_SMALL) == SEVEN_SMALL
    offered = {f.name: n for f, n in layout_devices(idle, SEVEN_SMALL).items()}
    assert offered == {"h100-80gb-mig-1g.10gb": 7}
    assert {f.name: n for f, n in layout_devices(idle, MigLayout.disabled()).items()} == {
        "h100-80gb": 1
    }
    # an illegal layout (two 3g instances overlapping) is not taken
    overlapping = MigLayout.of(("3g.40gb", 0), ("3g.40gb", 0))
    assert partition_layout(idle, H100, overlapping) == MigLayout.disabled()


def test_what_claims_hold_decides_when_the_plan_would_drop_it(devices: list[Device]) -> None:
    held = frozenset({("gpu.nvidia.com", "split-1-split", "gpu-0-mig-3g40gb-4")})
    gpu, other = _gpus(devices, held)
    assert gpu.in_use == {"3g.40gb": 1} and other.in_use == {}
    # the plan (seven 1g) has no 3g: the GPU counts as what is held
    layout = partition_layout(gpu, H100, SEVEN_SMALL)
    assert layout is not None and layout.counts() == {"3g.40gb": 1}
    # a plan that keeps it, with room beside it on the counters, holds
    kept = MigLayout.of(("3g.40gb", 4), ("1g.10gb", 0), ("1g.10gb", 1))
    assert partition_layout(gpu, H100, kept) == kept
    # held whole: whole, whatever the plan
    whole = _gpus(devices, frozenset({("gpu.nvidia.com", "split-1-split", "gpu-0")}))[0]
    assert partition_layout(whole, H100, SEVEN_SMALL) == MigLayout.disabled()


def test_a_plan_is_checked_against_the_counters_held_partitions_use(
    devices: list[Device],
) -> None:
    """The scheduler put two 1g partitions on memory slices 0 and 4. A plan keeping two
    1g and adding a 3g counts right but no 3g placement is free on the counters (each
    half of the GPU has a slice taken): not taken, the GPU counts as what is held. A
    plan adding 1g slices beside them is."""
    held = frozenset(
        {
            ("gpu.nvidia.com", "split-1-split", "gpu-0-mig-1g10gb-0"),
            ("gpu.nvidia.com", "split-1-split", "gpu-0-mig-1g10gb-4"),
        }
    )
    gpu = _gpus(devices, held)[0]
    with_half = MigLayout.of(("1g.10gb", 0), ("1g.10gb", 1), ("3g.40gb", 4))
    layout = partition_layout(gpu, H100, with_half)
    assert layout is not None and layout.counts() == {"1g.10gb": 2}
    assert partition_layout(gpu, H100, SEVEN_SMALL) == SEVEN_SMALL
    # the other GPU is idle: the same plan is taken there
    assert partition_layout(_gpus(devices, held)[1], H100, with_half) == with_half


def test_partitions_held_on_a_gpu_tidegate_cannot_lay_out_offer_only_themselves(
    devices: list[Device],
) -> None:
    held = frozenset({("gpu.nvidia.com", "split-1-split", "gpu-0-mig-1g10gb-2")})
    gpu = _gpus(devices, held)[0]
    assert partition_layout(gpu, None, None) is None  # a product outside the catalogue
    offered = {f.name: n for f, n in layout_devices(gpu, None).items()}
    assert offered == {"h100-80gb-mig-1g.10gb": 1}  # never the whole GPU beside it
    idle = _gpus(devices)[1]
    assert partition_layout(idle, None, None) == MigLayout.disabled()


def test_gpus_are_in_the_order_of_their_index_not_of_their_counter_set_names() -> None:
    slices = partitionable_gpu_slices("split-1", gpus=11)
    found, _ = devices_of_slices(slices)
    gpus = partitionable_gpus(found)["split-1"]
    assert [g.counter_set[2] for g in gpus][:3] == [
        "gpu-0-counter-set",
        "gpu-1-counter-set",
        "gpu-2-counter-set",
    ]
    assert gpus[10].counter_set[2] == "gpu-10-counter-set"
